"""Content hashes of files on disk, streamed with constant memory.

hashlib releases the GIL while it hashes a buffer (and `readinto` while it reads), so a pool of
threads hashes several files on all cores at OpenSSL's speed without the cost of processes.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

CHUNK = 4 * 1024 * 1024


def hash_file(path: Path, kind: str, size: int | None = None) -> str:
    """Hex digest of `path`: kind "sha256" (LFS content) or "git-sha1" (git blob id).

    For a git blob id the size goes into the header, so it is read from the open file.
    """
    with open(path, "rb", buffering=0) as f:
        if kind == "sha256":
            digest = hashlib.sha256()
        else:
            actual = size if size is not None else _fsize(f.fileno())
            digest = hashlib.sha1(usedforsecurity=False)
            digest.update(b"blob %d\x00" % actual)
        buffer = bytearray(CHUNK)
        view = memoryview(buffer)
        while n := f.readinto(buffer):
            digest.update(view[:n])
    return digest.hexdigest()


def _fsize(fd: int) -> int:
    return os.fstat(fd).st_size
