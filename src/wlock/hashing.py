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
DONTNEED = getattr(mmap, "MADV_DONTNEED", None)
# A thread of HashPool takes small files this many (or this many bytes) at a time.
GROUP_FILES = 256
GROUP_BYTES = 4 * 1024 * 1024


def new_digest(kind: str, size: int) -> Any:
    """A running hash of the lock's `kind` for `size` bytes fed to it in pieces: sha256, or
    git's blob id (its `blob <size>\\0` header first)."""
    if kind == "sha256":
        return hashlib.sha256()
    return hashlib.sha1(b"blob %d\x00" % size, usedforsecurity=False)


def hash_file(path: str | Path, kind: str) -> str:
    """Hex digest of `path`: kind "sha256" (LFS content) or "git-sha1" (git blob id)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        actual = os.fstat(fd).st_size
        if actual < MMAP_FROM:
            # One read for a small file (read on to the end in case it grew meanwhile).
            data = os.read(fd, actual + 1)
            while more := os.read(fd, CHUNK):
                data += more
            digest = new_digest(kind, len(data))
            digest.update(data)
            return str(digest.hexdigest())
        digest = new_digest(kind, actual)
        with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as mapped:
            view = memoryview(mapped)
            try:
                for start in range(0, actual, CHUNK):
                    digest.update(view[start : start + CHUNK])
                    # Unmap what was hashed: the pages stay in the page cache, but the
                    # process would otherwise show the whole file as resident.
                    if DONTNEED is not None:
                        mapped.madvise(DONTNEED, start, min(CHUNK, actual - start))
            finally:
                view.release()
        return str(digest.hexdigest())
    finally:
        os.close(fd)


class HashPool:
    """Threads that hash files (one per core by default). submit() returns at once with a
    function that waits for that submission's digests, so the caller can prepare the next
    batch while this one is hashed."""

    def __init__(self, jobs: int | None = None,
                 on_hashed: Callable[[int], None] | None = None) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self._pool = ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 2)
        self._on_hashed = on_hashed

    def __enter__(self) -> HashPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def submit(
        self, items: Sequence[tuple[str | Path, str, int]]
    ) -> Callable[[], list[str | OSError]]:
        """Digests of `(path, kind, size)` items, in their order, largest first so the
        longest hash starts at once. An item that cannot be read gives its OSError, for the
        caller to judge. Small files go to the threads in groups: handing a thread one
        10-byte file costs more than hashing it."""
        results: list[str | OSError] = [""] * len(items)
        on_hashed = self._on_hashed

        def hash_group(group: list[int]) -> None:
            for index in group:
                path, kind, size = items[index]
                try:
                    results[index] = hash_file(path, kind)
                except OSError as e:
                    results[index] = e
                finally:
                    if on_hashed:
                        on_hashed(size)

        order = sorted(range(len(items)), key=lambda i: -items[i][2])
        groups: list[list[int]] = []
        weight = GROUP_BYTES
        for index in order:
            size = items[index][2]
            if weight + size > GROUP_BYTES or len(groups[-1]) == GROUP_FILES:
                groups.append([])
                weight = 0
            groups[-1].append(index)
            weight += size
        futures = [self._pool.submit(hash_group, group) for group in groups]

        def wait() -> list[str | OSError]:
            for future in futures:
                future.result()
            return results

        return wait


def hash_files(
    items: Sequence[tuple[str | Path, str, int]],
    *,
    jobs: int | None = None,
    on_hashed: Callable[[int], None] | None = None,
) -> list[str | OSError]:
    """HashPool.submit() for one set of files, waited for."""
    with HashPool(jobs, on_hashed) as pool:
        return pool.submit(items)()
