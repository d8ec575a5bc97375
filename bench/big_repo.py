"""A dataset at the Hub's own scale (issue 46): 100,000 files, the count at which the live Hub
cuts repo info's `siblings`, through the emulator answering as the Hub does (the paged tree
listing, siblings cut), side by side with huggingface_hub in one run.

    python bench/big_repo.py [--files 100000] [--dir /dev/shm]

What it prints, each wlock figure beside the one it is held to:
- `wlock lock` against the bare paged listing through huggingface_hub's `list_repo_tree`
  (aim: at most 3x; the listing is the least any complete lock can cost);
- a cold `wlock sync` against `snapshot_download` (aim: at least 2x as fast);
- a no-op `wlock sync` (aim: under 1 s), `wlock check` against hashing the same files in one
  process (git blob ids, as check does: aim at most 1.5x), `status` and `tree`;
- the peak memory of each command's whole process tree (aim: under 500 MB) and the lock's
  bytes a file (aim: under 250).

The files are small git files in 100 folders (an episode-per-file dataset). The store and
the caches live under `--dir` (default: /dev/shm where there is one), so the figures are the
tools' own and not a virtual disk's metadata latency.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import WLOCK, compile_wlock, machine, measured, snapshot_download, snapshot_env

from wlock.hubserver.process import HubProcess
from wlock.hubserver.store import StoreBuilder

REPO = "bench/episodes"
MB = 1e6


def build(store: Path, files: int) -> None:
    StoreBuilder(store).commit("dataset", REPO, {
        f"data/{n % 100:03d}/episode-{n:07d}.json": b'{"episode": %d, "steps": [%d]}\n' % (n, n)
        for n in range(files)}, lfs=False)


def listing_seconds(endpoint: str) -> tuple[float, int]:
    """The bare paged listing through huggingface_hub, in a process of its own."""
    code = ("import sys; from huggingface_hub import HfApi; "
            "n = sum(1 for _ in HfApi(endpoint=sys.argv[1]).list_repo_tree("
            "sys.argv[2], repo_type='dataset', recursive=True)); print(n)")
    return measured([sys.executable, "-c", code, endpoint, REPO])


def hashing_seconds(snapshot: Path) -> float:
    """Every file of the snapshot read and hashed as a git blob, in one process: the work
    `check` cannot avoid."""
    started = time.perf_counter()
    for root, _, names in os.walk(snapshot):
        for name in names:
            with open(os.path.join(root, name), "rb") as f:
                data = f.read()
            hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--dir", default=os.environ.get("BENCH_DIR") or (
        "/dev/shm" if os.path.isdir("/dev/shm") else None))
    parser.add_argument("--skip-competitor", action="store_true",
                        help="leave snapshot_download out (its figures are then not printed)")
    args = parser.parse_args()
    compile_wlock()
    print(f"machine: {machine()}; {args.files} files under {args.dir or tempfile.gettempdir()}")
    with tempfile.TemporaryDirectory(prefix="wlock-big-", dir=args.dir) as tmp:
        root = Path(tmp)
        started = time.perf_counter()
        build(root / "store", args.files)
        print(f"  store built in {time.perf_counter() - started:.1f}s")
        project = root / "project"
        project.mkdir()
        (project / "weights.toml").write_text(
            f'[[dataset]]\nid = "{REPO}"\nloader = "all"\n')
        cache = root / "cache"
        env = {"HF_HUB_CACHE": str(cache), "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
        rows: list[tuple[str, float, int, str]] = []
        with HubProcess(root / "store") as hub:
            hub.faults()  # the Hub's defaults: siblings cut at 100,000
            listed, listed_mem = listing_seconds(hub.endpoint)
            lock_s, lock_mem = measured([*WLOCK, "lock", "--endpoint", hub.endpoint],
                                        cwd=project, env=env)
            rows.append(("wlock lock", lock_s, lock_mem,
                         f"{lock_s / listed:.2f}x the bare listing ({listed:.2f}s; aim <= 3)"))
            lock_bytes = (project / "weights.lock").stat().st_size
            sync_s, sync_mem = measured([*WLOCK, "sync", "--endpoint", hub.endpoint],
                                        cwd=project, env=env)
            competitor = None
            if not args.skip_competitor:
                competitor, competitor_mem = measured(
                    snapshot_download(REPO, root / "hf-cache", hub.endpoint, "dataset"),
                    env=snapshot_env(root / "hf-home", "plain HTTP"))
                rows.append(("snapshot_download", competitor, competitor_mem, ""))
            rows.append(("wlock sync (cold)", sync_s, sync_mem,
                         f"{competitor / sync_s:.2f}x as fast as snapshot_download (aim >= 2)"
                         if competitor else ""))
        noop_s, noop_mem = measured([*WLOCK, "sync", "--offline"], cwd=project, env=env)
        rows.append(("wlock sync (no-op)", noop_s, noop_mem, "aim < 1 s"))
        snapshot = next(cache.glob("datasets--*/snapshots/*"))
        hashed = hashing_seconds(snapshot)
        check_s, check_mem = measured([*WLOCK, "check"], cwd=project, env=env)
        rows.append(("wlock check", check_s, check_mem,
                     f"{check_s / hashed:.2f}x hashing in one process ({hashed:.2f}s; "
                     "aim <= 1.5)"))
        for command in (["status"], ["tree"], ["gc", "--dry-run"]):
            seconds, mem = measured([*WLOCK, *command], cwd=project, env=env)
            rows.append((f"wlock {' '.join(command)}", seconds, mem, ""))
    print(f"  bare listing (huggingface_hub list_repo_tree): {listed:.2f}s, "
          f"{listed_mem / MB:.0f} MB")
    for name, seconds, mem, note in rows:
        print(f"  {name:<22} {seconds:7.2f}s  peak {mem / MB:5.0f} MB  {note}")
    print(f"  weights.lock: {lock_bytes / MB:.1f} MB, {lock_bytes / args.files:.0f} bytes a "
          "file (aim < 250)")
    print(f"  peak memory, the most of any wlock command: "
          f"{max(m for n, _, m, _ in rows if n.startswith('wlock')) / MB:.0f} MB (aim < 500)")


if __name__ == "__main__":
    try:
        main()
    except subprocess.CalledProcessError as e:
        sys.stderr.write((e.stderr or b"").decode(errors="replace"))
        raise
