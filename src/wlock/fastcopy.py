"""Copies that cost as little as the filesystem allows: a reflink (the blocks are shared,
copy-on-write: btrfs, xfs, bcachefs), else a kernel-side copy (`copy_file_range`, which NFS
and some filesystems turn into a server-side copy), never bytes through Python's buffers.
Used by restore from another cache or a directory archive and by export."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

FICLONE = 0x40049409  # linux/fs.h: _IOW(0x94, 9, int)
CHUNK = 1 << 30


def clone_or_copy(source: str | Path, dest: str | Path) -> str:
    """Write `dest` (created, or truncated) with the bytes of `source`. Returns how:
    "reflink" or "copy"."""
    src = os.open(source, os.O_RDONLY)
    try:
        dst = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            with contextlib.suppress(OSError):
                fcntl.ioctl(dst, FICLONE, src)
                return "reflink"
            size = os.fstat(src).st_size
            copied = 0
            try:
                while copied < size:
                    n = os.copy_file_range(src, dst, min(CHUNK, size - copied))
                    if n == 0:
                        break
                    copied += n
            except OSError:
                # Across filesystems on old kernels, or a filesystem without it.
                os.lseek(src, copied, os.SEEK_SET)
                while n := os.sendfile(dst, src, None, CHUNK):
                    copied += n
            return "copy"
        finally:
            os.close(dst)
    finally:
        os.close(src)


def link_or_copy(source: str | Path, dest: str | Path) -> str:
    """Make `dest` (which must not exist) hold the bytes of `source`: a hard link where both
    are on one filesystem, else as `clone_or_copy`. Returns "link", "reflink" or "copy"."""
    try:
        os.link(source, dest)
        return "link"
    except FileExistsError:
        raise
    except OSError:
        return clone_or_copy(source, dest)
