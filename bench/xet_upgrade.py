"""An upgrade that changes a tenth of one shard: how many bytes each client fetches again
(issue 39), with the earlier revision already in its cache.

    python bench/xet_upgrade.py [--shard-mb 128] [--changed 0.1]

The store keeps its files on Xet, as the Hub does, so the new revision's reconstruction names
the old xorbs for every unchanged chunk: only `--changed` of the chunks are new. Each client
syncs the first revision, the repo moves on, and each syncs again into the same cache (and,
for hf_xet, the same HF_HOME, where its own caches live): snapshot_download through hf_xet,
and `wlock lock --upgrade` + `wlock sync`. The bytes are counted by the emulator, on every
path a client can take (xorb ranges from the CAS, the bridge). The aim is <= 0.15x of the
shard for a client that reuses what it holds; this prints where each stands.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import (
    WLOCK,
    compile_wlock,
    machine,
    random_file,
    run,
    snapshot_download,
    snapshot_env,
)

from wlock.hubserver.process import HubProcess
from wlock.hubserver.store import StoreBuilder
from wlock.xet.chunking import boundaries

SHARD = "model-00001-of-00002.safetensors"


def fetched(hub: HubProcess) -> int:
    """Bytes the emulator served from files: xorb ranges and the bridge's objects."""
    return sum(e["bytes"] for e in hub.stats()["log"]
               if e["path"].startswith(("/xorbs/", "/objects/")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shard-mb", type=int, default=128)
    parser.add_argument("--changed", type=float, default=0.1,
                        help="the share of the shard's chunks the new revision changes")
    args = parser.parse_args()
    compile_wlock()
    print(f"machine: {machine()}")
    with tempfile.TemporaryDirectory(prefix="wlock-bench-", dir=os.environ.get("BENCH_DIR")) as tmp:
        root = Path(tmp)
        builder = StoreBuilder(root / "store", xet=True)
        old = bytearray(random_file(root / "gen" / SHARD, args.shard_mb * 2**20).read_bytes())
        other = os.urandom(8 * 2**20)
        builder.commit("model", "bench/upgrade", {
            SHARD: bytes(old), "model-00002-of-00002.safetensors": other,
            "config.json": b'{"model_type": "bench"}\n'})
        cuts = [0, *boundaries(bytes(old))]
        every = max(1, round(1 / args.changed))
        new = bytearray(old)
        changed = 0
        for k in range(0, len(cuts) - 1, every):  # a byte in the middle of each such chunk
            new[(cuts[k] + cuts[k + 1]) // 2] ^= 0xFF
            changed += cuts[k + 1] - cuts[k]
        size = len(new)
        print(f"{SHARD}: {size / 1e6:.1f} MB, {len(cuts) - 1} chunks; the upgrade changes "
              f"one in {every}: {changed / 1e6:.1f} MB ({changed / size:.3f} of it)")
        project = root / "project"
        project.mkdir()
        (project / "weights.toml").write_text('[[model]]\nid = "bench/upgrade"\n')
        with HubProcess(root / "store") as hub:
            env = snapshot_env(root / "hf" / "home")
            hf_cache, cache = root / "hf" / "cache", root / "wlock-cache"
            run(snapshot_download("bench/upgrade", hf_cache, hub.endpoint), env=env)
            run([*WLOCK, "-q", "lock", "--endpoint", hub.endpoint], cwd=project)
            run([*WLOCK, "-q", "sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache)],
                cwd=project)
            builder.commit("model", "bench/upgrade", {SHARD: bytes(new)})
            hub.reset_stats()
            run(snapshot_download("bench/upgrade", hf_cache, hub.endpoint), env=env)
            theirs = fetched(hub)
            hub.reset_stats()
            subprocess.run([*WLOCK, "-q", "lock", "--upgrade", "--endpoint", hub.endpoint],
                           cwd=project, check=True)
            run([*WLOCK, "-q", "sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache)],
                cwd=project)
            ours = fetched(hub)
        print(f"  snapshot_download through hf_xet  {theirs / 1e6:8.1f} MB: "
              f"{theirs / size:.2f}x the shard")
        print(f"  wlock lock --upgrade + sync       {ours / 1e6:8.1f} MB: "
              f"{ours / size:.2f}x the shard (aim <= 0.15)")


if __name__ == "__main__":
    sys.exit(main())
