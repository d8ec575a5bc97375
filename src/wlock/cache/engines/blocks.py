"""A large file the endpoint serves itself (a mirror, a proxy, `wlock serve`): in blocks of
MIRROR_BLOCK aligned to the file's start, several at once, each one ranged GET through libcurl
(engines.small's client), streamed to where it belongs in the temp file and hashed in order as
the file fills from its start.

Why blocks, and why these: a pull-through mirror fetches its upstream in blocks of its own,
each in one upstream stream, and serves a block from its cache once it holds it. olah (the one
the field runs) keeps 64 MiB blocks and lets requests for the same block share one upstream
download. A file in one stream from such a mirror comes at one upstream stream's rate; ranges
that cut across its blocks make it wait on, or fetch again, blocks other ranges asked for
(hf_transfer's 4 MiB ranges through olah with an empty cache fetched 1.63x the bytes
upstream, bench/shaped_link.py). Ranges on its own block boundaries start one upstream
stream each and share nothing: measured through olah with an empty cache in front of the
paced emulator (20 MB/s a stream), 4 x 128 MiB in one stream a file took 8.7 s, in its
64 MiB blocks 5.8 s, with 1.00x the bytes upstream either way. A mirror with smaller blocks
that divide 64 MiB (olah's cache-block-size is a power of two) is served aligned ranges too.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

from wlock.cache.engines import Aborted, FetchJob, OnBytes, Retryable
from wlock.cache.engines.curl import Headers
from wlock.cache.engines.small import NEW_FILE, SmallFiles, write_all
from wlock.errors import HubUnreachableError
from wlock.hashing import GrowingHash, hash_file

MIRROR_BLOCK = int(os.environ.get("WLOCK_MIRROR_BLOCK", 64 * 1024 * 1024))
# Blocks in flight across the sync, shared evenly by the files fetching blocks: each holds a
# thread, a connection to the mirror and, at olah, a block of its memory while it fetches the
# block upstream. Measured through olah (4 x 512 MiB, the emulator upstream paced to 20 MB/s
# a stream; snapshot_download 14.7 s, past the mirror), blocks at once for the whole sync:
# empty cache, 8: 22.7 s, 16: 15.0 s, 32: 13.1 s; full cache, 8: 5.5-5.8 s, 16: 6.0-6.3 s,
# 32: 6.4-8.2 s (one GET a file 4.35 s). olah serves one file's blocks at once worse than
# several files' (a file's 8 blocks at once: 77-105 MB/s in all, where 8 spread over 4 files
# took 3.4 s for 512 MiB). A level that doubled while a round of blocks brought 1.25x the
# rate of the one before stopped at 16 or 8 on the empty cache (18-19.5 s): olah's rate
# grows with blocks at once only once they are many, so rounds could not see it.
IN_FLIGHT = 32
_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)")


class Slots:
    """The sync's blocks in flight (IN_FLIGHT), shared evenly by the files fetching blocks."""

    def __init__(self, level: int = IN_FLIGHT) -> None:
        self.level = level
        self._in_flight = 0
        self._files = 0  # files fetching blocks now
        self._free = threading.Condition()

    @contextlib.contextmanager
    def file(self) -> Iterator[None]:
        with self._free:
            self._files += 1
        try:
            yield
        finally:
            with self._free:
                self._files -= 1
                self._free.notify_all()

    def take(self, mine: int, timeout: float) -> bool:
        """A slot for one more block of a file that has `mine` in flight; False when none
        came free within `timeout` seconds."""
        with self._free:
            if not self._open(mine) and not self._free.wait(timeout):
                return False
            if not self._open(mine):
                return False
            self._in_flight += 1
            return True

    def give(self) -> None:
        with self._free:
            self._in_flight -= 1
            self._free.notify_all()

    def share(self) -> int:
        return -(-self.level // max(1, self._files))

    def _open(self, mine: int) -> bool:
        return self._in_flight < self.level and mine < self.share()


class Blocks:
    """The mirror-block engine of one sync: its threads (each keeps its libcurl handle and
    connections for the blocks that follow), and the blocks in flight (Slots)."""

    def __init__(self, small: SmallFiles, *, on_bytes: OnBytes,
                 aborted: threading.Event) -> None:
        self._small, self._on_bytes, self._aborted = small, on_bytes, aborted
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self.slots = Slots()
        self.most = 0  # the most blocks of one file in flight at once
        self.read_again: dict[str, int] = {}  # as HfTransfer.read_again

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def fetch(self, job: FetchJob, url: str) -> tuple[str, int]:
        """`job` from `url` (the endpoint's own) into its temp file, its blocks in flight
        as the sync's Slots allow: its digest and size. A server that ignores Range
        raises Retryable "no-ranges" before a byte is written."""
        os.close(os.open(job.temp, NEW_FILE, 0o666))  # empty: a retry starts afresh
        stop = threading.Event()
        bodies = [_BlockBody(job, start, min(start + MIRROR_BLOCK, job.size), self._on_bytes,
                             stop) for start in range(0, job.size, MIRROR_BLOCK)]
        growing = GrowingHash(job.temp, job.hash_kind, job.size)
        with self.slots.file():
            return self._fetch(job, url, bodies, growing, stop)

    def _fetch(self, job: FetchJob, url: str, bodies: list[_BlockBody], growing: GrowingHash,
               stop: threading.Event) -> tuple[str, int]:
        pool = self._threads()
        running: dict[Future[None], int] = {}  # -> its block
        started = 0  # blocks asked for so far, in order
        following = 0  # the first block not yet whole: the hash has reached its start
        failure: BaseException | None = None
        try:
            while following < len(bodies) and failure is None:
                # The first block waits for a slot; the others take one if there is one.
                while started < len(bodies) and self.slots.take(
                        len(running), 0.05 if not running else 0):
                    body = bodies[started]
                    running[pool.submit(self._small.get_range, job, url, body.start,
                                        body.end, body.open)] = started
                    started += 1
                self.most = max(self.most, len(running))
                done, _ = wait(running, timeout=0.05, return_when=FIRST_COMPLETED)
                for future in done:
                    body = bodies[running.pop(future)]
                    self.slots.give()
                    try:
                        future.result()
                        body.finish()
                    except BaseException as e:  # noqa: BLE001 - the first is raised below
                        failure = failure or e
                while following < len(bodies) and bodies[following].whole:
                    following += 1
                if self._aborted.is_set():
                    failure = failure or Aborted()
                written = bodies[following].start + bodies[following].written \
                    if following < len(bodies) else job.size
                # A block at a time: the next blocks are asked for while it catches up.
                growing.advance(min(written, growing.hashed + MIRROR_BLOCK))
            if failure is not None:
                stop.set()
                wait(running)  # each stops at its next bytes; none writes after this
                for _ in running:
                    self.slots.give()
                self._on_bytes(job, -sum(body.written for body in bodies))
                raise failure
            digest = growing.finish()
        finally:
            growing.close()
            for body in bodies:
                body.close()
        if digest != job.etag:
            # It could not follow the file (no mmap here), or a filesystem whose mappings
            # lag its writes (FUSE) showed it other bytes: read it whole before blaming them.
            digest = hash_file(job.temp, job.hash_kind)
            self.read_again[job.label] = job.size
        return digest, job.size

    def _threads(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(IN_FLIGHT, thread_name_prefix="wlock-block")
            return self._pool


class _BlockBody:
    """Where one block's answer goes: its place in the temp file, once the answer says it
    is that range."""

    def __init__(self, job: FetchJob, start: int, end: int, on_bytes: OnBytes,
                 stop: threading.Event) -> None:
        self.job, self.start, self.end = job, start, end
        self._on_bytes, self._stop = on_bytes, stop
        self.fd: int | None = None
        self.written = 0
        self.whole = False

    def open(self, status: int, headers: Headers) -> Callable[[bytes], None] | None:
        if not 200 <= status < 300:
            return None
        if self._stop.is_set():
            raise Aborted
        if status != 206:
            raise Retryable(HubUnreachableError(
                f"{self.job.label}: the download server ignores HTTP ranges",
                repo=self.job.repo_id, subject=self.job.label), reason="no-ranges")
        said = _CONTENT_RANGE.fullmatch((headers.get("Content-Range") or "").strip())
        if said is None or (int(said[1]), int(said[2]) + 1) != (self.start, self.end) \
                or said[3] not in ("*", str(self.job.size)):
            raise Retryable(HubUnreachableError(
                f"{self.job.label}: asked for bytes {self.start}-{self.end - 1} of "
                f"{self.job.size}, the server answered "
                f"{headers.get('Content-Range') or 'no Content-Range'}",
                repo=self.job.repo_id, subject=self.job.label))
        self.close()
        self.fd = os.open(self.job.temp, _OPEN_FILE)
        os.lseek(self.fd, self.start, os.SEEK_SET)
        self._on_bytes(self.job, -self.written)
        self.written = 0
        return self.write

    def write(self, chunk: bytes) -> None:
        assert self.fd is not None
        if self._stop.is_set():
            raise Aborted
        if self.written + len(chunk) > self.end - self.start:
            raise Retryable(HubUnreachableError(
                f"{self.job.label}: the server sent more than bytes {self.start}-"
                f"{self.end - 1}", repo=self.job.repo_id, subject=self.job.label))
        write_all(self.fd, chunk)
        self.written += len(chunk)
        self._on_bytes(self.job, len(chunk))

    def finish(self) -> None:
        """The GET ended with its answer: whole if every byte of the range came."""
        self.close()
        if self.written != self.end - self.start:
            raise Retryable(HubUnreachableError(
                f"{self.job.label}: bytes {self.start}-{self.end - 1} ended after "
                f"{self.written}", repo=self.job.repo_id, subject=self.job.label))
        self.whole = True

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


_OPEN_FILE = NEW_FILE & ~(os.O_CREAT | os.O_TRUNC)  # the file fetch() made
