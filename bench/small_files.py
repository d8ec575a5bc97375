"""Many small files at Hub latency: `wlock sync` against huggingface_hub.snapshot_download,
on one emulator that adds the same latency to every request.

    python bench/small_files.py [--files 1000] [--latency-ms 50] [--runs 1] [--kind git]

Small files are latency-bound: each costs a request or two of `latency` each, so the time is
about files x round trips x latency / concurrency, until the CPU of a 2-core machine is the
limit. `--kind` says how the Hub serves them:
- `git` (files kept in git, as config and tokenizer files are): `/resolve` answers with a
  same-host redirect to `/api/resolve-cache/...`, which wlock learns and then asks directly.
- `lfs` (small LFS files, as a dataset's many parquet shards are): `/resolve` answers with a
  redirect to the CDN, another host, and the latency is paid on both hops of every file.
  The store keeps them on Xet, as the Hub does: snapshot_download fetches them through hf_xet
  (its default), with HF_XET_HIGH_PERFORMANCE=1, and by plain HTTP (hf_xet off).
`--kind both` runs the two, one after the other. wlock runs with its defaults.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

from _common import (
    HF_XET_MODES,
    WLOCK,
    compile_wlock,
    machine,
    median,
    run,
    snapshot_download,
    snapshot_env,
    timed,
)

from wlock.hubserver.process import HubProcess
from wlock.hubserver.store import StoreBuilder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--latency-ms", type=float, default=50)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--kind", choices=("git", "lfs", "both"), default="both")
    args = parser.parse_args()
    compile_wlock()
    print(f"machine: {machine()}")
    for kind in ("git", "lfs") if args.kind == "both" else (args.kind,):
        bench(kind, args.files, args.latency_ms, args.runs)


def bench(kind: str, files: int, latency_ms: float, runs: int) -> None:
    with tempfile.TemporaryDirectory(prefix="wlock-bench-", dir=os.environ.get("BENCH_DIR")) as tmp:
        root = Path(tmp)
        # On Xet as the Hub stores LFS files: small LFS files then go through hf_xet in
        # snapshot_download (files kept in git never do).
        StoreBuilder(root / "store", xet=kind == "lfs").commit("model", "bench/small", {
            f"shard/{n:05d}.json": os.urandom(1024 + n % 997) for n in range(files)
        }, lfs=kind == "lfs")
        project = root / "project"
        project.mkdir()
        (project / "weights.toml").write_text('[[model]]\nid = "bench/small"\n')
        with HubProcess(root / "store") as hub:
            run([*WLOCK, "lock", "--endpoint", hub.endpoint], cwd=project)
            hub.faults(latency_ms=latency_ms)
            # Files kept in git never go through hf_xet: one snapshot_download for them.
            modes = list(HF_XET_MODES) if kind == "lfs" else ["plain HTTP"]
            times: dict[str, list[float]] = {"wlock": [], **{m: [] for m in modes}}
            for i in range(runs):
                cache = root / f"wlock-{i}"
                times["wlock"].append(timed(lambda cache=cache: run(
                    [*WLOCK, "sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache)],
                    cwd=project)))
                shutil.rmtree(cache)
                for mode in modes:
                    cache = root / f"hf-{i}"
                    times[mode].append(timed(lambda cache=cache, mode=mode: run(
                        snapshot_download("bench/small", cache, hub.endpoint),
                        env=snapshot_env(root / "hf-home", mode))))
                    shutil.rmtree(cache)
                    shutil.rmtree(root / "hf-home", ignore_errors=True)

    wl = median(times["wlock"])
    print(f"{kind}: {files} small files, {latency_ms:g} ms added to every request (every "
          f"hop); median of {runs} run(s), each into an empty cache")
    print(f"  {'wlock sync (default)':<40} {wl:6.2f}s")
    for mode in modes:
        label = f"snapshot_download, {mode}" if kind == "lfs" else "snapshot_download"
        print(f"  {label:<40} {median(times[mode]):6.2f}s")
    peer = "hf_xet" if kind == "lfs" else "plain HTTP"
    print(f"  wlock is {median(times[peer]) / wl:.2f}x faster than snapshot_download"
          f"{' through hf_xet' if kind == 'lfs' else ''} (aim >= 8)")


if __name__ == "__main__":
    main()
