"""`wlock sync` against huggingface_hub.snapshot_download and against `cp`, on one emulator
and the same files: a repo of several 256 MB shards plus small files.

    python bench/sync_throughput.py [--shards 4] [--shard-mb 256] [--small 40] [--runs 2]

Each run starts from an empty cache; the emulator serves from the page cache (it is warmed
first) so the figures compare the clients, not the disk. The `cp` line copies the same blobs
from the store to a new folder: the raw limit of this machine's disk path.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

from _common import WLOCK, compile_wlock, machine, median, run, shards_repo, timed

from wlock.hubserver.process import HubProcess

SNAPSHOT_DOWNLOAD = (
    "import sys; from huggingface_hub import snapshot_download; "
    "snapshot_download('bench/shards', cache_dir=sys.argv[1], endpoint=sys.argv[2])"
)


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
            times: dict[str, list[float]] = {"wlock": [], "hf": [], "cp": []}
            for i in range(args.runs):
                cache = root / f"wlock-cache-{i}"
                times["wlock"].append(timed(lambda cache=cache: run(
                    [*WLOCK, "sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                     "--jobs", str(args.jobs)], cwd=project)))
                shutil.rmtree(cache)
                cache = root / f"hf-cache-{i}"
                times["hf"].append(timed(lambda cache=cache: run(
                    [sys.executable, "-c", SNAPSHOT_DOWNLOAD, str(cache), hub.endpoint],
                    env={"HF_HUB_DISABLE_PROGRESS_BARS": "1"})))
                shutil.rmtree(cache)
                dest = root / f"cp-{i}"
                times["cp"].append(timed(lambda dest=dest: run(
                    ["cp", "-r", str(objects), str(dest)])))
                shutil.rmtree(dest)

    wl, hf, cp = median(times["wlock"]), median(times["hf"]), median(times["cp"])
    mb = total / 1e6
    print(f"machine: {machine()}")
    print(f"data: {args.shards} x {args.shard_mb} MiB shards + {args.small + 1} small files "
          f"= {mb:.0f} MB; median of {args.runs} runs, each into an empty cache")
    print(f"wlock sync --jobs {args.jobs}:        {wl:6.2f}s  {mb / wl:7.0f} MB/s")
    print(f"huggingface_hub snapshot_download: {hf:6.2f}s  {mb / hf:7.0f} MB/s")
    print(f"cp -r (raw limit):                 {cp:6.2f}s  {mb / cp:7.0f} MB/s")
    print(f"wlock is {hf / wl:.2f}x faster than snapshot_download, "
          f"and takes {wl / cp:.2f}x the time of cp")


if __name__ == "__main__":
    main()
