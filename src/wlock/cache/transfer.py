"""Bytes from the Hub to a verified temp file: for each file, the engine that fetches it and
why (wlock.cache.engines), and its attempts.

A small file (under LARGE_FILE) goes through libcurl (engines.small); a large one through
hf_transfer (engines.hf_transfer) with the connections the link earns (engines.link), or
through hf_xet (engines.xet) with --engine xet, or where the bridge refuses it (over its size
limit); one the endpoint serves itself (a mirror) in the mirror's blocks (engines.blocks).
Transient failures are tried again; the bytes are checked against the job's size and hash
before fetch() returns. Nothing here writes into the cache's visible names: the caller
publishes a verified file.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable

from wlock.cache.engines import (
    LARGE_FILE,
    MAX_ATTEMPTS,
    Aborted,
    FetchJob,
    IntegrityError,
    Retryable,
)
from wlock.cache.engines.blocks import MIRROR_BLOCK, Blocks
from wlock.cache.engines.hf_transfer import HfTransfer
from wlock.cache.engines.hf_transfer_worker import CHUNK
from wlock.cache.engines.link import BASE_CONNECTIONS, Link, Streams
from wlock.cache.engines.route import DEFAULT_TIMEOUT, NETWORK_HINT, Route, stalled
from wlock.cache.engines.small import SmallFiles, small_ceiling
from wlock.cache.engines.xet import HF_TRANSFER, HF_XET, XetEngine
from wlock.errors import HubError, HubUnreachableError
from wlock.hubstatus import is_transient, retry_delay
from wlock.ratelimit import RateBudget
from wlock.xet.cas import XetFile

SAME_ORIGIN = "served by the endpoint itself (a mirror)"
# A transfer whose bytes stop for `timeout` seconds is cancelled and retried once: a server
# that stalls twice on the same file will not heal within a sync. So a sync against a stalled
# server ends within about 2 x timeout.
STALL_ATTEMPTS = 2


class Transfer:
    """One endpoint, one token, and the engines of one sync: which fetches each file, and
    its attempts."""

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
        self._aborted = threading.Event()
        self._wait = wait or self._aborted.wait
        self._on_bytes = on_bytes or (lambda job, n: None)
        self.route = Route(endpoint, token, timeout=timeout, budget=budget or RateBudget(
            sleep=self._wait, authenticated=token is not None))
        self.endpoint = self.route.endpoint
        self._engine = engine
        self._timeout = timeout
        # Each large file fetched: its label -> (the engine, why that one when not the
        # default), for `sync -v` and --json; and the files the bridge refused.
        self.engines: dict[str, tuple[str, str]] = {}
        self.connections_of: dict[str, int] = {}  # each hf_transfer file's connections
        self._to_xet: dict[str, str] = {}
        # Set once a file gave up because the endpoint refuses connections: the other files
        # then fail at once with the same cause instead of each retrying for seconds.
        self._down: str | None = None
        # Measured on 2 cores, hf_transfer alone against the emulator: 4 files of 256 MiB at
        # once took 3.2 s with 8 connections each and 1.6 s with 2. So the budget is shared
        # by the large files in flight; raise it (--connections) for a distant CDN.
        # `fixed`: the user's budget, shared by the large files in flight; else today's
        # BASE_CONNECTIONS until the link is found to reward more, up to `connections`.
        per_file = max(1, (connections if fixed else min(connections, BASE_CONNECTIONS)) // jobs)
        # The connections each large file gets, revisited as files finish (Streams).
        self.link = Link(self.route, Streams(per_file, connections, fixed), connections)
        self._large_in_flight = 0
        self._counting = threading.Lock()
        self.small = SmallFiles(self.route, ceiling=small or small_ceiling(),
                                on_bytes=self._on_bytes)
        self.blocks = Blocks(self.small, on_bytes=self._on_bytes, aborted=self._aborted)
        self.hf_transfer = HfTransfer(self.route, jobs=jobs, on_bytes=self._on_bytes,
                                      aborted=self._aborted)
        self.xet = XetEngine(timeout=timeout, jobs=jobs, token=token, endpoint=endpoint)

    @property
    def read_again(self) -> dict[str, int]:
        """Each large file read again whole after its download, and its bytes: its digest
        could not follow the file as it landed (a filesystem without holes, or mappings
        refused). Only then: a file that was followed is never read twice."""
        return {**self.hf_transfer.read_again, **self.blocks.read_again}

    def close(self) -> None:
        self.route.close()
        self.small.close()
        self.blocks.close()
        self.hf_transfer.workers.close()

    def abort(self) -> None:
        """Stop every transfer in flight now (Ctrl-C): each raises Aborted promptly and
        removes its temp file; the worker processes are killed."""
        self._aborted.set()
        self.hf_transfer.workers.kill()
        self.xet.abort()
        self.small.abort()

    def __enter__(self) -> Transfer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def stopped(self) -> threading.Event:
        """Set once abort() was called: long waits outside a transfer watch it too."""
        return self._aborted

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
            if self._aborted.is_set():
                raise Aborted
            if self._down is not None:
                raise self._down_error(job)
            try:
                if job.size >= LARGE_FILE:
                    actual_hash, actual_size = self._fetch_large_file(job, attempt)
                else:
                    with self.small.gate.slot() as refuse:
                        try:
                            actual_hash, actual_size = self.small.fetch(job)
                        except Retryable as e:
                            if e.reason == "status":
                                refuse()
                            raise
                break
            except Retryable as e:
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
                        raise stalled(job, self._timeout, stalls).final from None
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
        url, xet = self.route.resolve(job)
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
        if self.route.own(url) and not self.link.streams.fixed:
            # Not redirected to a CDN: the endpoint serves the bytes itself (a mirror, a
            # proxy, `wlock serve`). A pull-through mirror fetches its upstream in blocks of
            # its own, one upstream stream each; ranges across them made olah wait on them
            # or fetch them twice (4 x 128 MiB with an empty cache: 16.2 s and 1.63x the
            # bytes upstream). Its own blocks, several at once (engines.blocks says why);
            # --connections still asks for hf_transfer's ranges.
            return self._fetch_from_endpoint(job, url)
        with self._counting:
            self._large_in_flight += 1
            files = self._large_in_flight
        chosen, explored = self.link.streams.choose(job.size, files, CHUNK)
        # A file that failed is tried again with half the connections: on a flaky link
        # fewer ranges fail at once, and each has more tries left.
        connections = max(1, chosen >> (attempt - 1))
        started = time.monotonic()
        try:
            done = self.hf_transfer.fetch(job, url, connections)
        except Retryable as e:
            self.link.streams.finished(connections, 0, 0.0, explored=explored)
            if e.reason == "no-ranges":
                # Read it whole, once, in one GET (as lock's range reads do there), hashed
                # as it arrives: the small-file path, which needs no ranges.
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(job.temp)
                self.engines[job.label] = ("http", "the server ignores ranges")
                return self.small.fetch(job)
            if e.status is not None and is_transient(e.status):
                self.link.streams.refused()  # the server asks for less
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
            self.link.streams.finished(connections, 0, 0.0, explored=explored)
            raise
        finally:
            with self._counting:
                self._large_in_flight -= 1
        self.link.streams.finished(connections, job.size, time.monotonic() - started,
                                   explored=explored)
        self.engines[job.label] = (HF_TRANSFER, "")
        self.connections_of[job.label] = connections
        return done

    def _fetch_from_endpoint(self, job: FetchJob, url: str) -> tuple[str, int]:
        """A large file the endpoint serves itself: one GET when it is one mirror block,
        else its blocks, several at once (engines.blocks.Slots)."""
        if job.size <= MIRROR_BLOCK:
            self.engines[job.label] = ("http", SAME_ORIGIN)
            return self.small.fetch(job)
        try:
            done = self.blocks.fetch(job, url)
        except Retryable as e:
            if e.reason != "no-ranges":
                raise
            self.engines[job.label] = ("http", "the server ignores ranges")
            return self.small.fetch(job)
        self.engines[job.label] = ("http", f"{SAME_ORIGIN}, in its {MIRROR_BLOCK >> 20} MiB "
                                   f"blocks, up to {self.blocks.most} at once")
        return done

    def _fetch_xet(self, job: FetchJob, xet: XetFile, why: str) -> tuple[str, int]:
        done = self.xet.fetch_job(job, xet, self.route.http, self._on_bytes)
        self.engines[job.label] = (HF_XET, why)
        return done

    def _down_error(self, job: FetchJob) -> HubUnreachableError:
        return HubUnreachableError(f"{job.label}: not fetched: {self._down}",
                                   repo=job.repo_id, hint=NETWORK_HINT, cause=self._down,
                                   subject=job.label)
