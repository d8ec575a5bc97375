"""Small files through libcurl (wlock.cache.engines.curl says why): a GET through the
redirects, no HEAD first, the body hashed as it arrives; how many at once (SmallGate); and the
shortcut a commit's git files are served under once the endpoint named it (SmallFiles._learn).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote, urlsplit

from wlock.cache.engines import Aborted, FetchJob, OnBytes
from wlock.cache.engines.curl import Curl, Headers, Sink, WireError
from wlock.cache.engines.route import CONNECT_TIMEOUT, MAX_REDIRECTS, Route, transport_failure
from wlock.errors import HubError
from wlock.hashing import hash_file, new_digest
from wlock.version import __version__

# A small file's deadline besides the silence timeout: --timeout, plus its size at this rate.
# A server that trickles a byte a second never trips the silence timeout, and kept a file
# going forever (issue 38); 100 kB/s is far below any link a sync of weights is worth on.
MIN_RATE = 100_000
# Small files at once, at most, for each round trip a file costs, whatever --jobs says: each
# is a request or two of Hub latency (tens of ms on the real Hub), so concurrency, not
# bandwidth, bounds them (small_ceiling says why this many; SmallGate lowers it when the Hub
# answers 429).
SMALL_CEILING = 64


def small_ceiling(round_trips: float = 1.0) -> int:
    """How many small files may be in flight when each costs `round_trips` round trips on
    average: SMALL_CEILING for each.

    By Little's law, the files in flight are the rate times the time each takes: the rate
    this machine sustains is the same whatever a file's round trips (its CPU is the limit),
    so a file that takes two (an LFS file: the endpoint's redirect, then the CDN) needs
    twice as many in flight as one kept in git, which takes one once its redirect is
    learned (SmallFiles._learn). Measured (bench/small_files.py, 2 cores, 50 ms a request,
    in one run): 1,000 LFS files took 2.39 s with 64 in flight, 2.21 s with 96, 2.07 s with
    128 and 2.50 s with 192; 1,000 git files 1.65 s with 64 and 1.78 s with 128. Below the
    ceiling small files are latency-bound, above it CPU-bound.

    Fewer where this process may open few files (macOS's default is 256): a small file in
    flight holds up to four descriptors (its connections to the endpoint and to the CDN,
    its download lock, its temp file), and half the limit is left to the rest of the
    sync."""
    ceiling = max(1, round(SMALL_CEILING * round_trips))
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):  # no such limit here (Windows)
        return ceiling
    if soft == resource.RLIM_INFINITY:
        return ceiling
    return max(1, min(ceiling, soft // 2 // 4))



class SmallGate:
    """How many small-file requests are out at once: `ceiling` while the server takes them,
    half as many when it answers 429 or 5xx (it asks for less), then one more for each file
    that arrives, back up to the ceiling: additive increase, multiplicative decrease, TCP's
    congestion rule. hf_xet's controller (xet-core, adaptive_concurrency/controller.rs) also
    adds one at a time, and takes one away per failure, each at most once per time window,
    judging success by a model of round-trip times; a sync's few seconds of small files
    give such a model too little to learn from, and a server asking for less wants fewer
    requests at once than one fewer.

    A burst of refusals halves it once, not once per refusal: only a request that started
    after the last halving can halve it again (its answer is news about the new level). The
    ceiling is where more requests stop helping on the machine (small_ceiling).
    """

    def __init__(self, ceiling: int) -> None:
        self.ceiling = ceiling
        self._limit = float(ceiling)
        self.lowest = ceiling
        self.backoffs = 0
        self._busy = 0
        self._round = 0
        self._cond = threading.Condition()

    @property
    def limit(self) -> int:
        return int(self._limit)

    @contextlib.contextmanager
    def slot(self) -> Iterator[Callable[[], None]]:
        """Hold one of the places; the callable it yields reports a refusal (429, 5xx)."""
        with self._cond:
            while self._busy >= int(self._limit):
                self._cond.wait()
            self._busy += 1
            started = self._round
        refused = False

        def refuse() -> None:
            nonlocal refused
            refused = True
            with self._cond:
                if started == self._round:
                    self._round += 1
                    self._limit = max(1.0, self._limit / 2)
                    self.lowest = min(self.lowest, int(self._limit))
                    self.backoffs += 1

        try:
            yield refuse
        finally:
            with self._cond:
                self._busy -= 1
                if not refused:
                    self._limit = min(float(self.ceiling), self._limit + 1)
                # As many waiters as there are free places, not all of them: after a
                # halving, dozens wait, and each woken in vain costs a handoff of the GIL.
                if (free := int(self._limit) - self._busy) > 0:
                    self._cond.notify(free)



class SmallFiles:
    """The small-file engine of one sync: one libcurl multi for every file, the gate on how
    many are out at once, and the shortcuts learnt."""

    def __init__(self, route: Route, *, ceiling: int, on_bytes: OnBytes) -> None:
        self._route, self._on_bytes = route, on_bytes
        self.gate = SmallGate(ceiling)  # small files at once, at most
        timeout = route.timeout
        self._curl = Curl(connect_timeout=min(CONNECT_TIMEOUT, timeout), read_timeout=timeout,
                          user_agent=f"wlock/{__version__}")
        # (kind, repo, commit) -> the URL prefix its small git files are served under (None:
        # it failed once, not tried again).
        self._shortcuts: dict[tuple[str, str, str], str | None] = {}

    def close(self) -> None:
        self._curl.close()

    def abort(self) -> None:
        self._curl.abort()  # small files' transfers stop within a second, silent or not

    def fetch(self, job: FetchJob) -> tuple[str, int]:
        """GET through the redirects (no HEAD first: one round trip less per file), hashing
        the body as it arrives. The token is sent only while on the endpoint's origin."""
        resolve_url = self._route.job_url(job)
        shortcut = self._shortcut(job)
        url = shortcut or resolve_url
        body = _SmallBody(job, self._on_bytes)
        # The file's deadline besides the silence timeout: a trickle, or interim answers
        # without end, keep bytes coming and would never trip it (issue 38).
        deadline = time.monotonic() + self._route.timeout + job.size / MIN_RATE
        try:
            for _ in range(MAX_REDIRECTS):
                held = time.monotonic()
                self._route.before(url, job)
                # A wait on the Hub's rate limit is not the server being slow: it does not
                # count against the file's deadline.
                deadline += time.monotonic() - held
                response = self._curl.get(url, self._route.headers_for(url), body.open, deadline)
                if url == shortcut and 400 <= response.status_code < 500 \
                        and response.status_code != 429:
                    # Not served there (any more): back to /resolve, for good. A transient
                    # error (5xx, 429) is retried like any other.
                    self._shortcuts[_repo_key(job)] = None
                    url, shortcut = resolve_url, None
                    continue
                target = self._route.next_hop(url, response, job)
                if url == resolve_url and target is not None:
                    self._learn(job, target)
                if target is None:
                    break
                url = target
            else:
                raise HubError(f"{job.label}: too many redirects from {self._route.endpoint}",
                               repo=job.repo_id)
        except WireError as e:  # a body cut short, a stall, a trickle
            self._on_bytes(job, -body.written)
            raise self._failure(job, url, e, body.written, job.size) from e
        finally:
            body.close()
        if body.digest is None:  # a 2xx that never opened (cannot happen): not the file
            raise transport_failure(self._route.endpoint, url, job, WireError(
                "cut", "no body"), self._route.timeout)
        if job.hash_kind == "git-sha1" and body.written != job.size:
            return hash_file(job.temp, "git-sha1"), body.written
        return body.digest.hexdigest(), body.written

    def get_range(self, job: FetchJob, url: str, start: int, end: int, sink: Sink) -> None:
        """GET bytes [start, end) of `job` from `url` (resolved), through the endpoint's
        redirects, into `sink` (which checks the answer's range). Raises as fetch() does;
        the caller takes back the bytes reported."""
        deadline = time.monotonic() + self._route.timeout + (end - start) / MIN_RATE
        try:
            for _ in range(MAX_REDIRECTS):
                held = time.monotonic()
                self._route.before(url, job)
                deadline += time.monotonic() - held
                headers = {**self._route.headers_for(url), "Range": f"bytes={start}-{end - 1}"}
                response = self._curl.get(url, headers, sink, deadline)
                target = self._route.next_hop(url, response, job)
                if target is None:
                    return
                url = target
        except WireError as e:
            raise self._failure(job, url, e, None, end - start) from e
        raise HubError(f"{job.label}: too many redirects from {self._route.endpoint}",
                       repo=job.repo_id)

    def _failure(self, job: FetchJob, url: str, e: WireError, written: int | None,
                 size: int) -> BaseException:
        """What a transfer that ended without its whole answer raises."""
        if e.kind == "stopped":
            return Aborted()
        if e.kind == "slow":
            got = "" if written is None else f"{written} of "
            allowed = self._route.timeout + size / MIN_RATE
            e = WireError("slow", f"{got}{size} bytes in {allowed:.0f}s, slower than "
                          f"{MIN_RATE // 1000} kB/s")
        return transport_failure(self._route.endpoint, url, job, e, self._route.timeout)

    def _learn(self, job: FetchJob, target: str) -> None:
        """Remember where the endpoint sends this repo's small files at this commit.

        The Hub answers `/resolve/<commit>/<path>` for a file kept in git (not LFS) with a
        redirect on its own origin, to a URL that ends in `/<commit>/<path>`
        (`/api/resolve-cache/models/<repo>/<commit>/<path>?...`). The other files of the
        commit then go there directly: one round trip per file instead of two. Only a
        same-origin redirect of exactly that shape is learned; the bytes are verified
        against the lock either way.
        """
        if job.hash_kind != "git-sha1" or not self._route.own(target):
            return
        path = urlsplit(target).path
        tail = f"/{job.revision}/{quote(job.path)}"
        if path.endswith(tail):
            base = urlsplit(self._route.endpoint)
            self._shortcuts.setdefault(
                _repo_key(job), f"{base.scheme}://{base.netloc}{path[:-len(quote(job.path))]}")

    def _shortcut(self, job: FetchJob) -> str | None:
        prefix = self._shortcuts.get(_repo_key(job)) if job.hash_kind == "git-sha1" else None
        return prefix + quote(job.path) if prefix else None



class _SmallBody:
    """Where a small file's answer goes: the temp file and its hash, opened when a 2xx
    answer's head is in (a redirect's or an error's body goes nowhere: curl.Answer.body)."""

    def __init__(self, job: FetchJob, on_bytes: Callable[[FetchJob, int], None]) -> None:
        self.job, self.on_bytes = job, on_bytes
        self.fd: int | None = None
        self.digest: Any = None
        self.written = 0

    def open(self, status: int, headers: Headers) -> Callable[[bytes], None] | None:
        if not 200 <= status < 300:
            return None
        self.close()
        # os.open, not open(): a file object adds an fstat, an isatty ioctl and an lseek,
        # each a handoff of the GIL among dozens of threads.
        self.fd = os.open(self.job.temp, NEW_FILE, 0o666)
        self.digest = new_digest(self.job.hash_kind, self.job.size)
        self.on_bytes(self.job, -self.written)
        self.written = 0
        return self.write

    def write(self, chunk: bytes) -> None:
        assert self.fd is not None
        write_all(self.fd, chunk)
        self.digest.update(chunk)
        self.written += len(chunk)
        self.on_bytes(self.job, len(chunk))

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


NEW_FILE = (os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
            | getattr(os, "O_BINARY", 0))  # Windows would otherwise translate newlines


def write_all(fd: int, data: bytes) -> None:
    """os.write until all of `data` is written (a write to a file may be short)."""
    while (n := os.write(fd, data)) < len(data):
        data = data[n:]


def _repo_key(job: FetchJob) -> tuple[str, str, str]:
    return (job.kind, job.repo_id, job.revision)

