"""`wlock sync` against huggingface_hub.snapshot_download and against the disk's own write
speed, on one emulator and the same files: a repo of several 256 MB shards plus small files,
stored on Xet as the Hub stores them, so snapshot_download runs through hf_xet (its default),
with HF_XET_HIGH_PERFORMANCE=1, and by plain HTTP (hf_xet off), each in a fresh HF_HOME.

    python bench/sync_throughput.py [--shards 4] [--shard-mb 256] [--small 40] [--runs 2]

The default is also run against `--connections 8`, the default before the link probe
(issue 27): on loopback the probe must find that more connections do not help, and cost
little.

Each run starts from an empty cache; the emulator serves from the page cache (it is warmed
first) so the figures compare the clients, not the store's disk. Two limits are measured in
the same run, on the same folder: `cp -r` of the same blobs (a write into the page cache:
what a download could reach if the network cost nothing), and the same copy followed by
`sync` (the bytes on the disk itself). A third is the engine's own: hf_transfer alone, one
process per shard with wlock's settings, fetching the same URLs and verifying nothing (what
wlock's large-file path costs above it is its verification and bookkeeping). Peak memory is
the proportional set size (PSS) of each client's whole process tree (wlock's worker
processes included), sampled every 20 ms; run with `--shards 10 --shard-mb 1024` to see it
for 10 GB.

Before each contender the disk is settled: `sync`, then 3 s. On the development VM (ext4
mounted with `discard`) the write-back and discards of the previous contender's gigabyte
otherwise slowed the next one by up to 2x, whichever it was.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx2
from _common import (
    HF_XET_MODES,
    WLOCK,
    children_cpu,
    compile_wlock,
    machine,
    measured,
    median,
    process_cpu,
    run,
    sha256_speed,
    shards_repo,
    snapshot_download,
    snapshot_env,
    timed,
)

from wlock.cache.engines.hf_transfer_worker import CHUNK
from wlock.hubserver.process import HubProcess

SETTLE = 3.0


def settle() -> None:
    run(["sync"])
    time.sleep(SETTLE)


def bare_hf_transfer(urls: list[str], dest: Path, connections: int) -> None:
    """hf_transfer alone: one process per URL, as wlock's workers run it, no verification."""
    code = ("import sys, hf_transfer; hf_transfer.download(url=sys.argv[1], "
            "filename=sys.argv[2], max_files=int(sys.argv[3]), chunk_size=int(sys.argv[4]))")
    dest.mkdir()
    procs = [subprocess.Popen([sys.executable, "-c", code, url, str(dest / str(i)),
                               str(connections), str(CHUNK)]) for i, url in enumerate(urls)]
    for proc in procs:
        if proc.wait() != 0:
            raise SystemExit("hf_transfer failed")


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
        # On Xet, as the Hub stores them: snapshot_download then runs as users run it,
        # through hf_xet (and with its high-performance mode, and by plain HTTP beside).
        shards_repo(root, args.shards, args.shard_mb, args.small, xet=True)
        total = sum((root / "store" / "objects" / o).stat().st_size
                    for o in os.listdir(root / "store" / "objects"))
        project = root / "project"
        project.mkdir()
        (project / "weights.toml").write_text('[[model]]\nid = "bench/shards"\n')

        with HubProcess(root / "store") as hub:
            run([*WLOCK, "lock", "--endpoint", hub.endpoint], cwd=project)
            objects = root / "store" / "objects"
            # Warm the page cache for every contender alike: the bridge's objects and the
            # CAS's xorbs.
            xorbs = root / "store" / "xet" / "xorbs"
            for stored in [*objects.iterdir(), *xorbs.iterdir()]:
                with open(stored, "rb") as f:
                    while f.read(16 * 2**20):
                        pass
            shards = [f"model-{n + 1:05d}-of-{args.shards:05d}.safetensors"
                      for n in range(args.shards)]
            urls = [str(httpx2.head(f"{hub.endpoint}/bench/shards/resolve/main/{name}")
                        .headers["location"]) for name in shards]
            urls = [u if "://" in u else f"{hub.endpoint}{u}" for u in urls]
            per_file = max(1, 8 // min(args.jobs, args.shards))  # wlock's default budget
            times: dict[str, list[float]] = {
                "wlock": [], "before": [], "engine": [], "cp": [], "disk": [],
                **{mode: [] for mode in HF_XET_MODES}}
            peaks: dict[str, list[int]] = {"wlock": [], **{mode: [] for mode in HF_XET_MODES}}
            # CPU seconds (user + system) of the client's processes and of the emulator's,
            # as pairs: on a machine whose cores the transfer fills, the time follows them.
            cpu: dict[str, list[tuple[float, float]]] = {"wlock": [], "engine": []}

            def spent() -> Callable[[], tuple[float, float]]:
                assert hub.pid is not None
                pid, client, server = hub.pid, children_cpu(), process_cpu(hub.pid)
                return lambda: (children_cpu() - client, process_cpu(pid) - server)

            for i in range(args.runs):
                def default(i: int = i) -> None:
                    cache = root / f"wlock-cache-{i}"
                    took = spent()
                    seconds, peak = measured(
                        [*WLOCK, "sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                         "--jobs", str(args.jobs)], cwd=project)
                    times["wlock"].append(seconds)
                    cpu["wlock"].append(took())
                    peaks["wlock"].append(peak)
                    shutil.rmtree(cache)

                def before(i: int = i) -> None:
                    # The default before the link probe (issue 27): 8 connections, shared.
                    cache = root / f"before-cache-{i}"
                    times["before"].append(timed(lambda: run(
                        [*WLOCK, "sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                         "--jobs", str(args.jobs), "--connections", "8"], cwd=project)))
                    shutil.rmtree(cache)

                # The two take turns at going first: the first sync after the last round's
                # copies was slower here (4.1 s against 2.7-2.8 for the next ones).
                for contender in (default, before) if i % 2 == 0 else (before, default):
                    settle()
                    contender()
                for mode in HF_XET_MODES:
                    settle()
                    cache = root / f"hf-cache-{i}"
                    seconds, peak = measured(
                        snapshot_download("bench/shards", cache, hub.endpoint),
                        env=snapshot_env(root / "hf-home", mode))
                    times[mode].append(seconds)
                    peaks[mode].append(peak)
                    shutil.rmtree(cache)
                    shutil.rmtree(root / "hf-home", ignore_errors=True)
                settle()
                dest = root / f"engine-{i}"
                took = spent()
                times["engine"].append(timed(lambda dest=dest: bare_hf_transfer(
                    urls, dest, per_file)))
                cpu["engine"].append(took())
                shutil.rmtree(dest)
                settle()
                dest = root / f"cp-{i}"
                times["cp"].append(timed(lambda dest=dest: run(
                    ["cp", "-r", str(objects), str(dest)])))
                shutil.rmtree(dest)
                settle()
                times["disk"].append(timed(lambda dest=dest: (
                    run(["cp", "-r", str(objects), str(dest)]), run(["sync"]))))
                shutil.rmtree(dest)

    wl, hf, engine = median(times["wlock"]), median(times["hf_xet"]), median(times["engine"])
    cp, disk = median(times["cp"]), median(times["disk"])
    mb = total / 1e6
    shard_mb = args.shards * args.shard_mb * 2**20 / 1e6
    print(f"machine: {machine()}")
    print(f"data: {args.shards} x {args.shard_mb} MiB shards + {args.small + 1} small files "
          f"= {mb:.0f} MB; median of {args.runs} runs, each into an empty cache")
    print(f"wlock sync --jobs {args.jobs}:        {wl:6.2f}s  {mb / wl:7.0f} MB/s  "
          f"peak {max(peaks['wlock']) / 2**20:5.0f} MiB PSS")
    before = median(times["before"])
    print(f"wlock sync --connections 8:        {before:6.2f}s  {mb / before:7.0f} MB/s  "
          "(the default before the link probe)")
    for mode in HF_XET_MODES:
        t = median(times[mode])
        print(f"{'snapshot_download, ' + mode + ':':35s}{t:6.2f}s  {mb / t:7.0f} MB/s  "
              f"peak {max(peaks[mode]) / 2**20:5.0f} MiB PSS")
    print(f"hf_transfer alone, shards only:    {engine:6.2f}s  {shard_mb / engine:7.0f} MB/s  "
          "(no verification)")
    print(f"cp -r into the page cache:         {cp:6.2f}s  {mb / cp:7.0f} MB/s")
    print(f"cp -r and sync to the disk:        {disk:6.2f}s  {mb / disk:7.0f} MB/s")
    cores = os.cpu_count() or 1
    for name, label, wall in (("wlock", "wlock sync", times["wlock"]),
                              ("engine", "hf_transfer alone", times["engine"])):
        client = median([c for c, _ in cpu[name]])
        server = median([e for _, e in cpu[name]])
        busy = median([(c + e) / (w * cores) for (c, e), w in zip(cpu[name], wall, strict=True)])
        print(f"cpu, {label + ':':19s} {client:6.2f}s + the emulator's {server:5.2f}s: "
              f"{busy:.0%} of {cores} cores")
    speed = sha256_speed()
    print(f"cpu, verification: SHA-256 of {mb:.0f} MB at one core's {speed / 1e6:.0f} MB/s "
          f"(hashlib): {total / speed:.2f}s at the least")
    print(f"wlock is {hf / wl:.2f}x faster than snapshot_download through hf_xet "
          f"({median(times['plain HTTP']) / wl:.2f}x by plain HTTP); it writes at "
          f"{disk / wl:.2f}x the disk's speed and {cp / wl:.2f}x the page cache's; "
          f"hf_transfer alone, verifying nothing, at {disk / engine:.2f}x the disk's")
    print(f"the default against the one before the probe: {before / wl:.2f}x (aim >= 0.95); "
          f"against hf_transfer alone: {engine / wl:.2f}x (aim >= 0.9 at 10 GB)")


if __name__ == "__main__":
    main()
