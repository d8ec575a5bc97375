"""Locking and syncing through a real mirror (olah, from PyPI) in front of the emulator
(issue 46): olah answers repo info without `?blobs=true` (siblings without sizes or hashes)
and redirects the tree listing, so a lock must come from the listing it can page."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Hub, run_wlock, write_project
from tests.integration.test_hub_scale import many_files
from tests.olah import olah_mirror
from wlock.lock.lockfile import read_lock


@pytest.fixture
def mirror(hub: Hub) -> Iterator[str]:
    with olah_mirror(hub.endpoint) as endpoint:
        yield endpoint


def test_add_sync_and_check_through_olah_lock_every_file_with_its_hash(
        hub: Hub, mirror: str, tmp_path: Path) -> None:
    """A model and a dataset added through the mirror: every file of each, with the hash
    the emulator attests (the same lock as straight from the emulator); sync and check
    pass. Seen failing with exit 5 ("listed 'README.md' without its size and hash") while
    the lock trusted repo info's siblings."""
    project = write_project(tmp_path / "via-mirror", "")
    for args in (("acme/tiny-bert", "--loader", "all"),
                 ("--dataset", "acme/tiny-squad", "--loader", "all")):
        added = run_wlock("add", *args, "--endpoint", mirror, cwd=project, timeout=180)
        assert added.code == 0, added.stderr

    direct = write_project(tmp_path / "direct", (project / "weights.toml").read_text())
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=direct).code == 0
    through = read_lock(project / "weights.lock")
    straight = read_lock(direct / "weights.lock")
    assert [(r.id, r.revision, tuple(r.files)) for r in through.repos] == \
        [(r.id, r.revision, tuple(r.files)) for r in straight.repos]
    assert all(f.size is not None and f.etag for r in through.repos for f in r.files)

    synced = run_wlock("sync", "--endpoint", mirror, cwd=project, timeout=180)
    assert synced.code == 0, synced.stderr
    checked = run_wlock("check", cwd=project)
    assert checked.code == 0, checked.stderr


def test_a_20000_file_dataset_locks_whole_through_olah(hub: Hub, mirror: str,
                                                       tmp_path: Path) -> None:
    """The Hub's scale through a real mirror (issue 59): olah passes the tree listing's pages
    and their `Link` on, and repo info's siblings (cut at 1,000 here, as the Hub cuts them
    under load) are held against the whole listing: every one of the 20,000 files is locked,
    each with the hash the emulator attests, and the lock is the one made straight from it."""
    repo_id = many_files(hub, "dataset", "olah-scale", 20_000)
    hub.process.faults(siblings_cap=1000)
    through = write_project(tmp_path / "through", f'[[dataset]]\nid = "{repo_id}"\n'
                            'loader = "all"\n')
    locked = run_wlock("lock", "--endpoint", mirror, cwd=through, timeout=600)
    assert locked.code == 0, locked.stderr
    direct = write_project(tmp_path / "direct", (through / "weights.toml").read_text())
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=direct, timeout=600).code == 0
    mirrored = read_lock(through / "weights.lock").repos[0]
    assert len(mirrored.files) == 20_000
    assert tuple(mirrored.files) == tuple(read_lock(direct / "weights.lock").repos[0].files)


def test_a_cold_mirror_is_asked_for_each_file_once(hub: Hub, mirror: str,
                                                   tmp_path: Path) -> None:
    """Through olah with an empty cache, on a link that caps each stream (where the Hub's
    CDN earns a file many ranges): the endpoint serves the bytes itself, so each large file
    comes in one stream, and the mirror asks the Hub for the lock's bytes once (issue 51:
    the probe's and hf_transfer's ranges made it fetch 1.63x them, and take twice as long
    as snapshot_download). Counted by the emulator, upstream of the mirror."""
    import json

    from tests.conftest import random_weights

    repo_id = hub.unique_id("mirrored")
    size = 3 * 12 * 2**20
    hub.builder.commit("model", repo_id, {f"w-{n}.safetensors": random_weights(12 * 2**20)
                                          for n in range(3)})
    project = write_project(tmp_path, f'[[model]]\nid = "{repo_id}"\n')
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    hub.process.faults(link={"mb_per_s": 20, "delay_ms": 20, "listener": "cdn"})
    hub.process.reset_stats()
    synced = run_wlock("--no-progress", "sync", "--json", "--endpoint", mirror, cwd=project,
                       env={"WLOCK_PROBE_FROM": "1"}, timeout=300)
    assert synced.code == 0, synced.stderr
    report = json.loads(synced.stdout)
    assert {e["engine"] for e in report["engines"].values()} == {"http"}, report["engines"]
    assert "itself" in report["link"]["limit"], report["link"]
    served = sum(e["bytes"] for e in hub.process.stats()["log"]
                 if e["method"] == "GET" and e["status"] in (200, 206))
    assert served <= 1.05 * size, served / size
    assert run_wlock("check", cwd=project).code == 0


def test_a_mirror_is_read_in_its_own_blocks_several_at_once(hub: Hub, tmp_path: Path) -> None:
    """Through olah with an empty cache, a large file comes in the mirror's blocks, several
    at once, each asked for once: olah then fetches them upstream at the same time, one
    stream each, where one stream a file made it fetch them one after another (issue 51:
    4 x 128 MiB, 7.2 s where one stream a file took 9.8 s and snapshot_download 7.6 s).
    olah's blocks are 4 MiB here, and wlock's (WLOCK_MIRROR_BLOCK) the same. Seen upstream
    of the mirror, in the emulator's log."""
    import json

    from tests.conftest import random_weights

    block = 4 * 2**20
    repo_id = hub.unique_id("blocks")
    sizes = {"a.safetensors": 3 * block, "b.safetensors": 2 * block + 12345}
    hub.builder.commit("model", repo_id, {name: random_weights(size)
                                          for name, size in sizes.items()})
    project = write_project(tmp_path, f'[[model]]\nid = "{repo_id}"\n')
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    hub.process.faults(link={"mb_per_s": 20, "delay_ms": 20, "listener": "cdn"})
    with olah_mirror(hub.endpoint, block_size=block) as mirror:
        hub.process.reset_stats()
        synced = run_wlock("--no-progress", "sync", "--json", "--endpoint", mirror,
                           cwd=project, env={"WLOCK_MIRROR_BLOCK": str(block)}, timeout=300)
        assert synced.code == 0, synced.stderr
        log = hub.process.stats()["log"]
    report = json.loads(synced.stdout)
    assert all("blocks, up to" in e["why"] for e in report["engines"].values()), \
        report["engines"]
    by_blob: dict[str, list[dict[str, Any]]] = {}
    for entry in log:
        if entry["listener"] == "cdn" and entry["method"] == "GET" \
                and entry["status"] in (200, 206):
            by_blob.setdefault(entry["path"].split("?")[0], []).append(entry)
    # Each byte fetched upstream once, in the blocks asked for.
    assert sorted(sum(e["bytes"] for e in got) for got in by_blob.values()) \
        == sorted(sizes.values())
    for got in by_blob.values():
        size = sum(e["bytes"] for e in got)
        assert sorted(e["range"] for e in got) == sorted(
            f"bytes={start}-{min(start + block, size) - 1}" for start in range(0, size, block))
        got.sort(key=lambda e: e["start"])
        # Two blocks of the file were on their way upstream at the same time.
        assert any(later["start"] < earlier["end"]
                   for earlier, later in itertools.pairwise(got)), got
    assert run_wlock("check", cwd=project).code == 0


# -- the endpoint's own bytes, with faults: the emulator answering LFS files itself ----------

BLOCK = 4 * 2**20


def _served_by_the_endpoint(hub: Hub, tmp_path: Path, size: int) -> tuple[Path, str]:
    """A project locking one large file of `size` bytes, the emulator then answering its
    /resolve/ with the bytes (a mirror's way: Faults.lfs_served), no CDN."""
    from tests.conftest import random_weights

    repo_id = hub.unique_id("own-bytes")
    hub.builder.commit("model", repo_id, {"model.safetensors": random_weights(size)})
    project = write_project(tmp_path, f'[[model]]\nid = "{repo_id}"\n')
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    return project, repo_id


def _sync_own(hub: Hub, project: Path, *rules: dict[str, Any]) -> tuple[Any, list[Any]]:
    import json

    hub.process.faults(*rules, lfs_served="hub")
    hub.process.reset_stats()
    synced = run_wlock("--no-progress", "sync", "--json", "--endpoint", hub.endpoint,
                       cwd=project, env={"WLOCK_MIRROR_BLOCK": str(BLOCK)}, timeout=180)
    gets = [e for e in hub.process.stats()["log"] if e["method"] == "GET"
            and "/resolve/" in e["path"] and e["path"].endswith("model.safetensors")]
    return (json.loads(synced.stdout) if synced.code == 0 else synced), gets


def test_a_file_the_endpoint_serves_itself_comes_in_its_blocks(hub: Hub,
                                                               tmp_path: Path) -> None:
    size = 2 * BLOCK + 777
    project, _ = _served_by_the_endpoint(hub, tmp_path, size)
    report, gets = _sync_own(hub, project)
    assert sorted(e["range"] for e in gets) == [
        f"bytes=0-{BLOCK - 1}", f"bytes={BLOCK}-{2 * BLOCK - 1}",
        f"bytes={2 * BLOCK}-{size - 1}"]
    # Hashed as its blocks landed, never read again whole (a local disk has holes).
    assert report["read_again"] == {"files": 0, "bytes": 0}, report
    assert [e["why"] for e in report["engines"].values()] == [
        "served by the endpoint itself (a mirror), in its 4 MiB blocks, up to 3 at once"]
    assert run_wlock("check", cwd=project).code == 0


@pytest.mark.parametrize("fault", [
    {"action": "truncate", "bytes": 100},  # a block cut short (the last one is 777 bytes)
    {"action": "range", "mode": "short"},  # fewer bytes than the range asked
    {"action": "range", "mode": "wrong"},  # another range than the one asked
    # The bytes asked, but a Content-Range whose total is not the file's size, and a 206
    # with none (issue 59: both were taken for the range asked; seen passing with either
    # check removed, since the bytes themselves are right).
    {"action": "range", "mode": "total"},
    {"action": "range", "mode": "bare"},
    {"action": "corrupt"},  # one byte flipped: only the hash can tell
])
def test_a_block_gone_wrong_once_is_fetched_again(hub: Hub, tmp_path: Path,
                                                   fault: dict[str, Any]) -> None:
    """One block's answer goes wrong once: the file is fetched again and verified, never
    published with a wrong block."""
    size = 2 * BLOCK + 777
    project, repo_id = _served_by_the_endpoint(hub, tmp_path, size)
    # This repo's only: the emulator is the session's, and may hear another test's stragglers.
    report, gets = _sync_own(hub, project, {**fault, "listener": "hub", "times": 1,
                                            "match": f"{repo_id}/resolve/", "method": "GET"})
    assert isinstance(report, dict), report.stderr
    assert len(gets) > 3  # a block went wrong, and the file was asked for again
    assert run_wlock("check", cwd=project).code == 0


def test_an_endpoint_that_ignores_ranges_serves_the_file_whole(hub: Hub,
                                                               tmp_path: Path) -> None:
    size = 2 * BLOCK + 777
    project, repo_id = _served_by_the_endpoint(hub, tmp_path, size)
    report, gets = _sync_own(hub, project, {"action": "range", "mode": "ignore",
                                            "listener": "hub", "match": f"{repo_id}/resolve/"})
    assert isinstance(report, dict), report.stderr
    assert [e["why"] for e in report["engines"].values()] == ["the server ignores ranges"]
    # Its blocks' answers (the whole file each) were left at their heads; then one GET.
    assert [(e["status"], e["bytes"]) for e in gets if e["range"] is None] == [(200, size)]
    assert run_wlock("check", cwd=project).code == 0


def test_an_endpoint_that_keeps_answering_the_wrong_range_fails_naming_it(
        hub: Hub, tmp_path: Path) -> None:
    size = 2 * BLOCK + 777
    project, repo_id = _served_by_the_endpoint(hub, tmp_path, size)
    result, _ = _sync_own(hub, project, {"action": "range", "mode": "wrong",
                                         "listener": "hub", "match": f"{repo_id}/resolve/"})
    assert result.code == 5, result.stderr
    assert f"{repo_id}/model.safetensors" in result.stderr
    assert "the server answered bytes" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
