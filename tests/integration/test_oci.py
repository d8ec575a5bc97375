"""An OCI registry as the archive (issue 60): `wlock archive --to oci+http://...` pushes each
locked repo as a CNCF ModelPack artifact into a real registry (Debian's docker-registry on
loopback), skopeo (an independent client) reads what was pushed, a second push uploads no
blob (counted in the registry's access log), and `wlock sync` restores from the registry with
the Hub stopped: `check` passes and huggingface_hub loads offline; a blob altered in the
registry's storage is refused and the Hub's bytes are taken instead."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Hub, run_wlock, write_project
from tests.integration.test_archive import (
    BIG,
    assert_loads_offline,
    dead_endpoint,
    model,
    project,  # noqa: F401 - the locked and synced project fixture
    wlock,
)
from tests.registry import Registry, registry
from wlock.lock.lockfile import read_lock

pytestmark = pytest.mark.newest_only(
    "the registry's client (oras-py 0.2.43 and the requests it speaks through) is the same"
    " release on both stacks; the Hub's side and the loaders, which the stacks differ in,"
    " the oldest stack tests in the other modules")


@pytest.fixture
def local_registry(tmp_path: Path) -> Iterator[Registry]:
    with registry(tmp_path / "registry") as server:
        yield server


def test_push_is_modelpack_with_the_locks_digests_and_a_second_push_uploads_nothing(
        project: Path, local_registry: Registry) -> None:  # noqa: F811
    url = local_registry.url("ml/weights")
    done = wlock(project, "archive", "--to", url, "--json")
    assert done.code == 0, done.stderr
    first = json.loads(done.stdout)
    lock = read_lock(project / "weights.lock")
    assert len(first["artifacts"]) == len(lock.repos)
    assert first["uploaded_bytes"] >= BIG
    repo = model(project)
    manifest = local_registry.inspect(f"ml/weights/{repo.id}:{repo.revision}".lower())
    assert manifest["artifactType"] == "application/vnd.cncf.model.manifest.v1+json"
    assert manifest["config"]["mediaType"] == "application/vnd.cncf.model.config.v1+json"  # type: ignore[index]
    layers = {layer["annotations"]["org.cncf.model.filepath"]: layer
              for layer in manifest["layers"]}  # type: ignore[attr-defined]
    assert set(layers) == {f.path for f in repo.files}
    for f in repo.files:
        layer = layers[f.path]
        assert layer["size"] == f.size
        if f.hash_kind == "sha256":  # an LFS file: the registry's digest is the lock's hash
            assert layer["digest"] == f"sha256:{f.etag}"
        assert layer["annotations"][f"dev.wlock.{f.hash_kind}"] == f.etag
    assert layers["model.safetensors"]["mediaType"] == "application/vnd.cncf.model.weight.v1.raw"
    assert layers["config.json"]["mediaType"] == \
        "application/vnd.cncf.model.weight.config.v1.raw"
    annotations = manifest["annotations"]
    assert annotations["org.opencontainers.image.revision"] == repo.revision  # type: ignore[index]
    # skopeo copies it whole, as any OCI client would.
    copied = project.parent / "copied"
    local_registry.skopeo("copy", "--src-tls-verify=false",
                          f"docker://{local_registry.address}/ml/weights/{repo.id.lower()}:"
                          f"{repo.revision}", f"oci:{copied}:x")
    assert (copied / "index.json").exists()

    uploads = local_registry.requests("PUT", "/blobs/uploads/")
    again = json.loads(wlock(project, "archive", "--to", url, "--json").stdout)
    assert again["uploaded_files"] == 0 and again["present_files"] > 0
    assert local_registry.requests("PUT", "/blobs/uploads/") == uploads  # no blob again


def test_sync_from_the_registry_with_the_hub_stopped(project: Path,  # noqa: F811
                                                     local_registry: Registry) -> None:
    url = local_registry.url("ml/weights")
    assert wlock(project, "archive", "--to", url).code == 0
    cache = project.parent / "cache"
    shutil.rmtree(cache)
    done = wlock(project, "sync", "--offline", "--archive", url, "--endpoint", dead_endpoint(),
                 "--json")
    assert done.code == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["fetched_bytes"] == 0
    assert report["restored"][f"registry {url}"]["bytes"] >= BIG
    assert wlock(project, "check").code == 0
    assert_loads_offline(project, cache)


def test_a_blob_altered_in_the_registry_is_refused(hub: Hub, project: Path,  # noqa: F811
                                                   local_registry: Registry) -> None:
    url = local_registry.url("ml/weights")
    assert wlock(project, "archive", "--to", url).code == 0
    repo = model(project)
    big = next(f for f in repo.files if f.path == "model.safetensors")
    [stored] = local_registry.storage.glob(f"**/blobs/sha256/*/{big.etag}/data")
    data = bytearray(stored.read_bytes())
    data[100] ^= 0xFF
    stored.write_bytes(bytes(data))
    cache = project.parent / "cache"
    shutil.rmtree(cache)
    done = wlock(project, "sync", "--archive", url, "--endpoint", hub.endpoint, "--json")
    assert done.code == 0, done.stderr  # the Hub's bytes, after the registry's were refused
    report = json.loads(done.stdout)
    [refused] = report["refused"]
    assert refused.startswith(f"{repo.id}/model.safetensors: registry {url}: wrong bytes")
    assert report["fetched_files"] == 1 and report["fetched_bytes"] == big.size
    assert wlock(project, "check").code == 0
    blob = cache / f"models--{repo.id.replace('/', '--')}" / "blobs" / big.etag
    assert blob.stat().st_size == big.size


PIECE = 256 * 1024  # the chunk the resumption tests push in: 160 chunks for the big file


def stopped_push(folder: Path, server: Registry, url: str, how: int) -> int:
    """`wlock archive` in chunks of PIECE, sent signal `how` once the registry has taken 30
    chunks; its exit status."""
    import os
    import subprocess
    import sys
    import time

    push = subprocess.Popen([sys.executable, "-m", "wlock", "archive", "--to", url,
                             "--cache-dir", str(folder.parent / "cache")], cwd=folder,
                            env={**os.environ, "WLOCK_OCI_CHUNK": str(PIECE)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while server.requests("PATCH", "/blobs/uploads/") < 30:
        assert push.poll() is None, "the push ended before it could be stopped"
        assert time.monotonic() < deadline
        time.sleep(0.002)
    push.send_signal(how)
    return push.wait(timeout=30)


def pushed_again_and_restored(folder: Path, server: Registry, url: str
                              ) -> tuple[dict[str, object], int]:
    """Push again (chunks of PIECE), then restore a fresh cache from the registry with the
    Hub stopped and check it: (the push's report, the chunks it sent)."""
    import time

    time.sleep(0.2)  # the registry logs a request once it has answered it
    before = server.requests("PATCH", "/blobs/uploads/")
    done = wlock(folder, "archive", "--to", url, "--json",
                 env={"WLOCK_OCI_CHUNK": str(PIECE)})
    assert done.code == 0, done.stderr
    sent = server.requests("PATCH", "/blobs/uploads/") - before
    assert not list((folder.parent / "cache" / ".wlock-oci-uploads").glob("*.json"))
    shutil.rmtree(folder.parent / "cache")
    restored = wlock(folder, "sync", "--offline", "--archive", url, "--endpoint",
                     dead_endpoint())
    assert restored.code == 0, restored.stderr
    assert wlock(folder, "check").code == 0
    return json.loads(done.stdout), sent


def test_a_push_killed_mid_blob_completes_on_the_next_push(
        project: Path, local_registry: Registry) -> None:  # noqa: F811
    """The large file in chunks of 256 KiB (160 of them), the session kept in the cache
    after each: the push is killed (SIGKILL) mid-blob, and the next push asks the registry
    where the session stands. CNCF distribution refuses a session cut in the middle of a
    request (its signed state no longer matches the bytes it holds: BLOB_UPLOAD_INVALID), so
    that blob is sent again from its start, once; the blobs the registry holds are not, the
    kept session is gone afterwards, and the artifact is whole (a fresh sync from it passes
    check)."""
    import signal

    url = local_registry.url("ml/weights")
    assert stopped_push(project, local_registry, url, signal.SIGKILL) == -signal.SIGKILL
    assert list((project.parent / "cache" / ".wlock-oci-uploads").glob("*.json"))  # kept
    report, sent_again = pushed_again_and_restored(project, local_registry, url)
    assert report["present_files"] > 0  # what the killed push completed is not sent again
    # At most the blob once more (and the request the kill cut, logged when it ended).
    assert sent_again <= BIG // PIECE + 1, sent_again


def test_a_session_left_between_chunks_is_continued(project: Path,  # noqa: F811
                                                    local_registry: Registry) -> None:
    """A push stopped between two chunks leaves a session the registry can go on with: the
    next push asks it how far it got (GET: `Range: 0-N`) and sends only the chunks after N.
    The first 60 chunks are sent here as wlock sends them, its session file written as it
    writes it."""
    import oras.provider

    from wlock.archive.oci import Target, _container, _session_file

    piece = PIECE
    url = local_registry.url("ml/weights")
    target = Target.parse(url)
    repo = model(project)
    big = next(f for f in repo.files if f.path == "model.safetensors")
    digest = f"sha256:{big.etag}"
    cache = project.parent / "cache"
    source = cache / f"models--{repo.id.replace('/', '--')}" / "blobs" / big.etag
    registry = oras.provider.Registry(hostname=target.registry, insecure=True)
    container = _container(registry, target, repo)
    opened = registry.do_request(f"http://{container.upload_blob_url()}", "POST",
                                 headers={"Content-Length": "0"})
    session = registry._get_location(opened, container)
    with source.open("rb") as f:
        for n in range(60):
            data = f.read(piece)
            sent = registry.do_request(session, "PATCH", data=data, headers={
                "Content-Range": f"{n * piece}-{n * piece + len(data) - 1}",
                "Content-Type": "application/octet-stream"})
            assert sent.status_code == 202, sent.text
            session = registry._get_location(sent, container)
    state = _session_file(cache, target, repo, digest)
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text(json.dumps({"session": session, "offset": 60 * piece}))
    _, sent = pushed_again_and_restored(project, local_registry, url)
    assert sent == BIG // piece - 60


def test_basic_auth_from_the_users_credentials_file(project: Path,  # noqa: F811
                                                    tmp_path: Path) -> None:
    """A registry with basic auth: without credentials the push exits 5 naming the registry
    and `docker login`; with the file `podman login` writes ($REGISTRY_AUTH_FILE) it pushes,
    and the sync reads back with it. The password is never printed."""
    import base64

    password = "s3cret-registry-password"
    with registry(tmp_path / "secured", user=("alice", password)) as secured:
        url = secured.url("ml/weights")
        refused = wlock(project, "archive", "--to", url)
        assert refused.code == 5, refused.stderr
        assert "the registry asks for a user and password, and none for " \
            f"{secured.address} is in" in refused.stderr
        assert f"docker login {secured.address}" in refused.stderr
        auth = tmp_path / "auth.json"
        token = base64.b64encode(f"alice:{password}".encode()).decode()
        auth.write_text(json.dumps({"auths": {secured.address: {"auth": token}}}))
        wrong = tmp_path / "wrong.json"
        wrong.write_text(json.dumps({"auths": {secured.address: {"auth": base64.b64encode(
            b"alice:not-it").decode()}}}))
        denied = wlock(project, "archive", "--to", url, env={"REGISTRY_AUTH_FILE": str(wrong)})
        assert denied.code == 5 and "refused the credentials (HTTP 401)" in denied.stderr, \
            denied.stderr
        env = {"REGISTRY_AUTH_FILE": str(auth)}
        pushed = wlock(project, "archive", "--to", url, "--json", env=env)
        assert pushed.code == 0, pushed.stderr
        shutil.rmtree(project.parent / "cache")
        restored = wlock(project, "sync", "--offline", "--archive", url, "--endpoint",
                         dead_endpoint(), env=env)
        assert restored.code == 0, restored.stderr
        for result in (refused, denied, pushed, restored):
            assert password not in result.stdout + result.stderr
            assert token not in result.stdout + result.stderr


def test_a_model_pulled_from_the_registry_loads_with_from_pretrained_offline(
        hub: Hub, tmp_path: Path, local_registry: Registry) -> None:
    """The example Hub's real tiny language model, pushed, its cache wiped, synced from the
    registry with the Hub stopped: transformers' from_pretrained loads it offline at the
    locked commit. A second model holding the same weights gets them by a cross-repository
    mount, not uploaded again; `--tag` names each artifact too."""
    import os
    import subprocess
    import sys

    pytest.importorskip("transformers")
    folder = write_project(tmp_path / "project", '[[model]]\nid = "acme/tiny-lm"\n')
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=folder).code == 0
    lm = read_lock(folder / "weights.lock").find("model", "acme/tiny-lm")
    assert lm is not None
    weights = next(f for f in lm.files if f.path.endswith(".safetensors"))
    cache = tmp_path / "cache"
    assert run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                     cwd=folder).code == 0
    copy = hub.unique_id("lm-copy")
    stored = cache / "models--acme--tiny-lm" / "blobs" / weights.etag
    hub.builder.commit("model", copy, {"model.safetensors": stored.read_bytes(),
                                       "README.md": b"# a copy\n"}, lfs=True)
    with (folder / "weights.toml").open("a") as f:
        f.write(f'\n[[model]]\nid = "{copy}"\nloader = "all"\n')
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=folder).code == 0
    assert run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                     cwd=folder).code == 0
    url = local_registry.url("ml")
    pushed = run_wlock("archive", "--to", url, "--tag", "release-1", "--json",
                       "--cache-dir", str(cache), cwd=folder)
    assert pushed.code == 0, pushed.stderr
    report = json.loads(pushed.stdout)
    assert report["mounted_files"] == 1, report
    assert local_registry.requests("POST", f"mount=sha256%3A{weights.etag}") + \
        local_registry.requests("POST", f"mount=sha256:{weights.etag}") == 1
    tagged = local_registry.inspect("ml/acme/tiny-lm:release-1")
    assert tagged["annotations"]["org.opencontainers.image.revision"] == lm.revision  # type: ignore[index]
    shutil.rmtree(cache)
    synced = run_wlock("sync", "--offline", "--archive", url, "--endpoint", dead_endpoint(),
                       "--cache-dir", str(cache), cwd=folder)
    assert synced.code == 0, synced.stderr
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(cache)}
    loaded = subprocess.run([sys.executable, "-c", (
        "import sys\nfrom transformers import AutoModelForCausalLM\n"
        "m = AutoModelForCausalLM.from_pretrained('acme/tiny-lm', revision=sys.argv[1])\n"
        "print(type(m).__name__)\n"), lm.revision], env=env, capture_output=True, text=True,
        timeout=300)
    assert loaded.returncode == 0, loaded.stderr[-2000:]


def test_a_push_stopped_by_sigterm_goes_on_from_its_last_chunk(
        project: Path, local_registry: Registry) -> None:  # noqa: F811
    """SIGTERM (a pod evicted, Ctrl-C alike) mid-blob: the chunk in flight ends, the session
    is kept, the command exits 143; the next push asks the registry how far it got and sends
    only the rest (seen failing with the blob sent to its end after the signal, and with the
    whole blob sent again when the signal cut a request)."""
    import signal

    url = local_registry.url("ml/weights")
    assert stopped_push(project, local_registry, url, signal.SIGTERM) == 143
    # Stopped after the chunk in flight, not after the blob: its session is kept.
    assert list((project.parent / "cache" / ".wlock-oci-uploads").glob("*.json"))
    _, sent_again = pushed_again_and_restored(project, local_registry, url)
    assert sent_again <= BIG // PIECE - 25, sent_again  # the rest only
