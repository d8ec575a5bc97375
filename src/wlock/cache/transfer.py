"""Bytes from the Hub to a verified temp file.

Large files go through hf_transfer (parallel range requests, in Rust) in worker processes
(wlock.cache.transfer_worker): hf_transfer holds the GIL for a whole download, so threads would run
them one at a time.
Small files stream over keep-alive HTTP connections (a client per thread), hashed as they
arrive.
Nothing here writes into the cache's visible names: the caller publishes a verified file.

The redirect is resolved here first: the token goes only to the endpoint's origin, never to
the CDN a large file is served from.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import queue
import re
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urljoin, urlsplit

from wlock.cache.curl import MAX_SIDE_BODY, Answer, Curl, Headers, WireError, origin_of
from wlock.cache.link_record import Verdict
from wlock.cache.transfer_worker import CHUNK
from wlock.cache.xet_engine import HF_TRANSFER, HF_XET, XetEngine, XetFailure, XetUnavailable
from wlock.errors import (
    HubError,
    HubUnreachableError,
    LocalError,
    RevisionNotFoundError,
    redact,
)
from wlock.hashing import GrowingHash, hash_file, new_digest
from wlock.hubstatus import hub_error, is_transient, retry_delay
from wlock.machine import available_memory, usable_cores
from wlock.models import RepoKind
from wlock.ratelimit import RateBudget
from wlock.version import __version__
from wlock.xet.cas import XetFile, xet_file

if TYPE_CHECKING:
    import httpx2

    Reply = httpx2.Response | Answer  # a HEAD's answer (httpx2) or a small file's (libcurl)

LARGE_FILE = 8 * 1024 * 1024
# A small file's deadline besides the silence timeout: --timeout, plus its size at this rate.
# A server that trickles a byte a second never trips the silence timeout, and kept a file
# going forever (issue 38); 100 kB/s is far below any link a sync of weights is worth on.
MIN_RATE = 100_000
# The connections shared by the large files in flight where more do not help (loopback, a
# link that is full): 4 files at once took 3.2 s with 8 connections each and 1.6 s with 2.
BASE_CONNECTIONS = 8
# Four streams at least this many times one (their bodies' rate, first byte to last): single
# streams are capped. Measured: 3.0-4.0 on a link shaped per response, 0.4-1.4 on loopback.
GAIN = 2.0
# At least this, the gain is the link's, not a busy machine's (see capped()).
DECISIVE = 3.0
# A probe range. Its body is what is timed: 26 ms at 20 MB/s a stream, where half of a probe's
# time was two bodies of 1 MiB (148 ms in all, 88 ms with 512 KiB; 256 KiB took 69 ms but
# judged a capped link capped 5 times in 10 with three busy loops on the 2 cores, 512 KiB 10
# in 10, as 1 MiB did).
PROBE = 512 * 1024
# A round trip at least this long is hidden: the probe's second round is sent while the first
# body still arrives (Transfer._one_then_four). Shorter ones save nothing worth the overlap:
# at 2 ms, loopback under load (three busy loops on the 2 cores: round trips of a few ms)
# was judged capped 5 times in 15, the four's requests going out while the one was read; at
# 10 ms, 3 in 125, about what one stream's reader descheduled mid-body does to the rounds
# run one after the other (0 in 65).
HIDDEN_TRIP = 0.010
# The probe reads 2.5-3 MiB that the download reads again: done only for a sync whose large
# files make that about 1% (WLOCK_PROBE_FROM, in bytes, moves the line; tests lower it).
PROBE_FROM = int(os.environ.get("WLOCK_PROBE_FROM", 256 * 1024 * 1024))
# Small files at once, at most, for each round trip a file costs, whatever --jobs says: each
# is a request or two of Hub latency (tens of ms on the real Hub), so concurrency, not
# bandwidth, bounds them (small_ceiling says why this many; SmallGate lowers it when the Hub
# answers 429).
SMALL_CEILING = 64
MAX_REDIRECTS = 10
MAX_ATTEMPTS = 5
# A transfer whose bytes stop for `timeout` seconds is cancelled and retried once: a server
# that stalls twice on the same file will not heal within a sync. So a sync against a stalled
# server ends within about 2 x timeout.
STALL_ATTEMPTS = 2
DEFAULT_TIMEOUT = 30.0
CONNECT_TIMEOUT = 10.0


# The connections a core keeps busy where more stopped helping: on 2 cores, 4 x 512 MiB at
# 20 MB/s a response took 4.09 s with 64, 3.94 s with 96 and 3.96 s with 128 (flat), 5.70 s
# with 32 (bench/shaped_link.py).
PER_CORE = 32
# hf_transfer holds about three of its ranges (transfer_worker.CHUNK, 4 MiB) per connection.
BYTES_PER_CONNECTION = 3 * 4 * 1024 * 1024
MAX_CONNECTIONS = 256  # --connections' own limit


def connection_ceiling() -> int:
    """The most connections the large files in flight may share where the link rewards
    them: what this machine's CPUs keep busy (PER_CORE each, the cores this process may run
    on), and what a quarter of its available memory holds (BYTES_PER_CONNECTION each), up to
    MAX_CONNECTIONS; never under BASE_CONNECTIONS. The server's 429s lower it further
    (Transfer.tune backs off)."""
    ceiling = min(MAX_CONNECTIONS, PER_CORE * usable_cores())
    available = available_memory()
    if available is not None:
        ceiling = min(ceiling, available // 4 // BYTES_PER_CONNECTION)
    return max(BASE_CONNECTIONS, ceiling)


def small_ceiling(round_trips: float = 1.0) -> int:
    """How many small files may be in flight when each costs `round_trips` round trips on
    average: SMALL_CEILING for each.

    By Little's law, the files in flight are the rate times the time each takes: the rate
    this machine sustains is the same whatever a file's round trips (its CPU is the limit),
    so a file that takes two (an LFS file: the endpoint's redirect, then the CDN) needs
    twice as many in flight as one kept in git, which takes one once its redirect is
    learned (Transfer._learn). Measured (bench/small_files.py, 2 cores, 50 ms a request,
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


@dataclass(frozen=True, slots=True)
class FetchJob:
    """One blob to fetch: where it is on the Hub, what it must hash to, where to write it."""

    kind: RepoKind
    repo_id: str
    revision: str
    path: str
    size: int
    etag: str
    hash_kind: str  # "sha256" | "git-sha1"
    temp: str | Path
    xet: str | None = None  # its Xet hash, where the lock records one

    @property
    def label(self) -> str:
        return f"{self.repo_id}/{self.path}"


class IntegrityError(Exception):
    """The bytes that arrived are not the bytes the lock names."""

    def __init__(self, job: FetchJob, actual_size: int, actual_hash: str) -> None:
        super().__init__(f"{job.label}: got {actual_size} bytes hashing to {actual_hash}")
        self.job, self.actual_size, self.actual_hash = job, actual_size, actual_hash


@dataclass(frozen=True, slots=True)
class LinkTuning:
    """What the probe measured and chose (reported by `sync -v` and `--json`)."""

    one_stream: float  # bytes/s
    four_streams: float
    per_file: int  # connections each large file gets
    files: int  # large files in flight
    limit: str  # what limits the transfer, in words
    # Seconds since another sync of this cache measured it (wlock.cache.link_record); None:
    # this sync probed.
    measured_ago: float | None = None
    capped: bool = False  # single streams are capped: more connections help


def capped(one: float, four: float, again: Callable[[], float]) -> tuple[float, bool]:
    """Whether single streams are capped, from one stream's rate and four's: (the single
    stream's rate used, four give at least GAIN times it).

    A single stream slowed by a busy machine would look capped (seen under CI's load: 156
    MB/s on loopback against four streams' 342), so a gain short of DECISIVE is judged
    again against the better of two single streams, measured by `again()` (a round trip
    more: 0.2 s on a link of 100 ms). Another single stream can only lower the gain, so a
    gain under GAIN needs no second look; and four streams bringing DECISIVE times one is
    what a capped link shows (3.0-4.0 measured), not what a load does to one stream."""
    if one and four / one >= DECISIVE:
        return one, True
    if not one or four / one >= GAIN:
        one = max(one, again())
    return one, bool(one) and four / one >= GAIN


def _rate(bodies: list[list[tuple[float, int]]]) -> float:
    """The bytes per second of bodies read at once, from the first byte of any to the last
    byte of all (each body: its arrivals as (time, bytes so far))."""
    arrived = [body for body in bodies if body]
    if not arrived:
        return 0.0
    began = min(body[0][0] for body in arrived)
    ended = max(body[-1][0] for body in arrived)
    return sum(body[-1][1] for body in arrived) / max(ended - began, 1e-6)


def alone_rate(body: list[tuple[float, int]], others: list[list[tuple[float, int]]],
               size: int) -> float:
    """The rate of `body` (arrivals as (time, bytes so far), `size` bytes in all) while it
    was alone: up to the first byte of any of `others`. 0 where that leaves under half of
    it: not measured (capped() then measures a single stream again)."""
    began = min((other[0][0] for other in others if other), default=math.inf)
    alone = [(t, n) for t, n in body if t < began]
    return _rate([alone]) if alone and alone[-1][1] >= size // 2 else 0.0


def _probe_refused(status: int) -> OSError:
    return OSError(f"HTTP {status}")


class Aborted(Exception):
    """The transfer was stopped by Transfer.abort()."""


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


class Streams:
    """Connections per large file, revisited each time one starts (issue 39).

    hf_transfer takes a file's connection count when the file starts, so a sync follows the
    link file by file: the level (the probe's choice, or today's default) is what a file
    gets, and one file at a time tries twice as many (`explore`). When it ends, its rate
    (its bytes over its time in hf_transfer) is set against the level's: GROW times it or
    more, streams still help and the level moves up; less, the level stays and nothing
    above it is tried for PAUSE files (then again: links change). A 429 or 5xx on a large
    file halves the level and forgets what was learnt above it. Never past the ceiling
    shared by the files in flight (`ceiling // files`), nor past one connection per range of
    the file (more would wait), nor, with --connections, anything but the user's share.
    hf_xet grows its streams within files, by the same measure (throughput growing with
    them); aria2 and rclone keep a fixed count per file.
    """

    GROW = 1.3
    PAUSE = 4

    def __init__(self, level: int, ceiling: int, fixed: bool) -> None:
        self.level, self.ceiling, self.fixed = level, ceiling, fixed
        self.rates: dict[int, float] = {}  # connections -> the latest file's bytes/s
        self.exploring = 0  # a file trying more is in flight
        self.paused = 0  # files to go before trying more again
        self._lock = threading.Lock()

    def set_level(self, level: int) -> None:
        with self._lock:
            self.level = max(1, level)

    def choose(self, size: int, files: int, chunk: int) -> tuple[int, bool]:
        """The connections for a file of `size` bytes starting now, `files` large files in
        flight with it, and whether it explores (tries more than the level)."""
        with self._lock:
            useful = max(1, -(-size // chunk))
            cap = max(1, min(self.ceiling // max(1, files), useful))
            level = min(self.level, cap)
            up = min(cap, self.level * 2)
            explore = (not self.fixed and not self.exploring and not self.paused
                       and up > level and self.level in self.rates and up not in self.rates)
            if explore:
                self.exploring += 1
                level = up
            return level, explore

    def finished(self, connections: int, size: int, seconds: float, *,
                 explored: bool) -> None:
        with self._lock:
            if explored:
                self.exploring -= 1
            if self.fixed or seconds <= 0:
                return
            self.rates[connections] = size / seconds
            self.paused = max(0, self.paused - 1)
            if connections > self.level and self.level in self.rates:
                if self.rates[connections] >= self.GROW * self.rates[self.level]:
                    self.level = connections  # streams still help: go on from there
                else:
                    self.paused = self.PAUSE  # a plateau: stay, look again later
                    for above in [c for c in self.rates if c > self.level]:
                        del self.rates[above]

    def refused(self) -> None:
        """The server answered a large file's request with 429 or 5xx: it asks for less."""
        with self._lock:
            if self.fixed:
                return
            self.level = max(1, self.level // 2)
            for above in [c for c in self.rates if c > self.level]:
                del self.rates[above]
            self.paused = self.PAUSE


class TLSContext:
    """The TLS context every connection of a sync shares, made when the first one needs it.

    One for all: each httpx2 client would otherwise load the CA bundle again (measured: 32
    threads spent 0.4 s of CPU there on every sync, and a megabyte or two of memory each).
    On first use: loading it takes 30-50 ms of a sync's start, which an endpoint on http (a
    mirror on the LAN, `wlock serve`) never needs."""

    def __init__(self) -> None:
        self._context: ssl.SSLContext | None = None
        self._lock = threading.Lock()

    def get(self) -> ssl.SSLContext:
        with self._lock:
            if self._context is None:
                import httpx2

                self._context = httpx2.create_ssl_context()
            return self._context


class Transfer:
    """One endpoint, one token, one HTTP pool, and (when needed) a pool of worker processes."""

    def __init__(
        self, endpoint: str, token: str | None, *, jobs: int, connections: int = 8,
        fixed: bool = False, timeout: float = DEFAULT_TIMEOUT, small: int | None = None,
        on_bytes: Callable[[FetchJob, int], None] | None = None,
        wait: Callable[[float], object] | None = None, engine: str = "auto",
        budget: RateBudget | None = None,
    ) -> None:
        """`wait(seconds)` sleeps between attempts (default: a sleep that abort() cuts
        short); tests pass their own to see what was waited. `engine` (--engine): what
        fetches large files: "hf_transfer" always, "xet" (hf_xet) every one stored on Xet,
        "auto" hf_transfer unless the bridge refuses a file on Xet (its size limit)."""
        self.endpoint = endpoint.rstrip("/")
        self._engine = engine
        self._xet = XetEngine(timeout=timeout, jobs=jobs, token=token, endpoint=endpoint)
        # Each large file fetched: its label -> (the engine, why that one when not the
        # default), for `sync -v` and --json; and the files the bridge refused.
        self.engines: dict[str, tuple[str, str]] = {}
        self.connections_of: dict[str, int] = {}  # each hf_transfer file's connections
        self._to_xet: dict[str, str] = {}
        self._timeout = timeout
        # Set once a file gave up because the endpoint refuses connections: the other files
        # then fail at once with the same cause instead of each retrying for seconds.
        self._down: str | None = None
        self._origin = origin_of(self.endpoint)
        self._token = token
        self._jobs = jobs
        self.small_gate = SmallGate(small or small_ceiling())  # small files at once, at most
        # Measured on 2 cores, hf_transfer alone against the emulator: 4 files of 256 MiB at
        # once took 3.2 s with 8 connections each and 1.6 s with 2. So the budget is shared
        # by the large files in flight; raise it (--connections) for a distant CDN.
        # `fixed`: the user's budget, shared by the large files in flight; else today's
        # BASE_CONNECTIONS until tune() finds the link rewards more, up to `connections`.
        per_file = max(1, (connections if fixed else min(connections, BASE_CONNECTIONS)) // jobs)
        self._ceiling = connections
        # The connections each large file gets, revisited as files finish (Streams).
        self.streams = Streams(per_file, connections, fixed)
        self._large_in_flight = 0
        self._on_bytes = on_bytes or (lambda job, n: None)
        # One TLS context for every connection (TLSContext says why), made on first use.
        self._tls = TLSContext()
        self._local = threading.local()
        # Small files' GETs: libcurl (curl.py says why).
        self._curl = Curl(connect_timeout=min(CONNECT_TIMEOUT, timeout), read_timeout=timeout,
                          user_agent=f"wlock/{__version__}")
        # (kind, repo, commit) -> the URL prefix its small git files are served under (None:
        # it failed once, not tried again).
        self._shortcuts: dict[tuple[str, str, str], str | None] = {}
        self._clients: list[Any] = []  # httpx2.Client
        self._clients_lock = threading.Lock()
        # Made here, not on first use: several threads reach their first large file at once,
        # and a pool made twice would leave one set of workers that abort() never kills.
        # It starts no process until a large file needs one.
        self._workers = _WorkerPool(jobs)
        self._aborted = threading.Event()
        self._wait = wait or self._aborted.wait
        # The Hub's rate limits (resolvers for the files, api for Xet tokens), shared by
        # every thread: a 429 holds them all until the reset it states, and costs no
        # attempt; the waits add up against --rate-limit-wait (wlock.ratelimit).
        self.budget = budget or RateBudget(sleep=self._wait, authenticated=token is not None)

    def warm(self, large_files: int) -> None:
        """Start the worker processes `large_files` downloads will run on, in the
        background."""
        self._workers.warm(large_files)

    def close(self) -> None:
        with self._clients_lock:
            for client in self._clients:
                client.close()
            self._clients.clear()
        self._curl.close()
        self._workers.close()

    @property
    def _http(self) -> httpx2.Client:
        """This thread's HTTP client."""
        client: httpx2.Client | None = getattr(self._local, "client", None)
        if client is None:
            import httpx2

            # One client (one small connection pool) per thread: a single pool shared by
            # dozens of threads spends more time in its lock than on the wire (measured:
            # 1,000 small files took 4.7 s with one shared pool and no latency at all).
            client = httpx2.Client(
                verify=self._tls.get(),
                # The read timeout is the stall timeout: seconds without a byte, not a
                # deadline.
                timeout=httpx2.Timeout(self._timeout,
                                       connect=min(CONNECT_TIMEOUT, self._timeout)),
                # Keep-alive to the endpoint and to the CDN: a new connection per file would
                # add round trips.
                limits=httpx2.Limits(max_connections=4, max_keepalive_connections=4),
                headers={"User-Agent": f"wlock/{__version__}"},
                follow_redirects=False,
            )
            self._local.client = client
            with self._clients_lock:
                self._clients.append(client)
        return client

    def abort(self) -> None:
        """Stop every transfer in flight now (Ctrl-C): each raises Aborted promptly and
        removes its temp file; the worker processes are killed."""
        self._aborted.set()
        self._workers.kill()
        self._xet.abort()
        self._curl.abort()  # small files' transfers stop within a second, silent or not

    def __enter__(self) -> Transfer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def stopped(self) -> threading.Event:
        """Set once abort() was called: long waits outside a transfer watch it too."""
        return self._aborted

    def _check_aborted(self) -> None:
        if self._aborted.is_set():
            raise Aborted

    # -- finding the link --------------------------------------------------------------------

    def tune(self, job: FetchJob, files: int, known: Verdict | None = None) -> LinkTuning:
        """Choose the connections per large file from the link itself, before the large
        downloads start: the same megabyte ranges read by one stream, then by four at once;
        or from `known`, what another sync of the cache measured (nothing is read then).

        The rule (aria2's and rclone's per-file stream counts are fixed by the user; hf_xet
        grows concurrency while throughput grows and backs off on errors): streams are worth
        adding only while the aggregate grows with them. If four streams give at least
        GAIN times one stream's rate, a single stream is what is capped (a CDN shaping per
        connection, one TCP stream over a long path): use the ceiling (--connections),
        shared by the `files` in flight. If not, the machine or the link as a whole is the
        limit and more connections only cost CPU: keep BASE_CONNECTIONS, today's default,
        measured best on loopback (bench/sync_throughput.py). A 429 or 5xx on the probe
        halves the base (the server asks for less). The probe costs five or six ranges of
        512 KiB in two or three round trips (see capped()), the second sent while the first
        body arrives (see _one_then_four); their rate is counted from each body's first
        byte (see _probe).
        """
        import httpx2

        base = max(1, min(self._ceiling, BASE_CONNECTIONS) // max(1, files))
        if known is not None:
            one, four, more_help = known.one_stream, known.four_streams, known.capped
        else:
            try:
                url = self._resolve(job)
                one, four = self._one_then_four(url)
                one, more_help = capped(one, four, lambda: self._probe(url, 1))
            except (HubError, httpx2.HTTPError, OSError, _Retryable,
                    threading.BrokenBarrierError) as e:
                status = getattr(getattr(e, "response", None), "status_code", None)
                self.streams.set_level(max(1, base // 2))
                return LinkTuning(0.0, 0.0, self.streams.level, files,
                                  f"the probe failed ({status or type(e).__name__}): backed off")
        per_file = max(base, self._ceiling // max(1, files)) if more_help else base
        self.streams.set_level(per_file)
        limit = ("the link per stream (more connections help)" if more_help else
                 "the machine or the whole link (more connections do not help)")
        return LinkTuning(one, four, per_file, files, limit,
                          measured_ago=None if known is None else known.age, capped=more_help)

    def _probe(self, url: str, streams: int) -> float:
        """Bytes per second that `streams` ranges of PROBE bytes at once get from `url`,
        counted from the first byte of a body to the last: the time to the first byte is a
        round trip, which four requests at once overlap on any link, so it would show a
        gain where only latency differs (seen on loopback: four streams at 2.5x one, so 16
        connections a file, and 350-550 MiB of memory for a 1 GB sync where 150 is usual:
        hf_transfer holds about three ranges per connection)."""
        return _rate(self._ranges(url, [range(streams)])[0])

    def _one_then_four(self, url: str) -> tuple[float, float]:
        """One stream's rate, then four's (see _probe), the four sent a round trip before
        the one's body is due to end, so that their bodies begin as it ends: the probe
        waits a round trip less (20 ms of 90 at 20 ms a request; more from a distant Hub).
        The one is counted only up to the four's first byte: where the bodies meet early,
        it is not measured while sharing the link with them (that would make four look
        better than they are)."""
        (single,), four = self._ranges(url, [range(1), range(1, 5)])
        return alone_rate(single, four, PROBE), _rate(four)

    def _ranges(self, url: str, rounds: list[range]) -> list[list[list[tuple[float, int]]]]:
        """Rounds of ranges of `url` (PROBE bytes each, numbered), each body's arrivals as
        (monotonic time, bytes so far). A round's ranges are requested together; a round
        after the first is requested a round trip before the body of the one before it (a
        single range) is due to end, from its rate so far, and at its end if sooner.

        Every stream's thread and client are made before the first request, not while a
        body is read and timed (its reader would share the interpreter with them)."""
        from concurrent.futures import ThreadPoolExecutor

        headers = self._headers_for(url)
        streams = [(n, r) for r, numbers in enumerate(rounds) for n in numbers]
        ready = threading.Barrier(len(streams))
        # Per round: its requests go out together (a stream that starts late, its thread
        # or its client, would stretch the window and hide the gain), once the round
        # before is due to end.
        together = [threading.Barrier(len(numbers)) for numbers in rounds]
        due = [threading.Event() for _ in rounds]
        due[0].set()
        failed: list[BaseException] = []

        def get(stream: tuple[int, int]) -> list[tuple[float, int]]:
            n, r = stream
            client = self._http
            ready.wait(10)
            due[r].wait(10)
            if failed:
                raise failed[0]  # the round before failed: nothing more is asked
            together[r].wait(10)
            following = due[r + 1] if r + 1 < len(rounds) else None
            sent = time.monotonic()
            arrivals: list[tuple[float, int]] = []
            try:
                with client.stream("GET", url, headers={
                        **headers, "Range": f"bytes={n * PROBE}-{(n + 1) * PROBE - 1}"},
                        ) as response:
                    if response.status_code >= 400:
                        raise _probe_refused(response.status_code)
                    trip, got = time.monotonic() - sent, 0
                    if trip < HIDDEN_TRIP:
                        following = None  # the next round waits for this one's end
                    for chunk in response.iter_raw(64 * 1024):
                        got += len(chunk)
                        arrivals.append((time.monotonic(), got))
                        if following is not None and not following.is_set() \
                                and len(arrivals) > 1:
                            elapsed = arrivals[-1][0] - arrivals[0][0]
                            if (PROBE - got) * elapsed <= trip * got:  # left / rate <= trip
                                following.set()
            except BaseException as e:
                failed.append(e)
                raise
            finally:
                if r + 1 < len(rounds):
                    due[r + 1].set()
            return arrivals

        with ThreadPoolExecutor(len(streams)) as pool:
            bodies = list(pool.map(get, streams))
        return [[body for body, (_, r) in zip(bodies, streams, strict=True) if r == k]
                for k in range(len(rounds))]

    @property
    def http(self) -> httpx2.Client:
        """This thread's HTTP client (no redirects followed), for wlock.cache.upgrade."""
        return self._http

    def resolve_url(self, kind: RepoKind, repo_id: str, revision: str, path: str) -> str:
        prefix = "datasets/" if kind == "dataset" else ""
        return f"{self.endpoint}/{prefix}{repo_id}/resolve/{revision}/{quote(path)}"

    def xet_token_url(self, kind: RepoKind, repo_id: str, revision: str) -> str:
        """Where the endpoint hands out Xet read tokens for a revision: the Hub's route, the
        one its `xet-auth` links name (huggingface_hub's refresh_route)."""
        prefix = "datasets" if kind == "dataset" else "models"
        return f"{self.endpoint}/api/{prefix}/{repo_id}/xet-read-token/{revision}"

    def headers_for(self, url: str) -> dict[str, str]:
        """The headers of a request to `url`: the token only on the endpoint's origin."""
        return self._headers_for(url)

    def _headers_for(self, url: str) -> dict[str, str]:
        headers = {"Accept-Encoding": "identity"}
        if self._token and origin_of(url) == self._origin:
            headers["Authorization"] = f"Bearer {self._token}"
        return headers

    # -- the public operation --------------------------------------------------------------

    def fetch(self, job: FetchJob) -> None:
        """Download `job` into `job.temp` and verify size and hash.

        Retries transient failures (5xx, 429 with Retry-After, dropped connections) with
        backoff. Raises IntegrityError when the bytes are wrong (the temp file is removed),
        HubError subclasses when the Hub refuses.
        """
        stalls = 0
        attempt = 0
        while attempt < MAX_ATTEMPTS:
            attempt += 1
            self._check_aborted()
            if self._down is not None:
                raise self._down_error(job)
            try:
                if job.size >= LARGE_FILE:
                    actual_hash, actual_size = self._fetch_large_file(job, attempt)
                else:
                    with self.small_gate.slot() as refuse:
                        try:
                            actual_hash, actual_size = self._fetch_small(job)
                        except _Retryable as e:
                            if e.reason == "status":
                                refuse()
                            raise
                break
            except _Retryable as e:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(job.temp)
                if e.reason == "rate":  # the budget waits before the next request
                    attempt -= 1
                    continue
                # A trickle is tried as a stall is, and hf_xet's failures (it retried).
                stalls += e.reason in ("stall", "slow", "engine")
                if attempt == MAX_ATTEMPTS or stalls >= STALL_ATTEMPTS:
                    if e.reason == "unreachable":
                        self._down = e.final.cause
                    if e.reason == "stall":  # the error says how often it stalled
                        raise _stalled(job, self._timeout, stalls).final from None
                    raise e.final from None
                self._wait(e.delay if e.delay is not None else retry_delay(attempt, None))
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(job.temp)
                raise
        if actual_size != job.size or actual_hash != job.etag:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(job.temp)
            raise IntegrityError(job, actual_size, actual_hash)

    def _fetch_large_file(self, job: FetchJob, attempt: int) -> tuple[str, int]:
        """A large file through the engine `--engine` and the file choose."""
        url, xet = self._resolve_xet(job)
        why = self._to_xet.get(job.label)
        if why is None and self._engine == "xet":
            if xet is None:
                raise HubError(
                    f"{job.label}: {self.endpoint} serves it without Xet (no X-Xet-Hash "
                    "on its resolve answer), so --engine xet cannot fetch it",
                    repo=job.repo_id, subject=job.label,
                    hint="Sync with --engine auto (the default): files not on Xet go "
                    "through hf_transfer.")
            why = "--engine xet"
        if why is not None and xet is not None:
            return self._fetch_xet(job, xet, why)
        with self._clients_lock:
            self._large_in_flight += 1
            files = self._large_in_flight
        chosen, explored = self.streams.choose(job.size, files, CHUNK)
        # A file that failed is tried again with half the connections: on a flaky link
        # fewer ranges fail at once, and each has more tries left.
        connections = max(1, chosen >> (attempt - 1))
        started = time.monotonic()
        try:
            done = self._fetch_large(job, url, connections)
        except _Retryable as e:
            self.streams.finished(connections, 0, 0.0, explored=explored)
            if e.reason == "no-ranges":
                # Read it whole, once, in one GET (as lock's range reads do there), hashed
                # as it arrives: the small-file path, which needs no ranges.
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(job.temp)
                self.engines[job.label] = ("http", "the server ignores ranges")
                return self._fetch_small(job)
            if e.status is not None and is_transient(e.status):
                self.streams.refused()  # the server asks for less
            if e.status != 400:
                raise
            # The bridge (the plain-HTTP route to a file on Xet) refuses it: on the Hub,
            # a file over its size limit (about 400 GB). Not worth another try there.
            if xet is None or self._engine == HF_TRANSFER:
                hint = ("Sync with --engine auto or --engine xet: the file is on Xet, and "
                        "hf_xet fetches it from the CAS." if xet is not None else
                        "Retry later; the server refuses to serve the file over HTTP.")
                raise HubError(f"{job.label}: {e.final.cause or e}", repo=job.repo_id,
                               subject=job.label, hint=hint) from None
            why = f"the bridge refused it ({e.final.cause or 'HTTP 400'})"
            self._to_xet[job.label] = why
            return self._fetch_xet(job, xet, why)
        except BaseException:
            self.streams.finished(connections, 0, 0.0, explored=explored)
            raise
        finally:
            with self._clients_lock:
                self._large_in_flight -= 1
        self.streams.finished(connections, job.size, time.monotonic() - started,
                              explored=explored)
        self.engines[job.label] = (HF_TRANSFER, "")
        self.connections_of[job.label] = connections
        return done

    def _fetch_xet(self, job: FetchJob, xet: XetFile, why: str) -> tuple[str, int]:
        """`job` through hf_xet into its temp file, then hashed: hf_xet does not check the
        bytes it writes (wlock.cache.xet_engine)."""
        try:
            self._xet.fetch(self._http, xet, job.size, str(job.temp),
                            lambda n: self._on_bytes(job, n))
        except XetUnavailable as e:
            raise HubError(f"{job.label}: hf_xet cannot fetch it: {e}", repo=job.repo_id,
                           subject=job.label, hint="Check the token's access to the repo, "
                           "or sync with --engine hf_transfer where the bridge serves the "
                           "file.") from None
        except XetFailure as e:
            self._check_aborted()
            if "No space left on device" in str(e) or "os error 28" in str(e):
                raise LocalError(
                    f"{job.label}: not enough space to write {os.path.dirname(job.temp)}: No "
                    "space left on device", hint="Free some space, or point --cache-dir (or "
                    "HF_HOME) at a larger volume.", subject=job.label) from None
            failure = HubUnreachableError(
                f"{job.label}: hf_xet failed: {e}", repo=job.repo_id, subject=job.label,
                cause=f"hf_xet: the CAS answered {e.status}" if e.status else None,
                hint="Retry; check the network and the endpoint.")
            if e.status is not None and 400 <= e.status < 500 and e.status not in (408, 429):
                raise failure from None
            # hf_xet retried already: a failure without a status (a stall, a cut) is tried
            # once more, as a stall is; a 429 or 5xx like any other.
            raise _Retryable(failure, reason="status" if e.status else "engine",
                             status=e.status) from None
        self.engines[job.label] = (HF_XET, why)
        try:
            size = os.stat(job.temp).st_size
        except FileNotFoundError:  # hf_xet reported success and wrote nothing
            return "", 0
        return hash_file(job.temp, job.hash_kind), size

    def _before(self, url: str, job: FetchJob) -> None:
        """Hold a request to the endpoint while its rate budget is spent (no budget is
        kept for other hosts: the CDN states none)."""
        if origin_of(url) == self._origin:
            self.budget.before(url, job.label)

    def attested_etag(self, job: FetchJob) -> str | None:
        """The hash the endpoint attests for `job`'s file at its commit (the resolve
        answer's X-Linked-Etag: the sha256 of an LFS file, the git blob id of another), or
        None when it names none or cannot be asked. One HEAD, asked only after a download
        did not match the lock, to tell an edited lock from a bad server."""
        import httpx2

        url = self._resolve_url(job)
        try:
            self._before(url, job)
            response = self._http.request("HEAD", url, headers=self._headers_for(url))
        except (httpx2.TransportError, HubError):
            return None
        said = response.headers.get("X-Linked-Etag") or response.headers.get("ETag")
        return said.removeprefix("W/").strip('"') if said else None

    def _down_error(self, job: FetchJob) -> HubUnreachableError:
        return HubUnreachableError(f"{job.label}: not fetched: {self._down}",
                                   repo=job.repo_id, hint=_NETWORK_HINT, cause=self._down,
                                   subject=job.label)

    # -- steps ------------------------------------------------------------------------------

    def _resolve_url(self, job: FetchJob) -> str:
        return self.resolve_url(job.kind, job.repo_id, job.revision, job.path)

    def _next_hop(self, url: str, response: Reply, job: FetchJob) -> str | None:
        """Where a redirect leads, or None when `response` is the answer. Raises on errors,
        and for a redirect a client cannot follow (HubError, exit 5, naming the hop); a
        429 the rate budget will wait out is a _Retryable that costs no attempt."""
        if origin_of(url) == self._origin and self.budget.after(
                url, response.status_code, response.headers, job.label) is not None:
            _drain(response)
            # A 429 from the endpoint is always a _Retryable (_classify): the same error,
            # marked as the budget's to wait out.
            refused = _classify(response, job, self.endpoint, url, self._token is not None)
            assert isinstance(refused, _Retryable)
            raise _Retryable(refused.final, reason="rate")
        if response.status_code in (301, 302, 303, 307, 308):
            _drain(response)  # a short body: read, the connection is reused
            location = response.headers.get("Location")
            target, problem = _hop(url, location)
            if problem:
                raise HubError(
                    f"{job.label}: {origin_of(url)[1]} answered {response.status_code} "
                    f"with {problem}", repo=job.repo_id, subject=job.label,
                    hint="A redirect wlock cannot follow: the server (or a proxy before it) "
                    "is misconfigured. Retry later, or sync through another endpoint.")
            return target
        if response.status_code >= 400:
            _drain(response)
            raise _classify(response, job, self.endpoint, url, self._token is not None)
        return None

    def _resolve(self, job: FetchJob) -> str:
        """The URL the bytes come from: the endpoint's own, or the CDN it redirects to."""
        return self._resolve_xet(job)[0]

    def _resolve_xet(self, job: FetchJob) -> tuple[str, XetFile | None]:
        """The URL the bytes come from, and the file's Xet hash and token URL when the
        endpoint's answer names them (wlock.xet.cas.xet_file)."""
        import httpx2

        url = self._resolve_url(job)
        xet = None
        for _ in range(MAX_REDIRECTS):
            self._before(url, job)
            try:
                response = self._http.request("HEAD", url, headers=self._headers_for(url))
            except httpx2.TransportError as e:
                raise _transport_failure(self.endpoint, url, job, e, self._timeout) from e
            if origin_of(url) == self._origin:
                xet = xet_file(response) or xet
            target = self._next_hop(url, response, job)
            if target is None:
                return url, xet
            if origin_of(target) != self._origin:
                return target, xet  # a CDN: a signed URL, and no token
            url = target
        raise HubError(f"{job.label}: too many redirects from {self.endpoint}", repo=job.repo_id)

    def _fetch_small(self, job: FetchJob) -> tuple[str, int]:
        """GET through the redirects (no HEAD first: one round trip less per file), hashing
        the body as it arrives. The token is sent only while on the endpoint's origin."""
        resolve_url = self._resolve_url(job)
        shortcut = self._shortcut(job)
        url = shortcut or resolve_url
        body = _SmallBody(job, self._on_bytes)
        # The file's deadline besides the silence timeout: a trickle, or interim answers
        # without end, keep bytes coming and would never trip it (issue 38).
        deadline = time.monotonic() + self._timeout + job.size / MIN_RATE
        try:
            for _ in range(MAX_REDIRECTS):
                held = time.monotonic()
                self._before(url, job)
                # A wait on the Hub's rate limit is not the server being slow: it does not
                # count against the file's deadline.
                deadline += time.monotonic() - held
                response = self._curl.get(url, self._headers_for(url), body.open, deadline)
                if url == shortcut and 400 <= response.status_code < 500 \
                        and response.status_code != 429:
                    # Not served there (any more): back to /resolve, for good. A transient
                    # error (5xx, 429) is retried like any other.
                    self._shortcuts[_repo_key(job)] = None
                    url, shortcut = resolve_url, None
                    continue
                target = self._next_hop(url, response, job)
                if url == resolve_url and target is not None:
                    self._learn(job, target)
                if target is None:
                    break
                url = target
            else:
                raise HubError(f"{job.label}: too many redirects from {self.endpoint}",
                               repo=job.repo_id)
        except WireError as e:  # a body cut short, a stall, a trickle
            self._on_bytes(job, -body.written)
            if e.kind == "stopped":
                raise Aborted from None
            if e.kind == "slow":
                e = WireError("slow", f"{body.written} of {job.size} bytes in "
                              f"{self._timeout + job.size / MIN_RATE:.0f}s, slower than "
                              f"{MIN_RATE // 1000} kB/s")
            raise _transport_failure(self.endpoint, url, job, e, self._timeout) from e
        finally:
            body.close()
        if body.digest is None:  # a 2xx that never opened (cannot happen): not the file
            raise _transport_failure(self.endpoint, url, job, WireError(
                "cut", "no body"), self._timeout)
        if job.hash_kind == "git-sha1" and body.written != job.size:
            return hash_file(job.temp, "git-sha1"), body.written
        return body.digest.hexdigest(), body.written

    def _learn(self, job: FetchJob, target: str) -> None:
        """Remember where the endpoint sends this repo's small files at this commit.

        The Hub answers `/resolve/<commit>/<path>` for a file kept in git (not LFS) with a
        redirect on its own origin, to a URL that ends in `/<commit>/<path>`
        (`/api/resolve-cache/models/<repo>/<commit>/<path>?...`). The other files of the
        commit then go there directly: one round trip per file instead of two. Only a
        same-origin redirect of exactly that shape is learned; the bytes are verified
        against the lock either way.
        """
        if job.hash_kind != "git-sha1" or origin_of(target) != self._origin:
            return
        path = urlsplit(target).path
        tail = f"/{job.revision}/{quote(job.path)}"
        if path.endswith(tail):
            base = urlsplit(self.endpoint)
            self._shortcuts.setdefault(
                _repo_key(job), f"{base.scheme}://{base.netloc}{path[:-len(quote(job.path))]}")

    def _shortcut(self, job: FetchJob) -> str | None:
        prefix = self._shortcuts.get(_repo_key(job)) if job.hash_kind == "git-sha1" else None
        return prefix + quote(job.path) if prefix else None

    def _fetch_large(self, job: FetchJob, url: str, connections: int) -> tuple[str, int]:
        # The worker only downloads: this thread hashes the file as its ranges land
        # (GrowingHash), where the worker, which hf_transfer holds for the whole download,
        # could only read it all again at the end (measured: 0.13 s a 128 MiB file, on a
        # core of two, after the last byte).
        payload = {"url": url, "temp": str(job.temp), "hash_kind": None,
                   "headers": self._headers_for(url), "connections": connections}
        growing = GrowingHash(job.temp, job.hash_kind, job.size)
        done = threading.Event()
        outcome: dict[str, Any] = {}
        running: dict[str, subprocess.Popen[str]] = {}

        def run() -> None:
            try:
                outcome.update(self._workers.run(payload, running))
            except OSError as e:  # no worker process could be started: this machine's limit
                outcome.update(ok=False, spawn=e)
            finally:
                done.set()

        threading.Thread(target=run, daemon=True).start()
        last, moved = 0, time.monotonic()
        stalled = False
        try:
            while not done.wait(0.05):
                if self._aborted.is_set():
                    # abort() is killing the worker: wait until it is gone, or it could
                    # create its file after the caller removed it.
                    done.wait(10)
                    raise Aborted
                growing.advance()
                progress = self._report_progress(job, last)
                if progress != last:
                    last, moved = progress, time.monotonic()
                elif time.monotonic() - moved > self._timeout and "worker" in running:
                    # hf_transfer has no read timeout: a CDN that stops sending mid-body
                    # would hold this download forever. Kill its worker; the pool starts
                    # another.
                    stalled = True
                    running["worker"].kill()
                    done.wait(10)
                    break
            self._check_aborted()
            if "spawn" in outcome:
                raise LocalError(
                    f"{job.label}: cannot start a download worker: {outcome['spawn']}",
                    hint="This machine is at its limit of processes, open files or memory "
                    "(`ulimit -a`, `free -m`): lower --jobs or stop what holds them, then run "
                    "the command again.", subject=job.label)
            if stalled or not outcome.get("ok"):
                self._on_bytes(job, -last)
                if stalled:
                    raise _stalled(job, self._timeout)
                raise _worker_failure(job, str(outcome.get("error")))
            digest = growing.finish()
        finally:
            growing.close()
        if digest != job.etag:  # not followed, or a filesystem without holes: read it all
            digest = hash_file(job.temp, job.hash_kind)
        self._on_bytes(job, job.size - last)
        return digest, int(outcome["size"])

    def _report_progress(self, job: FetchJob, last: int) -> int:
        # hf_transfer writes ranges in parallel into a sparse file: allocated blocks, not the
        # size, tell how far it got.
        try:
            done = min(job.size, os.stat(job.temp).st_blocks * 512)
        except FileNotFoundError:
            return last
        if done > last:
            self._on_bytes(job, done - last)
            return done
        return last


# glibc's malloc, in a worker. hf_transfer allocates each 4 MiB range anew; left alone, glibc
# keeps what it frees in an arena per tokio thread, and a worker grew with the files it had
# downloaded (393 MiB for a 10 GB sync against 280 MiB for 1 GB). Mapping every range
# (MALLOC_MMAP_THRESHOLD_ 1 MiB) held that to 150 MiB, but each range then came as fresh
# zeroed pages, a fault per page: on 2 cores it made hf_transfer alone 25-35% slower (4 x 1
# GiB), and a 10 GB sync took 39-43 s. One arena, ranges from the heap (the mmap threshold
# above them), the heap trimmed beyond 16 MiB free: the same sync 31-34 s, peak 181-184 MiB
# (the process tree's PSS). A user's own settings win.
_WORKER_MALLOC = {"MALLOC_ARENA_MAX": "1", "MALLOC_MMAP_THRESHOLD_": str(32 * 1024 * 1024),
                  "MALLOC_TRIM_THRESHOLD_": str(16 * 1024 * 1024)}


class _WorkerPool:
    """Up to `size` `wlock.cache.transfer_worker` processes, each running one download at a time,
    all living as long as the pool."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._idle: queue.SimpleQueue[subprocess.Popen[str]] = queue.SimpleQueue()
        self._all: list[subprocess.Popen[str]] = []
        self._lock = threading.Lock()
        self._killed = False
        self._spawns: queue.SimpleQueue[tuple[threading.Event, list[Any]] | None] = (
            queue.SimpleQueue())
        self._spawner: threading.Thread | None = None
        self.spawned = 0  # processes started over the pool's life

    def warm(self, n: int) -> None:
        """Start up to `n` workers now, in the background, so the first large downloads do
        not each wait for an interpreter to start (measured: 0.1 s, while the link probe
        runs anyway)."""
        def start() -> None:
            for _ in range(min(n, self._size)):
                try:
                    worker = self._start_or_none()
                except OSError:
                    return  # killed, or no process to be had: a download will say why
                if worker is None:
                    return
                self._idle.put(worker)

        threading.Thread(target=start, daemon=True, name="wlock-transfer-warm").start()

    def _checkout(self) -> subprocess.Popen[str]:
        """An idle worker, a new one while under `size`, else wait for one to be free."""
        wait = 0.0
        while True:
            try:
                return self._idle.get(timeout=wait) if wait else self._idle.get_nowait()
            except queue.Empty:
                pass
            started = self._start_or_none()  # also raises once the pool was killed
            if started is not None:
                return started
            wait = 0.2

    def _start_or_none(self) -> subprocess.Popen[str] | None:
        with self._lock:
            if self._killed:
                raise OSError("the transfer was aborted or closed")
            if len(self._all) >= self._size:
                return None
            if self._spawner is None:
                self._spawner = threading.Thread(target=self._spawn_loop, daemon=True,
                                                 name="wlock-transfer-spawner")
                self._spawner.start()
            request: tuple[threading.Event, list[Any]] = (threading.Event(), [])
            self._spawns.put(request)
            request[0].wait()
            started = request[1][0]
            if isinstance(started, BaseException):
                raise started
            self._all.append(started)
            return started  # type: ignore[no-any-return]

    def _spawn_loop(self) -> None:
        """Start every worker from this one thread, which lives as long as the pool: Linux's
        PR_SET_PDEATHSIG (transfer_worker.die_with_parent) fires when the *thread* that
        started the child exits, so a worker started from a short-lived thread would be
        killed after its first download."""
        while (request := self._spawns.get()) is not None:
            done, out = request
            try:
                # Its own session: a terminal's Ctrl-C reaches only the parent, which aborts
                # and kills its workers itself (an interpreter interrupted while starting up
                # prints a fatal error). If the parent dies, the kernel kills the worker; the
                # next sync removes what it leaves.
                out.append(subprocess.Popen(
                    [sys.executable, "-m", "wlock.cache.transfer_worker"], stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE, text=True, bufsize=1, start_new_session=True,
                    env={**_WORKER_MALLOC, **os.environ,
                         "WLOCK_TRANSFER_PARENT": str(os.getpid())},
                ))
                self.spawned += 1
            except OSError as e:
                out.append(e)
            done.set()

    def run(
        self, payload: dict[str, Any], running: dict[str, subprocess.Popen[str]]
    ) -> dict[str, Any]:
        """Run one download on a worker (published in `running["worker"]` so a watchdog
        can kill it); a worker that exits is replaced by the next checkout."""
        worker = self._checkout()
        running["worker"] = worker
        assert worker.stdin is not None and worker.stdout is not None
        try:
            worker.stdin.write(json.dumps(payload) + "\n")
            worker.stdin.flush()
            line = worker.stdout.readline()
        except OSError:
            line = ""
        if not line:
            with self._lock:
                self._all.remove(worker)
            worker.kill()
            worker.wait()
            return {"ok": False, "error": f"the download worker exited ({worker.returncode})"}
        self._idle.put(worker)
        result: dict[str, Any] = json.loads(line)
        return result

    def kill(self) -> None:
        with self._lock:
            self._killed = True
            workers = list(self._all)
        for worker in workers:
            worker.kill()
        for worker in workers:
            worker.wait()
        self._spawns.put(None)

    def close(self) -> None:
        with self._lock:  # a spawn under way (warm()) finishes first and is closed too
            self._killed = True
            workers = list(self._all)
        for worker in workers:
            if worker.stdin:
                worker.stdin.close()
        for worker in workers:
            try:
                worker.wait(5)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
            if worker.stdout:
                worker.stdout.close()
        # Only now: the spawner's exit would take its workers with it (PR_SET_PDEATHSIG).
        self._spawns.put(None)


_NETWORK_HINT = "Check the network, or the endpoint (--endpoint / HF_ENDPOINT)."


class _Retryable(Exception):
    """A failure worth another attempt. `reason`: "status" (429/5xx), "stall" (no byte for
    the timeout), "slow" (a trickle past the file's deadline: retried as a stall is),
    "engine" (hf_xet failed without a status, after its own retries: once more),
    "unreachable" (the endpoint refuses or cannot be connected to), or "transient" (a
    connection cut, a worker's failure)."""

    def __init__(
        self, final: HubError, delay: float | None = None, reason: str = "transient",
        status: int | None = None,
    ) -> None:
        super().__init__(str(final))
        self.final, self.delay, self.reason, self.status = final, delay, reason, status


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
        self.fd = os.open(self.job.temp, _NEW_FILE, 0o666)
        self.digest = new_digest(self.job.hash_kind, self.job.size)
        self.on_bytes(self.job, -self.written)
        self.written = 0
        return self.write

    def write(self, chunk: bytes) -> None:
        assert self.fd is not None
        _write_all(self.fd, chunk)
        self.digest.update(chunk)
        self.written += len(chunk)
        self.on_bytes(self.job, len(chunk))

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _drain(response: Reply) -> None:
    """Read what is left of a body up to MAX_SIDE_BODY; a longer one is left unread, so the
    connection it came on is closed instead of reused."""
    if isinstance(response, Answer) or getattr(response, "is_stream_consumed", False):
        return  # libcurl's, bounded already; an httpx2 answer read whole (a HEAD: no body)
    read = 0
    for chunk in response.iter_raw(16 * 1024):
        read += len(chunk)
        if read >= MAX_SIDE_BODY:
            return


def _hop(url: str, location: str | None) -> tuple[str, str | None]:
    """Where a redirect from `url` to `location` leads, and what makes it a hop no client
    can follow (None when it is one)."""
    if not location:
        return "", "a redirect without a Location"
    shown = repr(location[:200])
    try:
        target = urljoin(url, location)
        parts = urlsplit(target)
        if parts.scheme not in ("http", "https"):
            return target, f"a redirect to a {parts.scheme or 'schemeless'} URL ({shown})"
        parts.port  # noqa: B018 - urllib raises for a port out of range or not a number
    except ValueError:
        return "", f"a redirect to a host or port that is none ({shown})"
    if not parts.hostname:
        return target, f"a redirect to no host ({shown})"
    return target, None


def _classify(response: Reply, job: FetchJob, endpoint: str, url: str,
              authenticated: bool) -> Exception:
    """The error `response` (a final or transient failure from `url`) stands for, naming
    the file and, for a host other than the endpoint (the CDN), that host."""
    status, code = response.status_code, response.headers.get("X-Error-Code")
    host = urlsplit(url).netloc
    if origin_of(url) != origin_of(endpoint):
        error: HubError = HubError(
            f"{job.label}: {host} (where {endpoint} sent the download) answered {status}",
            repo=job.repo_id, subject=job.label,
            hint="The file's storage host refused it: retry later; if it persists, the "
            "signed link may have expired or a proxy may be in the way.")
        return _Retryable(error, reason="status", status=status) if is_transient(status) \
            else error
    if code in ("RevisionNotFound", "EntryNotFound"):
        what = "commit" if code == "RevisionNotFound" else f"file {job.path!r} at commit"
        return RevisionNotFoundError(
            f"{job.kind} {job.repo_id}: {what} {job.revision[:7]} is no longer on the Hub "
            f"({status})", repo=job.repo_id,
            hint="The history was rewritten upstream: re-lock with "
            f"`wlock lock --upgrade-package {job.repo_id}`.",
        )
    error = hub_error(status, code, kind=job.kind, repo_id=job.repo_id, endpoint=endpoint,
                      attempts=MAX_ATTEMPTS, about=job.path, authenticated=authenticated)
    error.subject = job.label
    if is_transient(status):
        retry_after = response.headers.get("Retry-After")
        return _Retryable(error, delay=retry_delay(1, retry_after) if retry_after else None,
                          reason="status")
    return error


_NEW_FILE = (os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
             | getattr(os, "O_BINARY", 0))  # Windows would otherwise translate newlines


def _write_all(fd: int, data: bytes) -> None:
    """os.write until all of `data` is written (a write to a file may be short)."""
    while (n := os.write(fd, data)) < len(data):
        data = data[n:]


def _repo_key(job: FetchJob) -> tuple[str, str, str]:
    return (job.kind, job.repo_id, job.revision)


def _transport_failure(
    endpoint: str, url: str, job: FetchJob, e: Exception, timeout: float
) -> _Retryable:
    """What a failed request of `url` means. It names the host that failed (the endpoint,
    the CDN, a redirect's target), and only the endpoint's own refusals mark it down (the
    other files then fail at once): a CDN or mirror that is down says nothing of the Hub."""
    import httpx2

    own = origin_of(url) == origin_of(endpoint)
    where = endpoint if own else f"{origin_of(url)[1]} (a redirect from {endpoint})"

    if isinstance(e, httpx2.ReadTimeout | httpx2.WriteTimeout) or (
            isinstance(e, WireError) and e.kind == "timeout"):
        return _stalled(job, timeout)
    if isinstance(e, WireError) and e.kind == "slow":
        cause = f"a trickle: {e}"
        return _Retryable(HubUnreachableError(
            f"{job.label}: {cause}", repo=job.repo_id, cause=cause, subject=job.label,
            hint="The server sends too slowly to finish. Retry later; on a link this slow, "
            "raise --timeout (each small file gets --timeout plus its size at 100 kB/s)."),
            reason="slow")
    if isinstance(e, httpx2.ConnectError | httpx2.ConnectTimeout) or (
            isinstance(e, WireError) and e.kind == "connect"):
        cause = f"cannot connect to {where}: {redact(str(e)) or type(e).__name__}"
        return _Retryable(HubUnreachableError(
            f"{job.label}: {cause}", repo=job.repo_id, hint=_NETWORK_HINT, cause=cause,
            subject=job.label), reason="unreachable" if own else "transient")
    return _Retryable(HubUnreachableError(
        f"{job.label}: the connection to {where} failed: "
        f"{redact(str(e)) or type(e).__name__}", repo=job.repo_id, hint=_NETWORK_HINT,
        subject=job.label))


def _stalled(job: FetchJob, timeout: float, times: int = 1) -> _Retryable:
    cause = f"no data for {timeout:g}s (stalled)" + (
        "" if times == 1 else ", twice" if times == 2 else f", {times} times")
    return _Retryable(HubUnreachableError(
        f"{job.label}: {cause}", repo=job.repo_id,
        hint="The server stopped sending. Retry later; on a slow link raise --timeout.",
        cause=cause, subject=job.label), reason="stall")


_STATUS = re.compile(r"\b([45]\d\d)\b")


def _worker_failure(job: FetchJob, detail: str) -> Exception:
    """What an hf_transfer failure means, from its message (it raises plain Exceptions):
    a full disk is this machine's problem (exit 6, not worth a retry); an HTTP status or a
    cut connection is worth another attempt. URLs lose their query strings (signed)."""
    detail = redact(detail)
    if "No space left on device" in detail or "os error 28" in detail:
        return LocalError(
            f"{job.label}: not enough space to write {os.path.dirname(job.temp)}: No space "
            "left on device", hint="Free some space, or point --cache-dir (or HF_HOME) at a larger "
            "volume.", subject=job.label)
    if "No content length" in detail:
        # hf_transfer's first request (bytes=0-0) got no Content-Range back: a server or a
        # proxy that ignores Range. Not worth another attempt with ranges.
        return _Retryable(HubUnreachableError(
            f"{job.label}: the download server ignores HTTP ranges", repo=job.repo_id,
            subject=job.label), reason="no-ranges")
    status = _STATUS.search(detail)
    cause = (f"the download server answered {status.group(1)}" if status
             else f"the download failed: {detail}")
    return _Retryable(HubUnreachableError(
        f"{job.label}: {cause}", repo=job.repo_id,
        hint="Retry; check the network and the endpoint.", cause=cause if status else None,
        subject=job.label), reason="status" if status else "transient",
        status=int(status.group(1)) if status else None)
