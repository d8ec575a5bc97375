"""Upgrades that fetch only the chunks that changed (wlock.cache.upgrade), on the emulator's
Xet: bytes counted by the emulator on every path a client can take (xorb ranges, the bridge),
the result judged by the lock's sha256, `wlock check` and huggingface_hub's offline load."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import hf_xet
import pytest
from huggingface_hub import hf_hub_download

from tests.conftest import Hub, kill_9_mid_sync, random_weights, run_wlock, write_project
from wlock.hubserver.store import StoreBuilder
from wlock.lock.lockfile import read_lock
from wlock.xet.chunking import boundaries

SHARD = "model.safetensors"


def cache() -> Path:
    return Path(os.environ["HF_HOME"]) / "hub"


def served(hub: Hub, *names: str) -> int:
    """Bytes of file content the emulator served: xorb ranges and the bridge's objects."""
    return sum(e["bytes"] for e in hub.process.stats()["log"]
               if e["path"].startswith(("/xorbs/", "/objects/")))


def changed(data: bytes, every: int) -> bytes:
    """`data` with a byte flipped in the middle of one chunk in `every`."""
    cuts = [0, *boundaries(data)]
    out = bytearray(data)
    for k in range(0, len(cuts) - 1, every):
        out[(cuts[k] + cuts[k + 1]) // 2] ^= 0xFF
    return bytes(out)


def upgraded(hub: Hub, tmp_path: Path, old: dict[str, bytes], new: dict[str, bytes],
             kind: str = "model", *extra: str) -> tuple[Path, dict, str]:
    """Lock and sync `old`, commit `new` over it, lock --upgrade and sync --json again;
    the project, the second sync's JSON report and the new commit."""
    repo_id = hub.unique_id("upgrade")
    builder = StoreBuilder(hub.builder.root, xet=True)
    builder.commit(kind, repo_id, old)
    project = write_project(tmp_path / "p", f'[[{kind}]]\nid = "{repo_id}"\n')
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    assert run_wlock("sync", "--endpoint", hub.endpoint, cwd=project).code == 0
    sha = builder.commit(kind, repo_id, new)
    hub.process.reset_stats()
    dry = run_wlock("lock", "--upgrade", "--dry-run", "--endpoint", hub.endpoint, cwd=project)
    assert dry.code == 0, dry.stderr
    # The figure the dry run gives, read back in bytes (human_size: 3 significant digits).
    said = re.search(r"A sync would download ([\d.]+) (B|kB|MB|GB)", dry.stderr + dry.stdout)
    assert said, dry.stderr
    predicted = float(said.group(1)) * {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9}[said.group(2)]
    assert served(hub) == 0  # metadata only
    # The reviewer's report says the same, for this repo (chunk-exact where Xet allows).
    as_json = run_wlock("lock", "--upgrade", "--dry-run", "--json", "--endpoint",
                        hub.endpoint, cwd=project)
    [entry] = json.loads(as_json.stdout)["report"]
    here = entry["cache_bytes"]
    result = run_wlock("lock", "--upgrade", "--endpoint", hub.endpoint, cwd=project)
    assert result.code == 0, result.stderr
    hub.process.reset_stats()
    result = run_wlock("sync", "--json", "--endpoint", hub.endpoint, *extra, cwd=project)
    assert result.code == 0, result.stderr
    report = json.loads(result.stdout)
    fetched = served(hub)
    if report["upgraded"]["files"]:  # the dry run's figure within 10% of what was fetched
        assert abs(predicted - fetched) <= 0.1 * fetched, (predicted, fetched)
        assert abs(here - fetched) <= 0.1 * fetched, (here, fetched)
    return project, report, sha


def test_an_upgrade_fetches_only_the_changed_chunks(hub: Hub, tmp_path: Path) -> None:
    before = random_weights(24 * 2**20)
    after = changed(before, 10)
    project, report, sha = upgraded(hub, tmp_path, {SHARD: before, "config.json": b"{}"},
                                    {SHARD: after})
    assert report["upgraded"]["files"] == 1, report
    fetched = served(hub)
    assert fetched <= 0.15 * len(after), fetched
    assert report["upgraded"]["fetched_bytes"] == fetched
    assert report["upgraded"]["copied_bytes"] >= 0.85 * len(after)
    # Only the xorb ranges of the new chunks: nothing through the bridge.
    log = hub.process.stats()["log"]
    assert not [e for e in log if e["path"].startswith("/objects/")]
    # The lock names the shard's Xet hash (the Hub's, as hf_xet computes it from the bytes),
    # and the cached blob is named by its own: the CAS was asked directly, without a HEAD.
    entry = next(f for f in read_lock(project / "weights.lock").repos[0].files
                 if f.path == SHARD)
    (tmp_path / "after").write_bytes(after)
    [info] = hf_xet.hash_files([str(tmp_path / "after")])
    assert entry.xet == info.hash
    assert not [e for e in log if e["method"] == "HEAD" and SHARD in e["path"]]
    assert run_wlock("check", cwd=project).code == 0
    repo_id = report["repos"][0]["id"]
    path = hf_hub_download(repo_id, SHARD, revision=sha, local_files_only=True,
                           cache_dir=cache())
    assert Path(path).read_bytes() == after


def test_a_dataset_file_that_grew_by_appended_rows(hub: Hub, tmp_path: Path) -> None:
    rows = b"".join(json.dumps({"id": n, "text": os.urandom(40).hex()}).encode() + b"\n"
                    for n in range(120_000))
    more = b"".join(json.dumps({"id": n, "text": os.urandom(40).hex()}).encode() + b"\n"
                    for n in range(120_000, 132_000))
    name = "data/train.jsonl"
    project, report, sha = upgraded(hub, tmp_path, {name: rows}, {name: rows + more},
                                    "dataset")
    assert report["upgraded"]["files"] == 1, report
    # The new rows, and the one chunk at the old end that now runs on into them.
    assert served(hub) <= len(more) + 2 * 128 * 1024, (served(hub), len(more))
    assert run_wlock("check", cwd=project).code == 0
    path = hf_hub_download(report["repos"][0]["id"], name, repo_type="dataset", revision=sha,
                           local_files_only=True, cache_dir=cache())
    assert Path(path).read_bytes() == rows + more


@pytest.mark.parametrize("fault", ["corrupt", "truncate"])
def test_wrong_xorb_bytes_are_refused_and_named(hub: Hub, tmp_path: Path, fault: str) -> None:
    """A xorb range with a flipped byte (it decodes, and would be copied in): refused and
    warned of; one cut short: named as not arrived. Either way the file is then downloaded
    whole through the bridge, verified."""
    before = random_weights(12 * 2**20)
    after = changed(before, 10)
    hub.process.faults({"match": "^/xorbs/", "action": fault, "listener": "cdn"})
    project, report, sha = upgraded(hub, tmp_path, {SHARD: before}, {SHARD: after})
    assert report["upgraded"]["files"] == 0
    [whole] = report["upgraded"]["downloaded_whole"]
    assert whole.startswith(f"{report['repos'][0]['id']}/{SHARD}: downloaded whole (")
    if fault == "corrupt":
        [line] = report["refused"]
        assert SHARD in line and "chunk-level upgrade" in line and "refused" in line, line
    else:
        assert "did not arrive" in whole and not report["refused"], report
    assert report["fetched_files"] == 1  # the bridge
    assert run_wlock("check", cwd=project).code == 0
    path = hf_hub_download(report["repos"][0]["id"], SHARD, revision=sha,
                           local_files_only=True, cache_dir=cache())
    assert Path(path).read_bytes() == after


def test_a_cached_blob_changed_on_disk_is_not_copied(hub: Hub, tmp_path: Path) -> None:
    """The cached revision's blob with a byte flipped since it was synced: its chunks are not
    the Hub's, so none is copied (the final hash would refuse them anyway)."""
    before = random_weights(12 * 2**20)
    repo_id = hub.unique_id("upgrade-rot")
    builder = StoreBuilder(hub.builder.root, xet=True)
    builder.commit("model", repo_id, {SHARD: before})
    project = write_project(tmp_path / "p", f'[[model]]\nid = "{repo_id}"\n')
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    assert run_wlock("sync", "--endpoint", hub.endpoint, cwd=project).code == 0
    [blob] = (Path(os.environ["HF_HOME"]) / "hub").glob("models--*upgrade-rot*/blobs/*")
    rotten = bytearray(before)
    rotten[5_000_000] ^= 1
    blob.chmod(0o644)
    blob.write_bytes(bytes(rotten))
    builder.commit("model", repo_id, {SHARD: changed(before, 10)})
    assert run_wlock("lock", "--upgrade", "--endpoint", hub.endpoint, cwd=project).code == 0
    result = run_wlock("-v", "sync", "--endpoint", hub.endpoint, cwd=project)
    assert result.code == 0, result.stderr
    assert "not a file the Hub's CAS holds" in result.stderr + result.stdout
    assert run_wlock("check", cwd=project).code == 0


def test_the_lock_records_xet_hashes_where_the_hub_lists_them(hub: Hub, tmp_path: Path
                                                             ) -> None:
    """From the tree listing (repo info's siblings carry none); an endpoint without that
    route gives a lock without them (from siblings, complete beyond doubt at 2 files); one
    that keeps failing fails the lock, naming the repo, rather than writing a lock that
    depends on the moment."""
    data = random_weights(3_000_000)
    repo_id = hub.unique_id("xet-lock")
    StoreBuilder(hub.builder.root, xet=True).commit("model", repo_id, {
        SHARD: data, "config.json": b"{}"})
    (tmp_path / "shard").write_bytes(data)
    [info] = hf_xet.hash_files([str(tmp_path / "shard")])
    project = write_project(tmp_path / "p", f'[[model]]\nid = "{repo_id}"\n')
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    files = {f.path: f for f in read_lock(project / "weights.lock").repos[0].files}
    assert files[SHARD].xet == info.hash and files["config.json"].xet is None
    text = (project / "weights.lock").read_text()
    assert f'xet = "{info.hash}"' in text

    hub.process.faults({"match": "/tree/", "action": "status", "status": 404})
    assert run_wlock("lock", "--upgrade", "--endpoint", hub.endpoint, cwd=project).code == 0
    assert all(f.xet is None for f in read_lock(project / "weights.lock").repos[0].files)
    hub.process.faults({"match": "/tree/", "action": "status", "status": 503})
    failed = run_wlock("lock", "--upgrade", "--endpoint", hub.endpoint, cwd=project)
    assert failed.code == 5, failed.stderr
    assert repo_id in failed.stderr


def locked_upgrade(hub: Hub, tmp_path: Path, name: str, before: bytes, after: bytes
                   ) -> tuple[Path, str, str]:
    """A repo on Xet whose shard is `before`, locked and synced; then `after` committed and
    `lock --upgrade` run, not synced. The project, the repo and the new commit."""
    repo_id = hub.unique_id(name)
    builder = StoreBuilder(hub.builder.root, xet=True)
    builder.commit("model", repo_id, {SHARD: before})
    project = write_project(tmp_path / "p", f'[[model]]\nid = "{repo_id}"\n')
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    assert run_wlock("sync", "--endpoint", hub.endpoint, cwd=project).code == 0
    sha = builder.commit("model", repo_id, {SHARD: after})
    assert run_wlock("lock", "--upgrade", "--endpoint", hub.endpoint, cwd=project).code == 0
    return project, repo_id, sha


def test_concurrent_syncs_upgrade_a_shared_cache_once(hub: Hub, tmp_path: Path) -> None:
    """Four syncs of the upgraded lock into one cache: one puts the file together, the
    others wait for it (the blob's lock) and find it published; the changed chunks cross the
    network once."""
    import subprocess
    import sys

    before = random_weights(12 * 2**20)
    after = changed(before, 10)
    project, repo_id, sha = locked_upgrade(hub, tmp_path, "upgrade-shared", before, after)
    hub.process.reset_stats()
    hub.process.faults({"action": "delay", "listener": "cdn", "match": "/xorbs/",
                        "delay_ms": 300})
    procs = [subprocess.Popen([sys.executable, "-m", "wlock", "sync", "--json", "--endpoint",
                               hub.endpoint], cwd=project, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    reports = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        reports.append(json.loads(out))
    assert sum(r["upgraded"]["files"] for r in reports) == 1, reports
    assert sum(r["by_other_syncs"]["files"] for r in reports) == 3, reports
    fetched = served(hub)
    assert fetched == next(r["upgraded"]["fetched_bytes"] for r in reports
                           if r["upgraded"]["files"])
    assert fetched <= 0.15 * len(after)
    assert run_wlock("check", cwd=project).code == 0
    path = hf_hub_download(repo_id, SHARD, revision=sha, local_files_only=True,
                           cache_dir=cache())
    assert Path(path).read_bytes() == after


def test_kill_9_mid_upgrade_leaves_nothing_unverified(hub: Hub, tmp_path: Path) -> None:
    before = random_weights(24 * 2**20)
    after = changed(before, 3)  # a third of the chunks: seconds at 1 MB/s
    project, repo_id, sha = locked_upgrade(hub, tmp_path, "upgrade-kill", before, after)
    new = next(f for f in read_lock(project / "weights.lock").repos[0].files if f.path == SHARD)
    hub.process.reset_stats()
    hub.process.faults(link={"mb_per_s": 1, "listener": "cdn"})
    kill_9_mid_sync(("sync", "--endpoint", hub.endpoint), project, lambda: served(hub),
                    500_000, "the upgrade")
    [blobs] = cache().glob(f"models--{repo_id.replace('/', '--')}/blobs")
    assert not (blobs / new.etag).exists()  # nothing unverified is visible
    assert not (blobs.parent / "snapshots" / sha).exists()
    hub.process.faults()
    result = run_wlock("sync", "--json", "--endpoint", hub.endpoint, cwd=project)
    assert result.code == 0, result.stderr
    assert json.loads(result.stdout)["upgraded"]["files"] == 1
    assert run_wlock("check", cwd=project).code == 0
    path = hf_hub_download(repo_id, SHARD, revision=sha, local_files_only=True,
                           cache_dir=cache())
    assert Path(path).read_bytes() == after


def test_an_upgraded_pickle_is_judged_before_it_is_published(hub: Hub, tmp_path: Path) -> None:
    """A pickle put together from its cached revision and the changed chunks passes sync's
    gate like a download (a guard: published without it, the suite stayed green). The new
    revision runs posix.system; a pull request records it as no pickle under safe-imports:
    the upgrade is refused before it is published."""
    import pickle

    from tests.pickle_corpus import EVIL, MARKER, _inject, reduce

    weights = random_weights(12 * 2**20)
    before = pickle.dumps({"w": weights}, protocol=4)
    after = _inject(before, reduce(EVIL))
    repo_id = hub.unique_id("upgrade-gate")
    builder = StoreBuilder(hub.builder.root, xet=True)
    builder.commit("model", repo_id, {"weights.pkl": before, "config.json": b"{}"})
    project = write_project(tmp_path / "p", f'[[model]]\nid = "{repo_id}"\n\n'
                            '[tool.wlock.policy]\npickle = "allow"\n')
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    assert run_wlock("sync", "--endpoint", hub.endpoint, cwd=project).code == 0
    builder.commit("model", repo_id, {"weights.pkl": after})
    assert run_wlock("lock", "--upgrade", "--endpoint", hub.endpoint, cwd=project).code == 0
    lock_file = project / "weights.lock"
    text = lock_file.read_text()
    assert 'imports = ["posix.system"]' in text
    lock_file.write_text(text.replace('imports = ["posix.system"]', "not-a-pickle = true"))
    manifest = project / "weights.toml"
    manifest.write_text(manifest.read_text().replace('"allow"', '"safe-imports"'))
    hub.process.reset_stats()
    synced = run_wlock("sync", "--endpoint", hub.endpoint, cwd=project)
    assert synced.code == 7, synced.stderr
    assert "weights.pkl imports posix.system" in synced.stderr, synced.stderr
    # The upgrade was the path taken: a fraction of the file fetched, as chunks.
    assert 0 < served(hub) <= 0.2 * len(after), served(hub)
    commit = read_lock(lock_file).repos[0].revision
    assert not list(cache().glob(f"models--*/snapshots/{commit}/weights.pkl"))
    assert not os.path.exists(f"/tmp/{MARKER}")
