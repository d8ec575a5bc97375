"""Large files through hf_transfer (parallel range requests, in Rust), in worker processes
(wlock.cache.engines.hf_transfer_worker): hf_transfer holds the GIL for a whole download, so
threads would run them one at a time. This process hashes each file as its ranges land.
"""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
from typing import Any

from wlock.cache.engines import Aborted, FetchJob, OnBytes, Retryable, disk_full
from wlock.cache.engines.route import Route, stalled
from wlock.errors import HubUnreachableError, LocalError, redact
from wlock.hashing import GrowingHash, hash_file


class HfTransfer:
    """The hf_transfer engine of one sync: its worker processes, and each file's watch (its
    progress, its stall timeout, Ctrl-C)."""

    def __init__(self, route: Route, *, jobs: int, on_bytes: OnBytes,
                 aborted: threading.Event) -> None:
        self._route, self._on_bytes, self._aborted = route, on_bytes, aborted
        # Made here, not on first use: several threads reach their first large file at once,
        # and a pool made twice would leave one set of workers that abort() never kills.
        # It starts no process until a large file needs one.
        self.workers = WorkerPool(jobs)
        # Each file read again whole after its download (label -> bytes): its digest could
        # not follow the ranges as they landed. Said in sync's report; none on a local disk.
        self.read_again: dict[str, int] = {}

    def warm(self, files: int) -> None:
        """Start the worker processes `files` downloads will run on, in the background."""
        self.workers.warm(files)

    def fetch(self, job: FetchJob, url: str, connections: int) -> tuple[str, int]:
        """`job` from `url` (resolved: the CDN's signed URL, or the endpoint's) into its
        temp file with `connections` ranges at once: its digest and size."""
        # The worker only downloads: this thread hashes the file as its ranges land
        # (GrowingHash), where the worker, which hf_transfer holds for the whole download,
        # could only read it all again at the end (measured: 0.13 s a 128 MiB file, on a
        # core of two, after the last byte).
        payload = {"url": url, "temp": str(job.temp), "hash_kind": None,
                   "headers": self._route.headers_for(url), "connections": connections}
        growing = GrowingHash(job.temp, job.hash_kind, job.size)
        done = threading.Event()
        outcome: dict[str, Any] = {}
        running: dict[str, subprocess.Popen[str]] = {}

        def run() -> None:
            try:
                outcome.update(self.workers.run(payload, running))
            except OSError as e:  # no worker process could be started: this machine's limit
                outcome.update(ok=False, spawn=e)
            finally:
                done.set()

        threading.Thread(target=run, daemon=True).start()
        last, moved = 0, time.monotonic()
        silent = False
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
                elif time.monotonic() - moved > self._route.timeout and "worker" in running:
                    # hf_transfer has no read timeout: a CDN that stops sending mid-body
                    # would hold this download forever. Kill its worker; the pool starts
                    # another.
                    silent = True
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
            if silent or not outcome.get("ok"):
                self._on_bytes(job, -last)
                if silent:
                    raise stalled(job, self._route.timeout)
                raise _worker_failure(job, str(outcome.get("error")))
            digest = growing.finish()
        finally:
            growing.close()
        if digest != job.etag:  # not followed, or a filesystem without holes: read it all
            digest = hash_file(job.temp, job.hash_kind)
            self.read_again[job.label] = job.size
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

    def _check_aborted(self) -> None:
        if self._aborted.is_set():
            raise Aborted


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


class WorkerPool:
    """Up to `size` hf_transfer_worker processes, each running one download at a time, all
    living as long as the pool."""

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
        PR_SET_PDEATHSIG (hf_transfer_worker.die_with_parent) fires when the *thread* that
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
                    [sys.executable, "-m", "wlock.cache.engines.hf_transfer_worker"],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
                    start_new_session=True,
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



_STATUS = re.compile(r"\b([45]\d\d)\b")


def _worker_failure(job: FetchJob, detail: str) -> Exception:
    """What an hf_transfer failure means, from its message (it raises plain Exceptions):
    a full disk is this machine's problem (exit 6, not worth a retry); an HTTP status or a
    cut connection is worth another attempt. URLs lose their query strings (signed)."""
    detail = redact(detail)
    if (full := disk_full(job, detail)) is not None:
        return full
    if "No content length" in detail:
        # hf_transfer's first request (bytes=0-0) got no Content-Range back: a server or a
        # proxy that ignores Range. Not worth another attempt with ranges.
        return Retryable(HubUnreachableError(
            f"{job.label}: the download server ignores HTTP ranges", repo=job.repo_id,
            subject=job.label), reason="no-ranges")
    status = _STATUS.search(detail)
    cause = (f"the download server answered {status.group(1)}" if status
             else f"the download failed: {detail}")
    return Retryable(HubUnreachableError(
        f"{job.label}: {cause}", repo=job.repo_id,
        hint="Retry; check the network and the endpoint.", cause=cause if status else None,
        subject=job.label), reason="status" if status else "transient",
        status=int(status.group(1)) if status else None)
