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

from wlock.cancel import result_of

CHUNK = 16 * 1024 * 1024
GROWING_WINDOW = 4 * 1024 * 1024  # GrowingHash maps this much of a file at a time
MMAP_FROM = 1024 * 1024
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)  # Linux: map the pages in one call, not a fault each
# A thread of HashPool takes small files this many (or this many bytes) at a time.
GROUP_FILES = 256
GROUP_BYTES = 4 * 1024 * 1024
# Many tiny files are hashed in worker processes: for a file of a few hundred bytes the cost is
# the Python around the hash (open, read, close, bookkeeping), which holds the GIL, so
# threads take turns instead of sharing the cores. From PROCESSES_FROM files under
# SMALL_FILE in one submission, in pieces of PROCESS_PIECE. Measured on 2 cores, `check` of
# 100,000 files of 40 bytes: 2.3 s with threads, against 1.3 s to hash them in one process.
SMALL_FILE = 256 * 1024
PROCESSES_FROM = 2048
PROCESS_PIECE = 512


def new_digest(kind: str, size: int) -> Any:
    """A running hash of the lock's `kind` for `size` bytes fed to it in pieces: sha256, or
    git's blob id (its `blob <size>\\0` header first)."""
    if kind == "sha256":
        return hashlib.sha256()
    return hashlib.sha1(b"blob %d\x00" % size, usedforsecurity=False)


class GrowingHash:
    """The digest of a file another process is still writing in ranges, in any order (as
    hf_transfer does): the part written from the start is hashed as it lands, so the file
    is not read again whole once its last range arrives. `lseek(SEEK_HOLE)` finds where
    that part ends (the kernel knows which pages hold data; a page being written is locked
    until its bytes are in, so a read never sees it half done).

    A filesystem without holes (`SEEK_HOLE` answers "data" to the end, as FUSE without its
    own lseek does) lets zeros in; so `finish()` is a claim, not a verdict: the caller
    compares it with the digest it expects and, on a mismatch, hashes the file again whole
    (hash_file) before blaming the bytes. A range the writer wrote twice with other bytes
    the second time could in principle pass unseen; hf_transfer writes a range only once
    it has all of it, and a failed write is retried with the same response's bytes.
    """

    def __init__(self, path: str | Path, kind: str, size: int) -> None:
        self._path, self._kind, self._size = path, kind, size
        self._digest = new_digest(kind, size)
        self._fd: int | None = None
        self._at = 0
        self._usable = hasattr(os, "SEEK_HOLE")

    @property
    def hashed(self) -> int:
        return self._at

    def advance(self, written: int | None = None) -> None:
        """Hash what was written since the last call, from where the last call stopped to
        the first range not written yet: `written` when the writer says how far the file is
        whole (this process's own writes), else where the kernel's first hole is."""
        if not self._usable or not self._open():
            return
        assert self._fd is not None
        if written is not None:
            end = written
        else:
            try:
                end = os.lseek(self._fd, self._at, os.SEEK_HOLE)
            except OSError:  # ENXIO: nothing at or past this offset yet; EINVAL: no holes
                return
        try:
            self._read_to(min(end, self._size))
        except OSError:  # a mapping that fails here is not the download's failure:
            self._usable = False  # finish() says None, and the file is hashed whole

    def finish(self) -> str | None:
        """The file's digest now that it is complete (None: it could not be followed)."""
        try:
            if not self._usable or not self._open():
                return None
            assert self._fd is not None
            try:
                self._read_to(os.fstat(self._fd).st_size)
            except OSError:  # a mapping refused (a filesystem without mmap): hash it whole
                return None
            return str(self._digest.hexdigest())
        finally:
            self.close()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _open(self) -> bool:
        if self._fd is None:
            try:
                self._fd = os.open(self._path, os.O_RDONLY)
            except FileNotFoundError:
                return False
        return True

    def _read_to(self, end: int) -> None:
        """Hash [at, end) through read-only mappings of GROWING_WINDOW at a time, populated
        in one call: the pages are the page cache's own, so nothing is copied. Read back
        into a buffer with preadv, the copy cost 0.55 s of system time per GiB, on 2 cores
        the download already keeps busy (a 4 GB sync: the parent's 2.63 s of system time
        became 0.15 s). A small window keeps the mapped pages out of the process's
        resident size."""
        assert self._fd is not None
        # Never map past the file's end: touching a page there is SIGBUS, not an error.
        end = min(end, os.fstat(self._fd).st_size)
        while self._at < end:
            base = self._at - self._at % mmap.ALLOCATIONGRANULARITY
            length = min(GROWING_WINDOW, end - base)
            if has_hole(self._fd, base, base + length):
                # A hole (a range whose write failed: a full disk) is read, never mapped:
                # a tmpfs allocates a page to map one, and when it is full that is SIGBUS,
                # where a read returns zeros (issue 59).
                self._digest.update(os.pread(self._fd, base + length - self._at, self._at))
            else:
                hash_mapped(self._digest, self._fd, base, length, skip=self._at - base)
            self._at = base + length


def hash_mapped(digest: Any, fd: int, offset: int, length: int, skip: int = 0) -> None:
    """Feed `digest` bytes [offset + skip, offset + length) of the file `fd` through a
    read-only mapping of them, its pages mapped in one call (MAP_POPULATE where there is
    one: not a fault a page) and unmapped on return. `offset` is a multiple of
    mmap.ALLOCATIONGRANULARITY, and the range lies within the file (past its end a page is
    SIGBUS, not an error)."""
    with mmap.mmap(fd, length, flags=mmap.MAP_SHARED | _POPULATE, prot=mmap.PROT_READ,
                   offset=offset) as mapped, memoryview(mapped) as view:
        digest.update(view[skip:])


def has_hole(fd: int, start: int, end: int) -> bool:
    """Whether [start, end) of the file `fd` holds a hole (SEEK_HOLE; a filesystem that does
    not say reports none)."""
    try:
        return os.lseek(fd, start, os.SEEK_HOLE) < end
    except OSError:  # ENXIO past the end, or no SEEK_HOLE: nothing to avoid
        return False


def hash_file(path: str | Path, kind: str) -> str:
    """Hex digest of `path`: kind "sha256" (LFS content) or "git-sha1" (git blob id)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        actual = os.fstat(fd).st_size
        if actual >= MMAP_FROM and has_hole(fd, 0, actual):
            # A hole is read, never mapped (a full tmpfs answers a mapped one with SIGBUS).
            digest = new_digest(kind, actual)
            for start in range(0, actual, CHUNK):
                digest.update(os.pread(fd, min(CHUNK, actual - start), start))
            return str(digest.hexdigest())
        if actual < MMAP_FROM:
            # One read for a small file (read on to the end in case it grew meanwhile).
            data = os.read(fd, actual + 1)
            while more := os.read(fd, CHUNK):
                data += more
            digest = new_digest(kind, len(data))
            digest.update(data)
            return str(digest.hexdigest())
        digest = new_digest(kind, actual)
        # A window of CHUNK at a time, its pages mapped in one call (a fault per page cost
        # a tmpfs 7%: 0.183 s against 0.170 for 256 MiB; the same on ext4's page cache),
        # each unmapped once hashed: the process never shows the whole file as resident.
        for start in range(0, actual, CHUNK):
            hash_mapped(digest, fd, start, min(CHUNK, actual - start))
        return str(digest.hexdigest())
    finally:
        os.close(fd)


def hash_many(items: list[tuple[str, str]]) -> list[str | OSError]:
    """hash_file of each `(path, kind)`, or the OSError that reading it raised: one piece of
    a HashPool's tiny files, in a worker process."""
    out: list[str | OSError] = []
    for path, kind in items:
        try:
            out.append(hash_file(path, kind))
        except OSError as e:
            out.append(e)
    return out


class HashPool:
    """Threads that hash files (one per core by default), and for very many tiny files
    worker processes (PROCESSES_FROM says why). submit() returns at once with a function
    that waits for that submission's digests, so the caller can prepare the next batch
    while this one is hashed."""

    def __init__(self, jobs: int | None = None,
                 on_hashed: Callable[[int], None] | None = None) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self._jobs = jobs or os.cpu_count() or 2
        self._pool = ThreadPoolExecutor(max_workers=self._jobs)
        self._processes: Any = None  # a ProcessPoolExecutor, made on first use
        self._on_hashed = on_hashed

    def __enter__(self) -> HashPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        if self._processes is not None:
            self._processes.shutdown(wait=True, cancel_futures=True)

    def _process_pool(self) -> Any:
        """Worker processes forked from a fresh server process (`forkserver`): never from
        this one, whose other threads (the hashing threads, a progress bar) may hold locks
        at the moment of a fork. None where the platform has no forkserver."""
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        if self._processes is None:
            if "forkserver" not in multiprocessing.get_all_start_methods():
                return None
            context = multiprocessing.get_context("forkserver")
            # The server imports this module only, not the program's __main__.
            context.set_forkserver_preload(["wlock.hashing"])
            self._processes = ProcessPoolExecutor(self._jobs, mp_context=context)
        return self._processes

    def submit(
        self, items: Sequence[tuple[str | Path, str, int]]
    ) -> Callable[[], list[str | OSError]]:
        """Digests of `(path, kind, size)` items, in their order, largest first so the
        longest hash starts at once. An item that cannot be read gives its OSError, for the
        caller to judge. Small files go to the threads in groups: handing a thread one
        10-byte file costs more than hashing it."""
        results: list[str | OSError] = [""] * len(items)
        on_hashed = self._on_hashed
        pieces = []
        tiny = [i for i in range(len(items)) if items[i][2] < SMALL_FILE]
        processes = self._process_pool() if len(tiny) >= PROCESSES_FROM and \
            self._jobs > 1 else None
        if processes is not None:
            for start in range(0, len(tiny), PROCESS_PIECE):
                piece = tiny[start:start + PROCESS_PIECE]
                pieces.append((piece, processes.submit(
                    hash_many, [(str(items[i][0]), items[i][1]) for i in piece])))
            done = set(tiny)
        else:
            done = set()

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

        order = sorted((i for i in range(len(items)) if i not in done),
                       key=lambda i: -items[i][2])
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
                result_of(future)
            for piece, hashed in pieces:
                for index, digest in zip(piece, result_of(hashed), strict=True):
                    results[index] = digest
                if on_hashed:
                    on_hashed(sum(items[i][2] for i in piece))
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
