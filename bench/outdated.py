"""`wlock outdated` on a manifest of 100 entries, each a few commits behind, with 50 ms of
emulator latency per request, against its floor: one request per repo, the same 16 at a time,
made by a bare client (httpx, the same HTTP stack) in the same process.

    python bench/outdated.py [--repos 100] [--latency-ms 50] [--runs 5]

Prints the median wall time of each, their ratio (the goal: at most 2x), and the requests the
emulator counted; then the CLI's time (a fresh process, as a user runs it).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _common import compile_wlock, machine

from wlock.hubserver.process import HubProcess
from wlock.hubserver.store import StoreBuilder
from wlock.lock.hub import HubClient
from wlock.lock.lockfile import read_lock
from wlock.lock.manifest import read_manifest
from wlock.lock.outdated import outdated


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repos", type=int, default=100)
    parser.add_argument("--latency-ms", type=float, default=50)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    compile_wlock()
    with tempfile.TemporaryDirectory(prefix="wlock-bench-") as tmp:
        root = Path(tmp)
        builder = StoreBuilder(root / "store")
        ids = [f"bench/model-{n:03d}" for n in range(args.repos)]
        for repo_id in ids:
            builder.commit("model", repo_id, {"config.json": b'{"v": 0}\n'})
        project = root / "project"
        project.mkdir()
        (project / "weights.toml").write_text("".join(f'[[model]]\nid = "{i}"\n\n' for i in ids))
        with HubProcess(root / "store") as hub:
            subprocess.run([sys.executable, "-m", "wlock", "-q", "lock", "--endpoint",
                            hub.endpoint], cwd=project, check=True, capture_output=True)
            for n, repo_id in enumerate(ids):  # each entry 1 to 5 commits behind
                for step in range(1 + n % 5):
                    builder.commit("model", repo_id, {"config.json": f'{{"v": {step + 1}}}\n'
                                                      .encode()}, message=f"step {step + 1}")
            hub.faults(latency_ms=args.latency_ms)
            manifest, lock = read_manifest(project / "weights.toml"), read_lock(
                project / "weights.lock")
            ours, floor, cli, asked = [], [], [], []
            for _ in range(args.runs):
                hub.reset_stats()
                started = time.perf_counter()
                pins = outdated(manifest, lock, HubClient(hub.endpoint, None), jobs=16)
                ours.append(time.perf_counter() - started)
                asked.append(sum(1 for e in hub.stats()["log"] if "/commits/" in e["path"]))
                assert sum(p.moved for p in pins) == len(ids)
                floor.append(bare(hub.endpoint, ids))
                started = time.perf_counter()
                done = subprocess.run([sys.executable, "-m", "wlock", "outdated", "--endpoint",
                                       hub.endpoint], cwd=project, capture_output=True)
                cli.append(time.perf_counter() - started)
                assert done.returncode == 1, done.stderr
    a, b = statistics.median(ours), statistics.median(floor)
    print(f"machine: {machine()}; {args.repos} entries, {args.latency_ms:g} ms a request, "
          f"median of {args.runs}")
    print(f"wlock outdated (library): {a:.3f} s, {max(asked)} requests")
    print(f"one request per repo, 16 at a time (httpx): {b:.3f} s")
    print(f"ratio: {a / b:.2f}x (goal: at most 2x)")
    print(f"wlock outdated (CLI, a fresh process): {statistics.median(cli):.3f} s")


def bare(endpoint: str, ids: list[str]) -> float:
    import httpx2

    with httpx2.Client() as client:
        started = time.perf_counter()
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda i: client.get(f"{endpoint}/api/models/{i}/commits/main")
                          .raise_for_status(), ids))
        return time.perf_counter() - started


if __name__ == "__main__":
    main()
