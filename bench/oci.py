"""An OCI registry as the archive, against the plain tools, on the same bytes in one run:

- push (`wlock archive --to oci+http://...`: each locked repo a ModelPack artifact) into
  CNCF distribution on loopback (Debian's docker-registry), from an empty registry;
- pull (`wlock sync --offline --archive oci+http://...`, every blob verified against the
  lock and published into an empty HF cache) against `skopeo copy` of the same artifact
  into an OCI layout (skopeo verifies each blob's digest too), and against `cp` of the same
  bytes followed by `sha256sum` (reading and checking the bytes on one machine, no registry).

    python bench/oci.py [--shards 4] [--shard-mb 512] [--small 1000] [--runs 2]

Every contender starts from an empty destination; the registry's storage is in the page
cache for all alike (each pull reads the same files).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

from _common import WLOCK, compile_wlock, machine, measured, median, run, synced_shards

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.registry import registry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--shard-mb", type=int, default=512)
    parser.add_argument("--small", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    compile_wlock()
    with tempfile.TemporaryDirectory(prefix="wlock-bench-", dir=os.environ.get("BENCH_DIR")) as tmp:
        root = Path(tmp)
        project, cache = synced_shards(root, args.shards, args.shard_mb, args.small)
        blobs = cache / "models--bench--shards" / "blobs"
        total = sum(p.stat().st_size for p in blobs.iterdir())
        dead = "http://127.0.0.1:9"  # pulls must not need the Hub
        times: dict[str, list[float]] = {}

        def timing(name: str, argv: list[str]) -> None:
            run(["sync"])
            times.setdefault(name, []).append(measured(argv, cwd=project)[0])

        for i in range(args.runs):
            with registry(root / f"registry-{i}") as server:
                url = server.url("bench")
                timing("push", [*WLOCK, "archive", "--to", url, "--cache-dir", str(cache)])
                lock = (project / "weights.lock").read_text()
                commit = lock.split('revision = "')[1].split('"')[0]
                pulled = root / f"pulled-{i}"
                timing("pull", [*WLOCK, "sync", "--offline", "--archive", url, "--endpoint",
                                dead, "--cache-dir", str(pulled)])
                shutil.rmtree(pulled)
                layout = root / f"layout-{i}"
                timing("skopeo", ["skopeo", "copy", "-q", "--src-tls-verify=false",
                                  f"docker://{server.address}/bench/bench/shards:{commit}",
                                  f"oci:{layout}:x"])
                shutil.rmtree(layout)
                copied = root / f"copied-{i}"
                timing("cp", ["cp", "-r", str(blobs), str(copied)])
                timing("sha256", ["sh", "-c", f"sha256sum {copied}/* > /dev/null"])
                shutil.rmtree(copied)

    t = {name: median(values) for name, values in times.items()}
    cp_sha = t["cp"] + t["sha256"]
    mb = total / 1e6
    print(f"machine: {machine()}")
    print(f"data: {args.shards} x {args.shard_mb} MiB + {args.small + 1} small files = "
          f"{mb:.0f} MB; median of {args.runs} runs; registry: CNCF distribution 2.8 on "
          "loopback")

    def line(label: str, seconds: float) -> None:
        print(f"{label:52s} {seconds:6.2f}s  {mb / seconds:7.0f} MB/s")

    line("wlock archive --to oci+http:// (push, empty registry)", t["push"])
    line("wlock sync --archive oci+http:// (pull, verified)", t["pull"])
    line("skopeo copy of the same artifact to an OCI layout", t["skopeo"])
    line("cp -r of the same bytes + sha256sum", cp_sha)
    print(f"pull at {cp_sha / t['pull']:.2f}x cp + sha256's speed, "
          f"{t['skopeo'] / t['pull']:.2f}x skopeo copy's")


if __name__ == "__main__":
    main()
