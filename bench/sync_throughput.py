"""`wlock sync` against huggingface_hub.snapshot_download and against the disk's own write
speed, on one emulator and the same files: a repo of several 256 MB shards plus small files.

    python bench/sync_throughput.py [--shards 4] [--shard-mb 256] [--small 40] [--runs 2]

Each run starts from an empty cache; the emulator serves from the page cache (it is warmed
first) so the figures compare the clients, not the store's disk. Two limits are measured in
the same run, on the same folder: `cp -r` of the same blobs (a write into the page cache:
what a download could reach if the network cost nothing), and the same copy followed by
`sync` (the bytes on the disk itself). Peak memory is the proportional set size (PSS) of
each client's whole process tree (wlock's worker processes included), sampled every 20 ms;
run with `--shards 10 --shard-mb 1024` to see it for 10 GB.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

from _common import (
    WLOCK,
    compile_wlock,
    machine,
    measured,
    median,
    run,
    shards_repo,
    snapshot_download,
    timed,
)

from wlock.hubserver.process import HubProcess


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--shard-mb", type=int, default=256)
    parser.add_argument("--small", type=int, default=40)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=4)
    args = parser.parse_args()
    compile_wlock()

    with tempfile.TemporaryDirectory(prefix="wlock-bench-", dir=os.environ.get("BENCH_DIR")) as tmp:
        root = Path(tmp)
        shards_repo(root, args.shards, args.shard_mb, args.small)
        total = sum((root / "store" / "objects" / o).stat().st_size
                    for o in os.listdir(root / "store" / "objects"))
        project = root / "project"
        project.mkdir()
        (project / "weights.toml").write_text('[[model]]\nid = "bench/shards"\n')

        with HubProcess(root / "store") as hub:
            run([*WLOCK, "lock", "--endpoint", hub.endpoint], cwd=project)
            objects = root / "store" / "objects"
            for o in os.listdir(objects):  # warm the page cache for every contender alike
                with open(objects / o, "rb") as f:
                    while f.read(16 * 2**20):
                        pass
            times: dict[str, list[float]] = {"wlock": [], "hf": [], "cp": [], "disk": []}
            peaks: dict[str, list[int]] = {"wlock": [], "hf": []}
            for i in range(args.runs):
                # Each contender starts with nothing left to write back from the last: on a
                # VM the kernel's write-back of earlier runs can halve a download's speed.
                run(["sync"])
                cache = root / f"wlock-cache-{i}"
                seconds, peak = measured(
                    [*WLOCK, "sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                     "--jobs", str(args.jobs)], cwd=project)
                times["wlock"].append(seconds)
                peaks["wlock"].append(peak)
                shutil.rmtree(cache)
                run(["sync"])
                cache = root / f"hf-cache-{i}"
                seconds, peak = measured(
                    snapshot_download("bench/shards", cache, hub.endpoint),
                    env={"HF_HUB_DISABLE_PROGRESS_BARS": "1"})
                times["hf"].append(seconds)
                peaks["hf"].append(peak)
                shutil.rmtree(cache)
                run(["sync"])  # nothing of the previous copies left to write back
                dest = root / f"cp-{i}"
                times["cp"].append(timed(lambda dest=dest: run(
                    ["cp", "-r", str(objects), str(dest)])))
                shutil.rmtree(dest)
                run(["sync"])
                times["disk"].append(timed(lambda dest=dest: (
                    run(["cp", "-r", str(objects), str(dest)]), run(["sync"]))))
                shutil.rmtree(dest)

    wl, hf = median(times["wlock"]), median(times["hf"])
    cp, disk = median(times["cp"]), median(times["disk"])
    mb = total / 1e6
    print(f"machine: {machine()}")
    print(f"data: {args.shards} x {args.shard_mb} MiB shards + {args.small + 1} small files "
          f"= {mb:.0f} MB; median of {args.runs} runs, each into an empty cache")
    print(f"wlock sync --jobs {args.jobs}:        {wl:6.2f}s  {mb / wl:7.0f} MB/s  "
          f"peak {max(peaks['wlock']) / 2**20:5.0f} MiB PSS")
    print(f"huggingface_hub snapshot_download: {hf:6.2f}s  {mb / hf:7.0f} MB/s  "
          f"peak {max(peaks['hf']) / 2**20:5.0f} MiB PSS")
    print(f"cp -r into the page cache:         {cp:6.2f}s  {mb / cp:7.0f} MB/s")
    print(f"cp -r and sync to the disk:        {disk:6.2f}s  {mb / disk:7.0f} MB/s")
    print(f"wlock is {hf / wl:.2f}x faster than snapshot_download; it writes at "
          f"{disk / wl:.2f}x the disk's speed and {cp / wl:.2f}x the page cache's")

if __name__ == "__main__":
    main()
