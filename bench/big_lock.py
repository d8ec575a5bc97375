"""Locks with very many files: `wlock lock --check`, a no-op `wlock sync` and `wlock check`,
their time and peak memory, on a dataset of N tiny files all present in the cache.

    python bench/big_lock.py [--files 100000] [--dir /dev/shm]

No Hub is involved: each command works from the lock and the cache alone. The cache is built
under `--dir` (default: /dev/shm when there is one), so that the figures are wlock's own
work and not the metadata latency of a virtual disk (creating 2 files per entry on this
VM's disk takes about 1 ms each). Peak memory is the proportional set size (PSS) of the
command's whole process tree, sampled every 20 ms.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from _common import WLOCK, compile_wlock, machine, measured

from wlock.cache.layout import link_target
from wlock.lock.lockfile import write_lock
from wlock.lock.manifest import read_manifest
from wlock.models import FileTable, Lock, LockedRepo

REPO = "bench/huge"
REVISION = "b" * 40


def build(root: Path, files: int) -> tuple[Path, Path, int]:
    """A project locking `files` tiny files and a cache holding them all. Returns the
    project, the cache and the lock's size in bytes."""
    project = root / "project"
    project.mkdir()
    (project / "weights.toml").write_text(f'[[dataset]]\nid = "{REPO}"\n')
    manifest = read_manifest(project / "weights.toml")
    repo_dir = root / "cache" / ("datasets--" + REPO.replace("/", "--"))
    blobs, snapshot = repo_dir / "blobs", repo_dir / "snapshots" / REVISION
    blobs.mkdir(parents=True)
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text(REVISION)
    table = FileTable()
    paths = sorted(f"data/{n // 1000:04d}/sample-{n:07d}.json" for n in range(files))
    for n, path in enumerate(paths):
        data = b'{"n": %d}\n' % n
        etag = hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()
        table.append(path, len(data), etag, sha256=False)
        fd = os.open(blobs / etag, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, data)
        os.close(fd)
        link = snapshot / path
        if n % 1000 == 0:
            link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(link_target(path, etag), link)
    lock = Lock(manifest_digest=manifest.digest, repos=(LockedRepo(
        kind="dataset", id=REPO, requested="main", revision=REVISION, files=table),))
    write_lock(project / "weights.lock", lock)
    return project, root / "cache", (project / "weights.lock").stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--dir", default="/dev/shm" if os.path.isdir("/dev/shm") else None)
    args = parser.parse_args()
    compile_wlock()

    with tempfile.TemporaryDirectory(prefix="wlock-bench-", dir=args.dir) as tmp:
        project, cache, lock_bytes = build(Path(tmp), args.files)
        offline = {"HF_HUB_OFFLINE": "1"}
        figures = {
            "lock --check": measured([*WLOCK, "lock", "--check"], cwd=project, env=offline),
            "sync (no-op)": measured([*WLOCK, "sync", "--cache-dir", str(cache)], cwd=project,
                                     env=offline),
            "check": measured([*WLOCK, "check", "--cache-dir", str(cache)], cwd=project,
                              env=offline),
        }
        shutil.rmtree(cache)

    print(f"machine: {machine()}; files under {args.dir or tempfile.gettempdir()}")
    print(f"data: a lock of {args.files:,} files ({lock_bytes / 1e6:.0f} MB), all in the cache")
    for name, (seconds, peak) in figures.items():
        print(f"wlock {name:14} {seconds:7.2f}s   peak {peak / 2**20:6.0f} MiB PSS")


if __name__ == "__main__":
    main()
