"""A no-op `wlock sync` on a 1,000-file lock: everything present, so no request is made and
the answer comes from `stat` alone.

    python bench/noop_sync.py [--files 1000] [--runs 10]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from _common import compile_wlock, machine, median, run, timed

from wlock.hubserver.process import HubProcess
from wlock.hubserver.store import StoreBuilder


def measure(root: Path, files: int, runs: int) -> tuple[float, float, int]:
    """A dataset of `files` tiny files locked and synced under `root`, then (the median no-op
    `wlock sync` through the console script, the median `python -c pass`, the requests the
    no-op syncs made), each of `runs` runs."""
    StoreBuilder(root / "store").commit("dataset", "bench/many", {
        f"shards/{n // 100:02d}/part-{n:05d}.json": f'{{"n": {n}}}\n'.encode()
        for n in range(files)})
    project, cache = root / "project", root / "cache"
    project.mkdir()
    (project / "weights.toml").write_text('[[dataset]]\nid = "bench/many"\n')
    with HubProcess(root / "store") as hub:
        run([sys.executable, "-m", "wlock", "lock", "--endpoint", hub.endpoint], cwd=project)
        run([sys.executable, "-m", "wlock", "sync", "--endpoint", hub.endpoint,
             "--cache-dir", str(cache)], cwd=project)
        hub.reset_stats()
        # The console script, as users run it (python -m adds runpy's imports).
        wlock = str(Path(sys.executable).with_name("wlock"))
        argv = [wlock, "sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache)]
        noop, python = [], []
        for _ in range(runs):  # in turns, so a slow moment of the machine falls on both
            noop.append(timed(lambda: run(argv, cwd=project)))
            python.append(timed(lambda: run([sys.executable, "-c", "pass"])))
        requests = sum(hub.stats()["requests"].values())
    return median(noop), median(python), requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    compile_wlock()
    with tempfile.TemporaryDirectory(prefix="wlock-bench-", dir=os.environ.get("BENCH_DIR")) as tmp:
        noop, python, requests = measure(Path(tmp), args.files, args.runs)
    print(f"machine: {machine()}")
    print(f"no-op wlock sync, {args.files} locked files: median {noop:.3f}s over "
          f"{args.runs} runs; requests made: {requests}")
    print(f"for scale, the interpreter alone (`python -c pass`): {python:.3f}s "
          f"({noop / python:.1f}x)")


if __name__ == "__main__":
    main()
