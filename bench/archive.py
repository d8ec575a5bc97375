"""The archive tier against the plain tools, on the same bytes in one run:

- restore (`wlock sync --offline --archive DIR`, every blob verified) against `cp -r` of the
  archive's blobs;
- restore from S3 (SeaweedFS on loopback) against the storage library's own download of the
  same objects (obstore, 8 at once), and against fsspec's s3fs bulk `get` (the other
  candidate library: this is the measurement that chose obstore);
- `wlock export` into tmpfs against `cp -rL` of the snapshot;
- a no-op `wlock archive` of a 1,000-file repo (everything already there).

    python bench/archive.py [--shards 4] [--shard-mb 256] [--small 40] [--runs 2]

Each restore starts from an empty cache, after `sync` so no contender pays for the last
one's write-back; sources are in the page cache for all alike.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import WLOCK, compile_wlock, machine, measured, median, run, synced_shards

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.seaweed import S3Server

S3FS_GET = """
import sys, s3fs
fs = s3fs.S3FileSystem(skip_instance_cache=True)
keys = fs.find(sys.argv[1])
fs.get(keys, [sys.argv[2] + "/" + k.rsplit("/", 1)[1] for k in keys])
"""
OBSTORE_GET = """
import os, sys
from concurrent.futures import ThreadPoolExecutor
import obstore
from obstore.store import S3Store
bucket, prefix = sys.argv[1].split("/", 1)
store = S3Store(bucket, endpoint=os.environ["AWS_ENDPOINT_URL"], region="us-east-1",
                client_options={"allow_http": True})
keys = [m["path"] for page in obstore.list(store, prefix) for m in page]
def get(key):
    with open(sys.argv[2] + "/" + key.rsplit("/", 1)[1], "wb") as f:
        for chunk in obstore.get(store, key):
            f.write(chunk)
with ThreadPoolExecutor(8) as pool:
    list(pool.map(get, keys))
"""


def tmpfs_folder(root: Path) -> tuple[Path, bool]:
    """A tmpfs mount of our own (root), else /dev/shm, else a plain folder."""
    mount = root / "tmpfs"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4g", "tmpfs", str(mount)],
                          capture_output=True)
    if done.returncode == 0:
        return mount, True
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        return Path(tempfile.mkdtemp(dir=shm, prefix="wlock-bench-")), False
    return mount, False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--shard-mb", type=int, default=256)
    parser.add_argument("--small", type=int, default=40)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    compile_wlock()

    with tempfile.TemporaryDirectory(prefix="wlock-bench-", dir=os.environ.get("BENCH_DIR")) as tmp:
        root = Path(tmp)
        project, cache = synced_shards(root, args.shards, args.shard_mb, args.small)
        small_project, small_cache = synced_shards(root, 0, 0, 1000, name="small")
        dead = "http://127.0.0.1:9"  # restores must not need the Hub
        total = sum(p.stat().st_size for p in (cache / "models--bench--shards" / "blobs").iterdir())
        folder = root / "nas"
        run([*WLOCK, "archive", "--to", str(folder), "--cache-dir", str(cache)], cwd=project)

        server = S3Server(root / "seaweed")
        server.start()
        times: dict[str, list[float]] = {}
        try:
            server.make_bucket("bench")
            s3env = server.env()
            run([*WLOCK, "archive", "--to", "s3://bench/a", "--cache-dir", str(cache)],
                cwd=project, env=s3env)
            run([*WLOCK, "archive", "--to", "s3://bench/small", "--cache-dir", str(small_cache)],
                cwd=small_project, env=s3env)
            shm, mounted = tmpfs_folder(root)
            snapshot = next((cache / "models--bench--shards" / "snapshots").iterdir())

            def timing(name: str, argv: list[str], cwd: Path = project,
                       env: dict[str, str] | None = None) -> None:
                run(["sync"])
                times.setdefault(name, []).append(measured(argv, cwd=cwd, env=env)[0])

            for i in range(args.runs):
                restored = root / f"restored-{i}"
                timing("restore-dir", [*WLOCK, "sync", "--offline", "--archive", str(folder),
                                       "--endpoint", dead, "--cache-dir", str(restored)])
                shutil.rmtree(restored)
                timing("cp-dir", ["cp", "-r", str(folder / "blobs"), str(restored)])
                shutil.rmtree(restored)
                timing("restore-s3", [*WLOCK, "sync", "--offline", "--archive", "s3://bench/a",
                                      "--endpoint", dead, "--cache-dir", str(restored)],
                       env=s3env)
                shutil.rmtree(restored)
                restored.mkdir()
                timing("s3fs-get", [sys.executable, "-c", S3FS_GET, "bench/a/blobs",
                                    str(restored)], env=s3env)
                shutil.rmtree(restored)
                restored.mkdir()
                timing("obstore-get", [sys.executable, "-c", OBSTORE_GET, "bench/a/blobs",
                                       str(restored)], env=s3env)
                shutil.rmtree(restored)
                exported = shm / f"export-{i}"
                timing("export", [*WLOCK, "export", "bench/shards", str(exported),
                                  "--cache-dir", str(cache)])
                shutil.rmtree(exported)
                timing("cp-L", ["cp", "-rL", str(snapshot), str(exported)])
                shutil.rmtree(exported)
                timing("noop-archive", [*WLOCK, "archive", "--to", "s3://bench/small",
                                        "--cache-dir", str(small_cache)],
                       cwd=small_project, env=s3env)
            if mounted:
                subprocess.run(["umount", str(shm)], check=False)
            else:
                shutil.rmtree(shm, ignore_errors=True)
        finally:
            server.close()

    t = {name: median(values) for name, values in times.items()}
    mb = total / 1e6
    print(f"machine: {machine()}")
    print(f"data: {args.shards} x {args.shard_mb} MiB shards + {args.small + 1} small files "
          f"= {mb:.0f} MB; median of {args.runs} runs; tmpfs: "
          f"{'a tmpfs mount' if mounted else shm}")

    def line(label: str, name: str) -> None:
        print(f"{label:48s} {t[name]:6.2f}s  {mb / t[name]:7.0f} MB/s")

    line("wlock sync --offline --archive DIR (verified)", "restore-dir")
    line("cp -r of the archive's blobs", "cp-dir")
    line("wlock sync --offline --archive s3:// (verified)", "restore-s3")
    line("obstore get of the same objects (8 threads)", "obstore-get")
    line("s3fs bulk get of the same objects", "s3fs-get")
    line("wlock export into tmpfs (verified)", "export")
    line("cp -rL of the snapshot into tmpfs", "cp-L")
    print(f"{'no-op wlock archive, 1,000-file repo, s3://':48s} {t['noop-archive']:6.2f}s")
    print(f"restore from a folder at {t['cp-dir'] / t['restore-dir']:.2f}x cp -r's speed; "
          f"from S3 at {t['obstore-get'] / t['restore-s3']:.2f}x obstore's own download "
          f"(obstore {t['s3fs-get'] / t['obstore-get']:.2f}x s3fs's bulk get); "
          f"export at {t['cp-L'] / t['export']:.2f}x cp -rL's")


if __name__ == "__main__":
    main()
