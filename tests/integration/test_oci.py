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

from tests.conftest import Hub
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
