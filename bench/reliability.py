"""Reliability under abuse: random SIGKILLs mid-sync, one server error per file, concurrent
syncs into one cache. Prints one row per trial kind for the README's reliability table.

    python bench/reliability.py [--kills 30] [--faults 10] [--concurrent 5]

After every trial the cache is judged from outside wlock: every blob present hashes to its
name (no unverified byte is ever visible), huggingface_hub's offline `snapshot_download`
either refuses the revision or returns it complete, no transfer worker outlives its sync,
and a following `wlock sync` then `wlock check` pass.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

from _common import WLOCK, compile_wlock, machine, shards_repo

from wlock.cache.engines import LARGE_FILE
from wlock.hubserver.process import HubProcess
from wlock.lock.lockfile import read_lock


def blobs_verified(cache: Path) -> bool:
    """Every file under blobs/ hashes to its own name (sha256 or git blob id)."""
    for blob in cache.glob("models--*/blobs/*"):
        if blob.name.startswith("."):
            continue  # a temp file: never a name a snapshot points at
        data = blob.read_bytes()
        names = {hashlib.sha256(data).hexdigest(),
                 hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()}
        if blob.name not in names:
            return False
    return True


def snapshot_whole_or_absent(cache: Path, revision: str, files: int) -> bool:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        folder = Path(snapshot_download("bench/shards", revision=revision, cache_dir=cache,
                                        local_files_only=True))
    except LocalEntryNotFoundError:
        return True
    return sum(1 for p in folder.rglob("*") if p.is_symlink()) == files


def workers_alive(pids: set[int]) -> bool:
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            return True
    return False


def child_workers(pid: int) -> set[int]:
    out = subprocess.run(["pgrep", "-P", str(pid), "-f", "wlock.cache.engines.hf_transfer_worker"],
                         capture_output=True, text=True).stdout.split()
    return {int(p) for p in out}


def sync_argv(hub: HubProcess, cache: Path) -> list[str]:
    return [*WLOCK, "sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache)]


def finish(hub: HubProcess, project: Path, cache: Path) -> bool:
    hub.faults()
    done = subprocess.run(sync_argv(hub, cache), cwd=project, capture_output=True)
    checked = subprocess.run([*WLOCK, "check", "--cache-dir", str(cache)], cwd=project,
                             capture_output=True)
    return done.returncode == 0 and checked.returncode == 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kills", type=int, default=30)
    parser.add_argument("--faults", type=int, default=10)
    parser.add_argument("--concurrent", type=int, default=5)
    args = parser.parse_args()
    compile_wlock()
    rng = random.Random(7)

    with tempfile.TemporaryDirectory(prefix="wlock-rel-") as tmp:
        root = Path(tmp)
        store = shards_repo(root, shards=3, shard_mb=32, small=40)
        project = root / "project"
        project.mkdir()
        (project / "weights.toml").write_text('[[model]]\nid = "bench/shards"\n')
        rows = []
        with HubProcess(store) as hub:
            subprocess.run([*WLOCK, "lock", "--endpoint", hub.endpoint], cwd=project,
                           check=True, capture_output=True)
            repo = read_lock(project / "weights.lock").repos[0]

            # 1. SIGKILL at a random moment of a sync slowed to a few seconds.
            held = {"verified": 0, "whole": 0, "no orphan": 0, "recovered": 0}
            killed = 0
            for n in range(args.kills):
                cache = root / f"kill-{n}"
                hub.faults({"action": "delay", "listener": "cdn", "match": "/",
                            "delay_ms": 1000})
                proc = subprocess.Popen(sync_argv(hub, cache), cwd=project,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        start_new_session=True)
                deadline = time.monotonic() + rng.uniform(0.2, 3.0)
                workers: set[int] = set()
                while time.monotonic() < deadline and proc.poll() is None:
                    workers |= child_workers(proc.pid)
                    time.sleep(0.02)
                killed += proc.poll() is None
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                time.sleep(0.5)
                held["verified"] += blobs_verified(cache)
                held["whole"] += snapshot_whole_or_absent(cache, repo.revision, len(repo.files))
                held["no orphan"] += not workers_alive(workers)
                held["recovered"] += finish(hub, project, cache)
            rows.append((f"SIGKILL at a random moment (0.2-3 s) of a sync, {args.kills} runs "
                         f"({killed} mid-sync)", held, args.kills))

            # 2. One 500, then one 429 with Retry-After, on every file (API and CDN).
            for status in (500, 429):
                ok = 0
                for n in range(args.faults):
                    rules = []
                    for f in repo.files:
                        extra = {"retry_after": 1} if status == 429 else {}
                        rules.append({"action": "status", "status": status, "listener": "hub",
                                      "times": 1, **extra,
                                      "match": f"/resolve/{repo.revision}/{quote(f.path)}$"})
                        if f.size >= LARGE_FILE:
                            rules.append({"action": "status", "status": status,
                                          "listener": "cdn", "match": f.etag, "times": 1,
                                          **extra})
                    hub.faults(*rules)
                    cache = root / f"status-{status}-{n}"
                    done = subprocess.run(sync_argv(hub, cache), cwd=project,
                                          capture_output=True)
                    hub.faults()
                    checked = subprocess.run([*WLOCK, "check", "--cache-dir", str(cache)],
                                             cwd=project, capture_output=True)
                    ok += done.returncode == 0 and checked.returncode == 0
                rows.append((f"one {status} on every file, {args.faults} runs",
                             {"exit 0 and check passes": ok}, args.faults))

            # 3. Four syncs at once into one empty cache.
            ok = 0
            for n in range(args.concurrent):
                cache = root / f"concurrent-{n}"
                procs = [subprocess.Popen(sync_argv(hub, cache), cwd=project,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                         for _ in range(4)]
                codes = [p.wait() for p in procs]
                checked = subprocess.run([*WLOCK, "check", "--cache-dir", str(cache)],
                                         cwd=project, capture_output=True)
                ok += codes == [0, 0, 0, 0] and checked.returncode == 0 and blobs_verified(cache)
            rows.append((f"4 concurrent syncs into one empty cache, {args.concurrent} runs",
                         {"all exit 0 and check passes": ok}, args.concurrent))

    print(f"machine: {machine()}; lock: 3 x 32 MiB shards + 41 small files")
    for what, held, total in rows:
        print(f"{what}: " + ", ".join(f"{k} {v}/{total}" for k, v in held.items()))
    sys.exit(0 if all(v == total for _, held, total in rows for v in held.values()) else 1)


if __name__ == "__main__":
    main()
