"""Many nodes, one cache, on a real distributed filesystem (issue 9): a JuiceFS volume
started by the test and mounted twice (tests/juicefs.py). Skipped, with the reason, where
FUSE or the juicefs binary is missing.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest

from tests.conftest import Hub, default_signals, random_weights, run_wlock, write_project
from tests.juicefs import Unavailable, two_node_volume
from wlock.cache.engines import LARGE_FILE
from wlock.lock.lockfile import read_lock
from wlock.models import LockedRepo

pytestmark = pytest.mark.newest_only(
    "wlock's own leases and locks on JuiceFS, over hf_transfer"
    " 0.1.9 on both stacks")

SHARD = LARGE_FILE + 4 * 1024 * 1024  # through hf_transfer
SYNCS_PER_NODE = 4


@dataclass
class Volume:
    nodes: tuple[Path, Path]  # the same volume, mounted twice


@pytest.fixture
def volume(tmp_path: Path) -> Iterator[Volume]:
    try:
        with two_node_volume(tmp_path / "jfs") as nodes:
            yield Volume(nodes=nodes)
    except Unavailable as e:
        pytest.skip(str(e))


def sharded_project(hub: Hub, tmp_path: Path, shards: int = 6, small: int = 40) -> Path:
    repo_id = hub.unique_id("shared")
    files: dict[str, bytes] = {f"model-{n:05d}.safetensors": random_weights(SHARD)
                               for n in range(shards)}
    files.update({f"extra/{n:03d}.json": random_weights(200 + n) for n in range(small)})
    files["empty.txt"] = b""
    hub.builder.commit("model", repo_id, files)
    project = write_project(tmp_path / "project", f'[[model]]\nid = "{repo_id}"\n')
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    return project


def start_sync(hub: Hub, project: Path, cache: Path, env: dict[str, str] | None = None,
               prefix: tuple[str, ...] = ()) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*prefix, sys.executable, "-m", "wlock", "sync", "--endpoint", hub.endpoint,
         "--cache-dir", str(cache)], cwd=project, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})},
        preexec_fn=default_signals)


def downloads_per_file(hub: Hub, repo: LockedRepo) -> dict[str, int]:
    """How many times the emulator sent each locked file's bytes: a small file's answer
    (200 from the endpoint), a large file's redirect to the CDN (one per download)."""
    counts = {f.path: 0 for f in repo.files if f.size}
    for entry in hub.process.stats()["log"]:
        path = urlsplit(entry["path"]).path
        for f in repo.files:
            if f.size and path.endswith(f"/{repo.revision}/{quote(f.path)}"):
                served = 302 if f.size >= LARGE_FILE else 200
                counts[f.path] += entry["status"] == served and entry["method"] in (
                    "GET", "HEAD")
    return counts


class Reader(threading.Thread):
    """Loops over the snapshot's files on one node: a file once seen complete must never
    disappear or change (on a network filesystem a replace-by-rename shows as ENOENT)."""

    def __init__(self, snapshot: Path, repo: LockedRepo) -> None:
        super().__init__(daemon=True)
        self.snapshot, self.repo = snapshot, repo
        self.stop = threading.Event()
        self.complete: dict[str, str] = {}
        self.violations: list[str] = []
        self.reads = 0

    def run(self) -> None:
        while not self.stop.is_set():
            for f in self.repo.files:
                try:
                    # Its size and first 64 KiB: a tight loop, as a loader opening shards.
                    with open(self.snapshot / f.path, "rb") as opened:
                        size = os.fstat(opened.fileno()).st_size
                        head = hashlib.sha256(opened.read(65536)).hexdigest()
                except OSError as e:
                    if f.path in self.complete:
                        self.violations.append(f"{f.path}: {e.strerror} after it was complete")
                    continue
                self.reads += 1
                if f.path in self.complete and head != self.complete[f.path]:
                    self.violations.append(f"{f.path}: changed after it was complete")
                elif size == f.size:
                    self.complete[f.path] = head


def race(hub: Hub, project: Path, volume: Volume, env: dict[str, str] | None = None,
         ) -> tuple[list[tuple[int, str]], Reader]:
    """Eight syncs at once, four on each node, while a reader on the second node watches the
    snapshot: each sync's exit code and stderr, and the reader."""
    repo = read_lock(project / "weights.lock").repos[0]
    caches = [node / "hf" for node in volume.nodes]
    reader = Reader(caches[1] / f"models--{repo.id.replace('/', '--')}" / "snapshots"
                    / repo.revision, repo)
    hub.process.reset_stats()
    reader.start()
    procs = [start_sync(hub, project, caches[n % 2], env)
             for n in range(2 * SYNCS_PER_NODE)]
    ended = []
    for proc in procs:
        _, stderr = proc.communicate(timeout=300)
        ended.append((proc.returncode, stderr))
    reader.stop.set()
    reader.join(60)
    return ended, reader


def syncs_succeeded(ended: list[tuple[int, str]]) -> None:
    """Every sync exited 0; else each failure's code and whole stderr (an assertion's
    explanation would be cut to a few lines)."""
    failed = [f"exit {code}:\n{stderr}" for code, stderr in ended if code]
    if failed:
        pytest.fail("\n\n".join(failed))


def test_eight_syncs_on_two_nodes_download_each_blob_once(
    hub: Hub, tmp_path: Path, volume: Volume
) -> None:
    project = sharded_project(hub, tmp_path)
    repo = read_lock(project / "weights.lock").repos[0]
    ended, reader = race(hub, project, volume)
    syncs_succeeded(ended)
    for node in volume.nodes:
        result = run_wlock("check", "--cache-dir", str(node / "hf"), cwd=project)
        assert result.code == 0, result.stdout + result.stderr
    assert downloads_per_file(hub, repo) == {f.path: 1 for f in repo.files if f.size}
    assert reader.reads and not reader.violations, reader.violations


def test_without_working_locks_the_race_is_still_correct(
    hub: Hub, tmp_path: Path, volume: Volume
) -> None:
    """As on a filesystem whose flock succeeds for everyone: blobs may be fetched more than
    once, but every sync succeeds, nothing published is replaced, and the cache is right."""
    project = sharded_project(hub, tmp_path)
    repo = read_lock(project / "weights.lock").repos[0]
    ended, reader = race(hub, project, volume, env={"WLOCK_FLOCK": "off"})
    syncs_succeeded(ended)
    for node in volume.nodes:
        assert run_wlock("check", "--cache-dir", str(node / "hf"), cwd=project).code == 0
    assert all(n >= 1 for n in downloads_per_file(hub, repo).values())
    assert reader.reads and not reader.violations, reader.violations


def test_a_node_killed_in_its_own_pid_namespace_is_reclaimed_after_its_lease(
    hub: Hub, tmp_path: Path, volume: Volume
) -> None:
    """Containers share hostnames and pids: a killed node's temp files and the folder it
    built its snapshot in are judged by their lease, never by a pid looked up in another
    namespace; a live one's are never touched."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    project = sharded_project(hub, tmp_path, shards=2, small=2)
    repo = read_lock(project / "weights.lock").repos[0]
    blobs = volume.nodes[0] / "hf" / f"models--{repo.id.replace('/', '--')}" / "blobs"
    lease = {"WLOCK_LEASE": "2"}
    in_namespace = ("unshare", "--pid", "--fork", "--kill-child")

    # A node that is alive but slow (every CDN range takes 8 s), in its own PID namespace.
    hub.process.faults({"action": "delay", "match": "/objects/", "delay_ms": 8000})
    slow = start_sync(hub, project, volume.nodes[0] / "hf", lease, in_namespace)
    temps = wait_for_temps(blobs, slow, repo)
    staging = list(blobs.parent.glob(".*.wlock-tmp"))
    assert len(staging) == 1, staging  # the folder it builds the snapshot in
    time.sleep(3)  # past its lease, had it not been renewed
    # A cleaner that cannot ask the blob locks: the renewed lease alone keeps the files.
    cleaner = run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir",
                        str(volume.nodes[1] / "hf"), "--offline", cwd=project,
                        env={**lease, "WLOCK_FLOCK": "off"})
    assert cleaner.code == 5  # offline, and the blobs are not in yet
    assert all((blobs / t).exists() for t in temps), "a live node's download was removed"
    assert staging[0].is_dir(), "a live node's staging folder was removed"
    hub.process.faults()
    _, err = slow.communicate(timeout=120)
    assert slow.returncode == 0, err

    # A node killed mid-download, in its own PID namespace: its pid means nothing here.
    shutil.rmtree(volume.nodes[0] / "hf")
    hub.process.faults({"action": "delay", "match": "/objects/", "delay_ms": 3000})
    doomed = start_sync(hub, project, volume.nodes[0] / "hf", lease, in_namespace)
    temps = wait_for_temps(blobs, doomed, repo)
    doomed.send_signal(signal.SIGKILL)  # unshare --kill-child: the namespace dies with it
    doomed.communicate(timeout=60)
    staging = list(blobs.parent.glob(".*.wlock-tmp"))
    assert len(staging) == 1, staging
    hub.process.faults()
    others = [start_sync(hub, project, volume.nodes[n % 2] / "hf", lease) for n in range(2)]
    for proc in others:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    time.sleep(3)  # the dead node's lease runs out
    assert run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir",
                     str(volume.nodes[1] / "hf"), cwd=project, env=lease).code == 0
    assert not [t for t in temps if (blobs / t).exists()], "a dead node's temp file stayed"
    assert not staging[0].exists(), "a dead node's staging folder stayed"
    assert run_wlock("check", "--cache-dir", str(volume.nodes[0] / "hf"), cwd=project).code == 0


def wait_for_temps(blobs: Path, proc: subprocess.Popen[str], repo: LockedRepo) -> list[str]:
    """The temp files of the shards `proc` is downloading, once there are some."""
    shards = tuple(f".{f.etag}." for f in repo.files if f.size >= LARGE_FILE)
    deadline = time.monotonic() + 60
    while True:
        temps = [p.name for p in blobs.glob("*.wlock-incomplete")
                 if p.name.startswith(shards)] if blobs.is_dir() else []
        if temps:
            return temps
        assert proc.poll() is None and time.monotonic() < deadline, "no download started"
        time.sleep(0.05)
