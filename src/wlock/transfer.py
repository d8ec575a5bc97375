"""Bytes from the Hub to a verified temp file.

Large files go through hf_transfer (parallel range requests, in Rust) in worker processes
(wlock.transfer_worker): hf_transfer holds the GIL for a whole download, so threads would run
them one at a time.
Small files stream over pooled HTTP connections in threads, hashed as they arrive.
Nothing here writes into the cache's visible names: the caller publishes a verified file.

The redirect is resolved here first: the token goes only to the endpoint's origin, never to
the CDN a large file is served from.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urljoin, urlsplit

from wlock import __version__
from wlock.errors import HubError, HubUnreachableError, RevisionNotFoundError
from wlock.hashing import hash_file
from wlock.hubstatus import hub_error, is_transient, retry_delay
from wlock.models import RepoKind

if TYPE_CHECKING:
    import httpx2

LARGE_FILE = 8 * 1024 * 1024
MAX_REDIRECTS = 10
MAX_ATTEMPTS = 5


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
    temp: Path

    @property
    def label(self) -> str:
        return f"{self.repo_id}/{self.path}"


class IntegrityError(Exception):
    """The bytes that arrived are not the bytes the lock names."""

    def __init__(self, job: FetchJob, actual_size: int, actual_hash: str) -> None:
        super().__init__(f"{job.label}: got {actual_size} bytes hashing to {actual_hash}")
        self.job, self.actual_size, self.actual_hash = job, actual_size, actual_hash


class Aborted(Exception):
    """The transfer was stopped by Transfer.abort()."""


class Transfer:
    """One endpoint, one token, one HTTP pool, and (when needed) a pool of worker processes."""

    def __init__(
        self, endpoint: str, token: str | None, *, jobs: int, connections: int = 8,
        on_bytes: Callable[[FetchJob, int], None] | None = None,
    ) -> None:
        import httpx2

        self.endpoint = endpoint.rstrip("/")
        self._origin = _origin(self.endpoint)
        self._token = token
        self._jobs = jobs
        # Measured on 2 cores, hf_transfer alone against the emulator: 4 files of 256 MiB at
        # once took 3.2 s with 8 connections each and 1.6 s with 2. So the budget is shared
        # by the large files in flight; raise it (--connections) for a distant CDN.
        self._per_file = max(1, connections // jobs)
        self._on_bytes = on_bytes or (lambda job, n: None)
        self._http = httpx2.Client(
            timeout=httpx2.Timeout(60.0, connect=10.0),
            limits=httpx2.Limits(max_connections=4 * jobs + 8, max_keepalive_connections=32),
            headers={"User-Agent": f"wlock/{__version__}"},
            follow_redirects=False,
        )
        # Made here, not on first use: several threads reach their first large file at once,
        # and a pool made twice would leave one set of workers that abort() never kills.
        # It starts no process until a large file needs one.
        self._workers = _WorkerPool(jobs)
        self._aborted = threading.Event()

    def close(self) -> None:
        self._http.close()
        self._workers.close()

    def abort(self) -> None:
        """Stop every transfer in flight now (Ctrl-C): each raises Aborted promptly and
        removes its temp file; the worker processes are killed."""
        self._aborted.set()
        self._workers.kill()

    def __enter__(self) -> Transfer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_aborted(self) -> None:
        if self._aborted.is_set():
            raise Aborted

    def _headers_for(self, url: str) -> dict[str, str]:
        headers = {"Accept-Encoding": "identity"}
        if self._token and _origin(url) == self._origin:
            headers["Authorization"] = f"Bearer {self._token}"
        return headers

    # -- the public operation --------------------------------------------------------------

    def fetch(self, job: FetchJob) -> None:
        """Download `job` into `job.temp` and verify size and hash.

        Retries transient failures (5xx, 429 with Retry-After, dropped connections) with
        backoff. Raises IntegrityError when the bytes are wrong (the temp file is removed),
        HubError subclasses when the Hub refuses.
        """
        for attempt in range(1, MAX_ATTEMPTS + 1):
            self._check_aborted()
            try:
                if job.size >= LARGE_FILE:
                    actual_hash, actual_size = self._fetch_large(job, self._resolve(job))
                else:
                    actual_hash, actual_size = self._fetch_small(job)
                break
            except _Retryable as e:
                with contextlib.suppress(FileNotFoundError):
                    job.temp.unlink()
                if attempt == MAX_ATTEMPTS:
                    raise e.final from None
                self._aborted.wait(e.delay if e.delay is not None else retry_delay(attempt, None))
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    job.temp.unlink()
                raise
        if actual_size != job.size or actual_hash != job.etag:
            with contextlib.suppress(FileNotFoundError):
                job.temp.unlink()
            raise IntegrityError(job, actual_size, actual_hash)

    # -- steps ------------------------------------------------------------------------------

    def _resolve_url(self, job: FetchJob) -> str:
        prefix = "datasets/" if job.kind == "dataset" else ""
        return f"{self.endpoint}/{prefix}{job.repo_id}/resolve/{job.revision}/{quote(job.path)}"

    def _next_hop(self, url: str, response: httpx2.Response, job: FetchJob) -> str | None:
        """Where a redirect leads, or None when `response` is the answer. Raises on errors."""
        if response.status_code in (301, 302, 303, 307, 308):
            return urljoin(url, response.headers["Location"])
        if response.status_code >= 400:
            response.read()
            raise _classify(response, job, self.endpoint)
        return None

    def _resolve(self, job: FetchJob) -> str:
        """The URL the bytes come from: the endpoint's own, or the CDN it redirects to."""
        import httpx2

        url = self._resolve_url(job)
        for _ in range(MAX_REDIRECTS):
            try:
                response = self._http.request("HEAD", url, headers=self._headers_for(url))
            except httpx2.TransportError as e:
                raise _unreachable(self.endpoint, job, e) from e
            target = self._next_hop(url, response, job)
            if target is None:
                return url
            if _origin(target) != self._origin:
                return target  # a CDN: a signed URL, and no token
            url = target
        raise HubError(f"{job.label}: too many redirects from {self.endpoint}", repo=job.repo_id)

    def _fetch_small(self, job: FetchJob) -> tuple[str, int]:
        """GET through the redirects (no HEAD first: one round trip less per file), hashing
        the body as it arrives. The token is sent only while on the endpoint's origin."""
        import httpx2

        url = self._resolve_url(job)
        written = 0
        try:
            for _ in range(MAX_REDIRECTS):
                with self._http.stream("GET", url, headers=self._headers_for(url)) as response:
                    target = self._next_hop(url, response, job)
                    if target is None:
                        digest = hashlib.sha256() if job.hash_kind == "sha256" else hashlib.sha1(
                            b"blob %d\x00" % job.size, usedforsecurity=False
                        )
                        with open(job.temp, "wb") as out:
                            for chunk in response.iter_raw(1024 * 1024):
                                self._check_aborted()
                                out.write(chunk)
                                digest.update(chunk)
                                written += len(chunk)
                                self._on_bytes(job, len(chunk))
                        break
                url = target
            else:
                raise HubError(f"{job.label}: too many redirects from {self.endpoint}",
                               repo=job.repo_id)
        except httpx2.TransportError as e:  # includes a body cut short
            self._on_bytes(job, -written)
            raise _unreachable(self.endpoint, job, e) from e
        if job.hash_kind == "git-sha1" and written != job.size:
            return hash_file(job.temp, "git-sha1"), written
        return digest.hexdigest(), written

    def _fetch_large(self, job: FetchJob, url: str) -> tuple[str, int]:
        payload = {"url": url, "temp": str(job.temp), "hash_kind": job.hash_kind,
                   "headers": self._headers_for(url), "connections": self._per_file}
        done = threading.Event()
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                outcome.update(self._workers.run(payload))
            except OSError as e:
                outcome.update(ok=False, error=f"the download worker failed: {e}")
            finally:
                done.set()

        threading.Thread(target=run, daemon=True).start()
        last = 0
        while not done.wait(0.2):
            if self._aborted.is_set():
                # abort() is killing the worker: wait until it is gone, or it could create
                # its file after the caller removed it.
                done.wait(10)
                raise Aborted
            last = self._report_progress(job, last)
        self._check_aborted()
        if not outcome.get("ok"):
            self._on_bytes(job, -last)
            raise _Retryable(HubUnreachableError(
                f"{job.label}: download failed: {outcome.get('error')}", repo=job.repo_id,
                hint="Retry; check the network and the endpoint.",
            ))
        self._on_bytes(job, job.size - last)
        return str(outcome["hash"]), int(outcome["size"])

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


class _WorkerPool:
    """Up to `size` `wlock.transfer_worker` processes, each running one download at a time."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._idle: queue.SimpleQueue[subprocess.Popen[str]] = queue.SimpleQueue()
        self._all: list[subprocess.Popen[str]] = []
        self._lock = threading.Lock()
        self._killed = False

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
                raise OSError("the transfer was aborted")
            if len(self._all) < self._size:
                # Its own session: a terminal's Ctrl-C reaches only the parent, which aborts
                # and kills its workers itself (an interpreter interrupted while starting up
                # prints a fatal error). If the parent dies, the kernel kills the worker
                # (transfer_worker.die_with_parent); the next sync removes what it leaves.
                worker = subprocess.Popen(
                    [sys.executable, "-m", "wlock.transfer_worker"], stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE, text=True, bufsize=1, start_new_session=True,
                    env={**os.environ, "WLOCK_TRANSFER_PARENT": str(os.getpid())},
                )
                self._all.append(worker)
                return worker
        return None

    def run(self, payload: dict[str, Any]) -> dict[str, Any]:
        worker = self._checkout()
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
            return {"ok": False, "error": "the download worker exited"}
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

    def close(self) -> None:
        for worker in self._all:
            if worker.stdin:
                worker.stdin.close()
        for worker in self._all:
            try:
                worker.wait(5)
            except subprocess.TimeoutExpired:
                worker.kill()
            if worker.stdout:
                worker.stdout.close()


class _Retryable(Exception):
    def __init__(self, final: HubError, delay: float | None = None) -> None:
        super().__init__(str(final))
        self.final, self.delay = final, delay


def _classify(response: httpx2.Response, job: FetchJob, endpoint: str) -> Exception:
    status, code = response.status_code, response.headers.get("X-Error-Code")
    if code in ("RevisionNotFound", "EntryNotFound"):
        what = "commit" if code == "RevisionNotFound" else f"file {job.path!r} at commit"
        return RevisionNotFoundError(
            f"{job.kind} {job.repo_id}: {what} {job.revision[:7]} is no longer on the Hub "
            f"({status})", repo=job.repo_id,
            hint="The history was rewritten upstream: re-lock with "
            f"`wlock lock --upgrade-package {job.repo_id}`.",
        )
    error = hub_error(status, code, kind=job.kind, repo_id=job.repo_id, endpoint=endpoint,
                      attempts=MAX_ATTEMPTS, about=job.path)
    if is_transient(status):
        retry_after = response.headers.get("Retry-After")
        return _Retryable(error, delay=retry_delay(1, retry_after) if retry_after else None)
    return error


def _origin(url: str) -> tuple[str, str, int]:
    parts = urlsplit(url)
    default = 443 if parts.scheme == "https" else 80
    return parts.scheme, (parts.hostname or "").lower(), parts.port or default


def _unreachable(endpoint: str, job: FetchJob, e: Exception) -> _Retryable:
    return _Retryable(HubUnreachableError(
        f"cannot reach {endpoint} for {job.label}: {e}", repo=job.repo_id,
        hint="Check the network, or the endpoint (--endpoint / HF_ENDPOINT).",
    ))
