"""`wlock check` against the hashing limit and against `hf cache verify`, on one cache.

    python bench/check_throughput.py [--shards 4] [--shard-mb 256] [--small 40] [--runs 3]

The limit is the same files hashed with the same algorithm by `openssl dgst -sha256`, one
process per core at once (coreutils' sha256sum is several times slower and is not the limit).
Every contender reads the blobs from the page cache (warmed first), so this compares hashing,
not the disk. `hf cache verify` asks the emulator for the file list, as it asks the Hub.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from _common import WLOCK, compile_wlock, machine, median, run, synced_shards, timed

from wlock.hubserver.process import HubProcess
from wlock.lock.lockfile import read_lock


def measure(root: Path, shards: int, shard_mb: int, small: int, runs: int,
            hf: bool = True) -> dict[str, float | int]:
    """The shards repo under `root`, synced and in the page cache, then the median of `runs`
    of `wlock check`, of openssl one process per core and (with `hf`) of `hf cache verify`,
    in turns: {"wlock", "openssl", "hf", "bytes", "blobs"}."""
    cores = os.cpu_count() or 1
    project, cache = synced_shards(root, shards, shard_mb, small)
    repo = read_lock(project / "weights.lock").repos[0]
    blobs = sorted((cache / "models--bench--shards" / "blobs").iterdir())
    for blob in blobs:  # warm the page cache for every contender alike
        blob.read_bytes()
    # openssl, one process per core, the files dealt out largest first as wlock does.
    by_size = sorted(blobs, key=lambda b: -b.stat().st_size)
    openssl = ["sh", "-c", f"printf '%s\\n' \"$@\" | xargs -P {cores} -n 1 "
               "openssl dgst -sha256 > /dev/null", "sh", *map(str, by_size)]
    contenders = {
        "wlock": lambda: run([*WLOCK, "check", "--cache-dir", str(cache)], cwd=project),
        "openssl": lambda: run(openssl)}
    with contextlib.ExitStack() as stack:
        if hf:  # hf cache verify asks the endpoint for the file list, as it asks the Hub
            hub = stack.enter_context(HubProcess(root / "store"))
            verify = [str(Path(sys.executable).with_name("hf")), "cache", "verify",
                      "bench/shards", "--revision", repo.revision, "--cache-dir", str(cache)]
            env = {"HF_ENDPOINT": hub.endpoint, "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
            contenders["hf"] = lambda: run(verify, env=env)
        times = _turns(contenders, runs)
    return {**{k: median(v) for k, v in times.items()},
            "bytes": sum(b.stat().st_size for b in blobs), "blobs": len(blobs)}


def _turns(contenders: dict[str, Callable[[], object]], runs: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(runs):
        for name, fn in contenders.items():
            times[name].append(timed(fn))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--shard-mb", type=int, default=256)
    parser.add_argument("--small", type=int, default=40)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    compile_wlock()
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="wlock-bench-", dir=os.environ.get("BENCH_DIR")) as tmp:
        got = measure(Path(tmp), args.shards, args.shard_mb, args.small, args.runs)
    wl, limit, hf = got["wlock"], got["openssl"], got["hf"]
    mb = got["bytes"] / 1e6
    print(f"machine: {machine()}")
    print(f"data: {got['blobs']} blobs, {mb:.0f} MB, in the page cache; median of {args.runs} runs")
    print(f"wlock check:                          {wl:6.2f}s  {mb / wl:6.0f} MB/s")
    print(f"openssl dgst -sha256 x {cores} (the limit):  {limit:6.2f}s  {mb / limit:6.0f} MB/s")
    print(f"hf cache verify:                      {hf:6.2f}s  {mb / hf:6.0f} MB/s")
    print(f"wlock check takes {wl / limit:.2f}x the hashing limit; "
          f"it is {hf / wl:.2f}x faster than hf cache verify")


if __name__ == "__main__":
    main()
