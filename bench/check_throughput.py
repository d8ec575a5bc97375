"""`wlock check` against the hashing limit and against `hf cache verify`, on one cache.

    python bench/check_throughput.py [--shards 4] [--shard-mb 256] [--small 40] [--runs 3]

The limit is the same files hashed with the same algorithm by `openssl dgst -sha256`, one
process per core at once (coreutils' sha256sum is several times slower and is not the limit).
Every contender reads the blobs from the page cache (warmed first), so this compares hashing,
not the disk. `hf cache verify` asks the emulator for the file list, as it asks the Hub.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from _common import WLOCK, compile_wlock, machine, median, run, shards_repo, timed

from wlock.hubserver.process import HubProcess
from wlock.lock.lockfile import read_lock


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
        root = Path(tmp)
        shards_repo(root, args.shards, args.shard_mb, args.small)
        project, cache = root / "project", root / "cache"
        project.mkdir()
        (project / "weights.toml").write_text('[[model]]\nid = "bench/shards"\n')
        with HubProcess(root / "store") as hub:
            run([*WLOCK, "lock", "--endpoint", hub.endpoint], cwd=project)
            run([*WLOCK, "sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache)],
                cwd=project)
            repo = read_lock(project / "weights.lock").repos[0]
            blobs = sorted((cache / "models--bench--shards" / "blobs").iterdir())
            total = sum(b.stat().st_size for b in blobs)
            for blob in blobs:  # warm the page cache for every contender alike
                blob.read_bytes()
            # openssl, one process per core, the files dealt out largest first as wlock does.
            by_size = sorted(blobs, key=lambda b: -b.stat().st_size)
            openssl = ["sh", "-c", f"printf '%s\\n' \"$@\" | xargs -P {cores} -n 1 "
                       "openssl dgst -sha256 > /dev/null", "sh", *map(str, by_size)]
            hf_verify = ["hf", "cache", "verify", "bench/shards", "--revision", repo.revision,
                         "--cache-dir", str(cache)]
            hf_bin = Path(sys.executable).with_name("hf")
            hf_verify[0] = str(hf_bin)
            times: dict[str, list[float]] = {"wlock": [], "openssl": [], "hf": []}
            for _ in range(args.runs):
                times["wlock"].append(timed(lambda: run(
                    [*WLOCK, "check", "--cache-dir", str(cache)], cwd=project)))
                times["openssl"].append(timed(lambda: run(openssl)))
                times["hf"].append(timed(lambda: run(
                    hf_verify, env={"HF_ENDPOINT": hub.endpoint,
                                    "HF_HUB_DISABLE_PROGRESS_BARS": "1"})))

    wl, limit, hf = median(times["wlock"]), median(times["openssl"]), median(times["hf"])
    mb = total / 1e6
    print(f"machine: {machine()}")
    print(f"data: {len(blobs)} blobs, {mb:.0f} MB, in the page cache; median of {args.runs} runs")
    print(f"wlock check:                          {wl:6.2f}s  {mb / wl:6.0f} MB/s")
    print(f"openssl dgst -sha256 x {cores} (the limit):  {limit:6.2f}s  {mb / limit:6.0f} MB/s")
    print(f"hf cache verify:                      {hf:6.2f}s  {mb / hf:6.0f} MB/s")
    print(f"wlock check takes {wl / limit:.2f}x the hashing limit; "
          f"it is {hf / wl:.2f}x faster than hf cache verify")


if __name__ == "__main__":
    main()
