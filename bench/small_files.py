"""Many small files at Hub latency: `wlock sync` against huggingface_hub.snapshot_download,
on one emulator that adds the same latency to every request.

    python bench/small_files.py [--files 1000] [--latency-ms 50] [--runs 1] [--jobs 4]

Small files are latency-bound: each costs a request (and, for the first few, a same-host
redirect that wlock then skips) of `latency` each, so the time is about files x round trips
x latency / concurrency, until the CPU of a 2-core machine is the limit. The `--jobs` flag
bounds the large transfers; small ones have their own concurrency.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

from _common import WLOCK, compile_wlock, machine, median, run, snapshot_download, timed

from wlock.hubserver.process import HubProcess
from wlock.hubserver.store import StoreBuilder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--latency-ms", type=float, default=50)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=4)
    args = parser.parse_args()
    compile_wlock()

    with tempfile.TemporaryDirectory(prefix="wlock-bench-", dir=os.environ.get("BENCH_DIR")) as tmp:
        root = Path(tmp)
        StoreBuilder(root / "store").commit("model", "bench/small", {
            f"shard/{n:05d}.json": os.urandom(1024 + n % 997) for n in range(args.files)
        })
        project = root / "project"
        project.mkdir()
        (project / "weights.toml").write_text('[[model]]\nid = "bench/small"\n')
        with HubProcess(root / "store") as hub:
            run([*WLOCK, "lock", "--endpoint", hub.endpoint], cwd=project)
            hub.faults(latency_ms=args.latency_ms)
            times: dict[str, list[float]] = {"wlock": [], "hf": []}
            for i in range(args.runs):
                cache = root / f"wlock-{i}"
                times["wlock"].append(timed(lambda cache=cache: run(
                    [*WLOCK, "sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                     "--jobs", str(args.jobs)], cwd=project)))
                shutil.rmtree(cache)
                cache = root / f"hf-{i}"
                times["hf"].append(timed(lambda cache=cache: run(
                    snapshot_download("bench/small", cache, hub.endpoint),
                    env={"HF_HUB_DISABLE_PROGRESS_BARS": "1"})))
                shutil.rmtree(cache)

    wl, hf = median(times["wlock"]), median(times["hf"])
    print(f"machine: {machine()}")
    print(f"data: {args.files} small files, {args.latency_ms:g} ms added to every request; "
          f"median of {args.runs} run(s), each into an empty cache")
    print(f"wlock sync --jobs {args.jobs}:        {wl:6.2f}s")
    print(f"huggingface_hub snapshot_download: {hf:6.2f}s")
    print(f"wlock is {hf / wl:.2f}x faster than snapshot_download")


if __name__ == "__main__":
    main()
