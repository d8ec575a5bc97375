"""`wlock lock` of 20 repos with 50 ms of emulator latency per request, against the
sequential lower bound (20 repos x requests per repo x 50 ms).

    python bench/lock_latency.py [--repos 20] [--latency-ms 50] [--runs 5]

Prints the median wall time of the CLI (a fresh process, as a user runs it) and of the
library call (no interpreter start or imports), each as a ratio of the sequential bound.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import compile_wlock

from wlock.hubserver.process import HubProcess
from wlock.hubserver.store import StoreBuilder
from wlock.lock.resolve import lock_project


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repos", type=int, default=20)
    parser.add_argument("--latency-ms", type=float, default=50)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    compile_wlock()

    with tempfile.TemporaryDirectory(prefix="wlock-bench-") as tmp:
        root = Path(tmp)
        builder = StoreBuilder(root / "store")
        manifest = []
        for n in range(args.repos):
            repo_id = f"bench/model-{n:02d}"
            builder.commit("model", repo_id, {
                "config.json": f'{{"n": {n}}}\n'.encode(),
                "model.safetensors": os.urandom(4096),
                "tokenizer.json": b"{}\n",
            })
            manifest.append(f'[[model]]\nid = "{repo_id}"\nref = "main"\n')
        project = root / "project"
        project.mkdir()
        (project / "weights.toml").write_text("\n".join(manifest))

        with HubProcess(root / "store") as hub:
            hub.faults(latency_ms=args.latency_ms)
            cli_times, lib_times, requests = [], [], []
            for _ in range(args.runs):
                (project / "weights.lock").unlink(missing_ok=True)
                hub.reset_stats()
                started = time.perf_counter()
                subprocess.run(
                    [sys.executable, "-m", "wlock", "lock", "--endpoint", hub.endpoint],
                    cwd=project, check=True, capture_output=True,
                )
                cli_times.append(time.perf_counter() - started)
                requests.append(hub.stats()["requests"]["hub"])

                (project / "weights.lock").unlink()
                started = time.perf_counter()
                lock_project(project, endpoint=hub.endpoint, token=None)
                lib_times.append(time.perf_counter() - started)

    per_repo = statistics.median(requests) / args.repos
    bound = args.repos * per_repo * args.latency_ms / 1000
    cli, lib = statistics.median(cli_times), statistics.median(lib_times)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}")
    print(f"{args.repos} repos, {per_repo:g} request(s) per repo, {args.latency_ms:g} ms each: "
          f"sequential bound {bound:.2f}s")
    print(f"wlock lock (CLI, new process):  {cli:.3f}s  = {cli / bound:.2f}x the bound")
    print(f"lock_project (library call):    {lib:.3f}s  = {lib / bound:.2f}x the bound")


if __name__ == "__main__":
    main()
