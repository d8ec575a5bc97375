"""Content hashes of files on disk, streamed with constant memory.

hashlib releases the GIL while it hashes a buffer, so a pool of threads hashes several files
on all cores at OpenSSL's speed without the cost of processes. Large files are hashed through
`mmap`, which saves the copy from the page cache into a buffer (measured on 4 x 256 MiB in
the page cache, 2 threads: 0.40 s against 0.48 s with `readinto`). Blobs are never truncated
in place (they are replaced by rename), so mapping them is safe.
"""

from __future__ import annotations

import hashlib
import mmap
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

CHUNK = 16 * 1024 * 1024
MMAP_FROM = 1024 * 1024


def hash_file(path: Path, kind: str) -> str:
    """Hex digest of `path`: kind "sha256" (LFS content) or "git-sha1" (git blob id)."""
    with open(path, "rb", buffering=0) as f:
        actual = os.fstat(f.fileno()).st_size
        digest: Any
        if kind == "sha256":
            digest = hashlib.sha256()
        else:
            digest = hashlib.sha1(usedforsecurity=False)
            digest.update(b"blob %d\x00" % actual)
        if actual >= MMAP_FROM:
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                view = memoryview(mapped)
                try:
                    for start in range(0, actual, CHUNK):
                        digest.update(view[start : start + CHUNK])
                finally:
                    view.release()
        else:
            while chunk := f.read(CHUNK):
                digest.update(chunk)
    result: str = digest.hexdigest()
    return result


def hash_files(
    items: Sequence[tuple[Path, str, int]],
    *,
    jobs: int | None = None,
    on_hashed: Callable[[int], None] | None = None,
) -> list[str | OSError]:
    """Digests of `(path, kind, size)` items, in their order, hashed on a pool of threads
    (one per core by default), largest first so the longest hash starts at once. An item
    that cannot be read gives its OSError, for the caller to judge. `on_hashed(size)` is
    called as each one finishes."""
    from concurrent.futures import ThreadPoolExecutor

    def one(index: int) -> str | OSError:
        path, kind, size = items[index]
        try:
            return hash_file(path, kind)
        except OSError as e:
            return e
        finally:
            if on_hashed:
                on_hashed(size)

    results: list[str | OSError] = [""] * len(items)
    order = sorted(range(len(items)), key=lambda i: -items[i][2])
    with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 2) as pool:
        for index, digest in zip(order, pool.map(one, order), strict=True):
            results[index] = digest
    return results
