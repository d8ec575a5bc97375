"""The link's verdict: how many connections each large file gets.

The probe reads the same ranges of a file by one stream, then by four at once, and judges
whether single streams are capped (capped()); Streams then follows the link file by file
(each file's own rate against the level's). The ceilings are the machine's (connection
ceiling: its cores and memory). link_record keeps a verdict for the other syncs of a cache.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from wlock.cache.engines import FetchJob, Retryable, link_record
from wlock.cache.engines.blocks import IN_FLIGHT
from wlock.cache.engines.link_record import Verdict
from wlock.cache.engines.route import Route
from wlock.errors import HubError
from wlock.machine import available_memory, usable_cores

# The connections shared by the large files in flight where more do not help (loopback, a
# link that is full): 4 files at once took 3.2 s with 8 connections each and 1.6 s with 2.
BASE_CONNECTIONS = 8
# Four streams at least this many times one (their bodies' rate, first byte to last): single
# streams are capped. Measured: 3.0-4.0 on a link shaped per response, 0.4-1.4 on loopback.
GAIN = 2.0
# A probe range. Its body is what is timed: 26 ms at 20 MB/s a stream, where half of a probe's
# time was two bodies of 1 MiB (148 ms in all, 88 ms with 512 KiB; 256 KiB took 69 ms but
# judged a capped link capped 5 times in 10 with three busy loops on the 2 cores, 512 KiB 10
# in 10, as 1 MiB did).
PROBE = 512 * 1024
# A probe body may be in a shaper's free burst (a token bucket per response or connection:
# nginx's limit_rate_after, tc's htb and tbf, a CDN's): where its first PROBE bytes came
# faster than FAST (bytes/s), or their second half at under KNEE times the first's rate (the
# burst ran out), it is read on: to PROBE bytes past its knee (_knee: where it slowed to under
# KNEE times its first PROBE's rate and under FAST, over its last WINDOW), counted from there;
# without a knee by PROBE_SPAN (a fast link, no burst), its second half is counted. Measured
# before (bench/shaped_link.py): 512 KiB ranges inside a 1 MiB burst took one
# stream for 123 MB/s and four for 200, so "not capped": 0.39-0.48x the best fixed setting;
# under the kernel's htb (20 MB/s a connection, a burst of 256 KiB) one stream read 48 MB/s.
# A steady body stops at PROBE as before; on a fast link the longer read costs milliseconds
# (3 MiB at 1 GB/s: 3 ms). Not 4 MiB: the first of hf_transfer's ranges would be the same.
# To the knee, not to PROBE_SPAN: the 1 MiB burst's probe took 105-184 ms, about 250 reading
# each body to 3 MiB.
FAST = 50e6
KNEE = 0.6
WINDOW = 256 * 1024
PROBE_SPAN = 3 * 1024 * 1024
# A round trip at least this long is hidden: the probe's second round is sent while the first
# body still arrives (Link._one_then_four). Shorter ones save nothing worth the overlap:
# at 2 ms, loopback under load (three busy loops on the 2 cores: round trips of a few ms)
# was judged capped 5 times in 15, the four's requests going out while the one was read; at
# 10 ms, 3 in 125, about what one stream's reader descheduled mid-body does to the rounds
# run one after the other (0 in 65).
HIDDEN_TRIP = 0.010
# The probe reads 2.5-3 MiB (up to 15 MiB past a burst) that the download reads again: done
# only for a sync whose large files make that about 1-5% (WLOCK_PROBE_FROM, in bytes, moves
# the line; tests lower it).
PROBE_FROM = int(os.environ.get("WLOCK_PROBE_FROM", 256 * 1024 * 1024))


# The connections a core keeps busy where more stopped helping: on 2 cores, 4 x 512 MiB at
# 20 MB/s a response took 4.09 s with 64, 3.94 s with 96 and 3.96 s with 128 (flat), 5.70 s
# with 32 (bench/shaped_link.py).
PER_CORE = 32
# hf_transfer holds about three of its ranges (hf_transfer_worker.CHUNK, 4 MiB) per connection.
BYTES_PER_CONNECTION = 3 * 4 * 1024 * 1024
MAX_CONNECTIONS = 256  # --connections' own limit


def connection_ceiling() -> int:
    """The most connections the large files in flight may share where the link rewards
    them: what this machine's CPUs keep busy (PER_CORE each, the cores this process may run
    on), and what a quarter of its available memory holds (BYTES_PER_CONNECTION each), up to
    MAX_CONNECTIONS; never under BASE_CONNECTIONS. The server's 429s lower it further
    (Link.tune backs off)."""
    ceiling = min(MAX_CONNECTIONS, PER_CORE * usable_cores())
    available = available_memory()
    if available is not None:
        ceiling = min(ceiling, available // 4 // BYTES_PER_CONNECTION)
    return max(BASE_CONNECTIONS, ceiling)



@dataclass(frozen=True, slots=True)
class LinkTuning:
    """What the probe measured and chose (reported by `sync -v` and `--json`)."""

    one_stream: float  # bytes/s
    four_streams: float
    per_file: int  # connections each large file gets
    files: int  # large files in flight
    limit: str  # what limits the transfer, in words
    # Seconds since another sync of this cache measured it (link_record); None:
    # this sync probed.
    measured_ago: float | None = None
    capped: bool = False  # single streams are capped: more connections help


def capped(one: float, four: float, again: Callable[[], float]) -> tuple[float, bool]:
    """Whether single streams are capped, from one stream's rate and four's: (the single
    stream's rate used, four give at least GAIN times it).

    A single stream slowed by a busy machine looks capped (seen under CI's load: 156 MB/s
    on loopback against four streams' 342; and one stream descheduled to 2.6 MB/s against
    four's 15 on a link capped as a whole, a gain of 5.7), so every gain of GAIN or more is
    judged again against the better of two single streams, measured by `again()` (a round
    trip more: 0.2 s on a link of 100 ms): a level is decisive only when confirmed (issue
    59). Another single stream can only lower the gain, so a gain under GAIN needs none."""
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


def bursting(body: list[tuple[float, int]]) -> bool:
    """Whether a body's first bytes (arrivals as (time, bytes so far)) may be a shaper's
    free burst: faster than FAST, or slowing down (the second half at under KNEE times the
    first half's rate)."""
    if _rate([body]) >= FAST:
        return True
    middle = next(i for i, (_, n) in enumerate(body) if n >= body[-1][1] // 2)
    early, late = body[:middle + 1], body[middle:]
    if len(early) < 2 or len(late) < 2:
        return False
    late_rate = (late[-1][1] - late[0][1]) / max(late[-1][0] - late[0][0], 1e-6)
    early_rate = (early[-1][1] - early[0][1]) / max(early[-1][0] - early[0][0], 1e-6)
    return late_rate < KNEE * early_rate


def _knee(body: list[tuple[float, int]], early: float) -> int | None:
    """Where a body read on slowed down: the bytes at the start of its last WINDOW, when
    that whole window came at under KNEE times `early` (its first PROBE's rate) and under
    FAST; None before that."""
    last = body[-1][1]
    if last < PROBE + WINDOW:
        return None
    start = next(i for i, (_, n) in enumerate(body) if n >= last - WINDOW)
    if start == 0 or start == len(body) - 1:
        return None
    # From the arrival before the window: its first chunk's own time counts too.
    (t0, n0), (t1, n1) = body[start - 1], body[-1]
    rate = (n1 - n0) / max(t1 - t0, 1e-6)
    if rate >= KNEE * early or rate >= FAST:
        return None
    # The knee itself: the end of the last piece that still came fast (the window may
    # begin inside the burst and hold one slow piece).
    for i in range(len(body) - 1, 0, -1):
        (ta, na), (tb, nb) = body[i - 1], body[i]
        if (nb - na) / max(tb - ta, 1e-6) >= FAST:
            return nb
    return n0


def settled(body: list[tuple[float, int]], knee: int | None = None
            ) -> list[tuple[float, int]]:
    """The part of a probe body (arrivals as (time, bytes so far)) that is counted: all of
    it up to PROBE; of a body read on past PROBE, from its `knee` where one was found (the
    burst ran out there), else its second half; from the first arrival there, its bytes
    counted from it."""
    if not body or body[-1][1] <= PROBE:
        return body
    start = next(i for i, (_, n) in enumerate(body)
                 if n >= (knee if knee is not None else body[-1][1] // 2))
    base = body[start][1]
    return [(t, n - base) for t, n in body[start:]]


def _probe_refused(status: int) -> OSError:
    return OSError(f"HTTP {status}")


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
    them); aria2 and rclone keep a fixed count per file. Where the probe found that more
    streams do not help, no file tries more (settle()).
    """

    GROW = 1.3
    PAUSE = 4

    def __init__(self, level: int, ceiling: int, fixed: bool) -> None:
        self.level, self.ceiling, self.fixed = level, ceiling, fixed
        self.rates: dict[int, float] = {}  # connections -> the latest file's bytes/s
        self.exploring = 0  # a file trying more is in flight
        # Off once the probe found the link as a whole the limit (settle()).
        self.explores = not fixed
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
            explore = (self.explores and not self.exploring and not self.paused
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

    def settle(self) -> None:
        """The probe, reading alone, found that more streams bring the link no more: no
        file tries more. A file's own rate cannot tell it: one trying more connections
        than the files beside it takes from them what a host's aggregate cap shares out
        (two files at 4 and 8 connections under one cap: 1.33x the rate each had at 4), and
        would be followed up to the ceiling (4, 4, 8, 4, 10, 8 seen)."""
        with self._lock:
            self.explores = False

    def refused(self) -> None:
        """The server answered a large file's request with 429 or 5xx: it asks for less."""
        with self._lock:
            if self.fixed:
                return
            self.level = max(1, self.level // 2)
            for above in [c for c in self.rates if c > self.level]:
                del self.rates[above]
            self.paused = self.PAUSE



class Link:
    """The connections each large file gets: the probe's first choice (tune), then Streams
    following the link file by file."""

    def __init__(self, route: Route, streams: Streams, ceiling: int) -> None:
        self.route, self.streams, self.ceiling = route, streams, ceiling

    def decide(self, cache_dir: Path, job: FetchJob, files: int,
               stopped: threading.Event) -> LinkTuning:
        """The link's verdict: another sync's of this cache if recent (link_record), else
        probed here, one sync at a time, and recorded for the others."""
        endpoint = self.route.endpoint
        known = link_record.recall(cache_dir, endpoint)
        if known is None:
            with link_record.probing(cache_dir, stopped):
                known = link_record.recall(cache_dir, endpoint)  # measured while this waited
                if known is None:
                    found = self.tune(job, files)
                    if found.one_stream:  # a failed probe is not worth keeping
                        link_record.remember(cache_dir, endpoint, found.one_stream,
                                             found.four_streams, found.capped)
                    return found
        return self.tune(job, files, known)

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

        base = max(1, min(self.ceiling, BASE_CONNECTIONS) // max(1, files))
        if known is not None:
            one, four, more_help = known.one_stream, known.four_streams, known.capped
        else:
            try:
                url = self.route.resolve(job)[0]
                if self.route.own(url):
                    # No CDN: the endpoint serves the files itself, in its blocks
                    # (engines.blocks says why); nothing to probe.
                    return LinkTuning(0.0, 0.0, -(-IN_FLIGHT // max(1, files)), files,
                                      "the endpoint serves the files itself (a mirror): "
                                      "in its blocks")
                one, four = self._one_then_four(url)
                one, more_help = capped(one, four, lambda: self._probe(url, 1))
            except (HubError, httpx2.HTTPError, OSError, Retryable,
                    threading.BrokenBarrierError) as e:
                status = getattr(getattr(e, "response", None), "status_code", None)
                self.streams.set_level(max(1, base // 2))
                return LinkTuning(0.0, 0.0, self.streams.level, files,
                                  f"the probe failed ({status or type(e).__name__}): backed off")
        per_file = max(base, self.ceiling // max(1, files)) if more_help else base
        self.streams.set_level(per_file)
        if not more_help:
            self.streams.settle()
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
        return alone_rate(single, four, single[-1][1] if single else PROBE), _rate(four)

    def _ranges(self, url: str, rounds: list[range]) -> list[list[list[tuple[float, int]]]]:
        """Rounds of ranges of `url` (numbered, PROBE bytes apart), each body's arrivals as
        (monotonic time, bytes so far), of the part counted (settled()): PROBE bytes, or up
        to PROBE_SPAN where the first round's first body was bursting() at PROBE, its second
        half: every body reads as far (their rate is counted together, first byte of any to
        last byte of all). A round's ranges are requested together; a round after the first is
        requested a round trip before the body of the one before it (a single range) is due
        to end, from its rate so far, and at its end if sooner.

        Every stream's thread and client are made before the first request, not while a
        body is read and timed (its reader would share the interpreter with them)."""
        headers = self.route.headers_for(url)
        streams = [(n, r) for r, numbers in enumerate(rounds) for n in numbers]
        ready = threading.Barrier(len(streams))
        # Per round: its requests go out together (a stream that starts late, its thread
        # or its client, would stretch the window and hide the gain), once the round
        # before is due to end.
        together = [threading.Barrier(len(numbers)) for numbers in rounds]
        due = [threading.Event() for _ in rounds]
        due[0].set()
        failed: list[BaseException] = []
        span: list[int] = []  # how far each body reads, once the first one has told

        def get(stream: tuple[int, int]) -> list[tuple[float, int]]:
            n, r = stream
            client = self.route.http
            ready.wait(10)
            due[r].wait(10)
            if failed:
                raise failed[0]  # the round before failed: nothing more is asked
            together[r].wait(10)
            following = due[r + 1] if r + 1 < len(rounds) else None
            sent = time.monotonic()
            arrivals: list[tuple[float, int]] = []
            first = n * PROBE
            try:
                with client.stream("GET", url, headers={
                        **headers, "Range": f"bytes={first}-{first + PROBE_SPAN - 1}"},
                        ) as response:
                    if response.status_code >= 400:
                        raise _probe_refused(response.status_code)
                    trip, got, size = time.monotonic() - sent, 0, PROBE
                    early = knee = None
                    if trip < HIDDEN_TRIP:
                        following = None  # the next round waits for this one's end
                    for chunk in response.iter_raw(64 * 1024):
                        got += len(chunk)
                        arrivals.append((time.monotonic(), got))
                        if got >= size and knee is None:
                            if size == PROBE and not span:
                                span.append(PROBE_SPAN if bursting(arrivals) else PROBE)
                            if got >= (size := span[0] if span else size):
                                break  # the rest unread: the connection is closed
                            early = _rate([arrivals])  # reading on: look for the knee
                        elif knee is None and early is not None and \
                                (knee := _knee(arrivals, early)) is not None:
                            size = knee + PROBE
                        elif knee is not None and got >= size:
                            break
                        # Not while it comes fast: it may read on past a burst, and the
                        # next round's bodies would share a host's cap with it.
                        if following is not None and not following.is_set() \
                                and len(arrivals) > 1 and _rate([arrivals]) < FAST:
                            elapsed = arrivals[-1][0] - arrivals[0][0]
                            if (size - got) * elapsed <= trip * got:  # left / rate <= trip
                                following.set()
            except BaseException as e:
                failed.append(e)
                raise
            finally:
                if r + 1 < len(rounds):
                    due[r + 1].set()
            return settled(arrivals, knee)

        # Daemon threads, joined in steps: a pool's workers are joined at the interpreter's
        # exit, so a probe stalled on its server (a CDN that holds the answer) would hold a
        # Ctrl-C'd command until the stall ended (issue 59: every wait ends when asked).
        bodies: list[list[tuple[float, int]]] = [[] for _ in streams]
        errors: dict[int, BaseException] = {}

        def run(i: int) -> None:
            try:
                bodies[i] = get(streams[i])
            except BaseException as e:  # noqa: BLE001 - the caller's to raise, as pool.map's
                errors[i] = e

        threads = [threading.Thread(target=run, args=(i,), daemon=True, name="wlock-probe")
                   for i in range(len(streams))]
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(0.1)
        if errors:
            raise errors[min(errors)]
        return [[body for body, (_, r) in zip(bodies, streams, strict=True) if r == k]
                for k in range(len(rounds))]

