"""The ways bytes arrive from the Hub, one module each, behind one interface.

An engine takes a job (what to fetch, what it must hash to, the temp file to write) and
writes only that temp file; it returns the bytes' digest and size, or raises. It never
publishes: the verify against the lock, the policy's judgement of the bytes and the publish
happen once, in wlock.cache.sync, for every engine alike.

    route.py        the Hub's hops: resolve URLs, redirects, the token's scope, error classes
    link.py         the link's verdict: the probe, connections per large file (Streams),
                    the machine's ceilings; link_record.py keeps a verdict for other syncs
    hf_transfer.py  large files through hf_transfer's ranges, in worker processes
                    (hf_transfer_worker.py)
    small.py        small files through libcurl (curl.py), and how many at once (SmallGate)
    blocks.py       large files the endpoint serves itself (a mirror): in its blocks,
                    several at once, through small.py's libcurl
    xet.py          large files through hf_xet, from the Hub's CAS
    chunks.py       chunk-level upgrades: a file put together from its cached revision and
                    the xorb ranges that changed

wlock.cache.transfer chooses the engine for each file, says why, and retries.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from wlock.errors import HubError, LocalError
from wlock.models import RepoKind

# From this size a file is a large file: hf_transfer's ranges (or hf_xet) rather than one GET.
LARGE_FILE = 8 * 1024 * 1024
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
    temp: str | Path
    xet: str | None = None  # its Xet hash, where the lock records one

    @property
    def label(self) -> str:
        return f"{self.repo_id}/{self.path}"


# Each engine reports bytes as they land (negative: taken back, on a retry).
OnBytes = Callable[[FetchJob, int], None]


class IntegrityError(Exception):
    """The bytes that arrived are not the bytes the lock names."""

    def __init__(self, job: FetchJob, actual_size: int, actual_hash: str) -> None:
        super().__init__(f"{job.label}: got {actual_size} bytes hashing to {actual_hash}")
        self.job, self.actual_size, self.actual_hash = job, actual_size, actual_hash


def disk_full(job: FetchJob, said: str) -> LocalError | None:
    """The error for an engine's failure that says the disk is full (`said`: its words; a
    Rust engine says "os error 28"), or None: this machine's problem, exit 6, no retry."""
    if "No space left on device" not in said and "os error 28" not in said:
        return None
    return LocalError(
        f"{job.label}: not enough space to write {os.path.dirname(job.temp)}: No space left "
        "on device", hint="Free some space, or point --cache-dir (or HF_HOME) at a larger "
        "volume.", subject=job.label)


class Aborted(Exception):
    """The transfer was stopped by Transfer.abort()."""


class Retryable(Exception):
    """A failure worth another attempt. `reason`: "status" (429/5xx), "rate" (a 429 the
    rate budget waits out: no attempt spent), "stall" (no byte for the timeout), "slow" (a
    trickle past the file's deadline: retried as a stall is), "engine" (hf_xet failed
    without a status, after its own retries: once more), "unreachable" (the endpoint
    refuses or cannot be connected to), "no-ranges" (the server ignores Range), or
    "transient" (a connection cut, a worker's failure)."""

    def __init__(
        self, final: HubError, delay: float | None = None, reason: str = "transient",
        status: int | None = None,
    ) -> None:
        super().__init__(str(final))
        self.final, self.delay, self.reason, self.status = final, delay, reason, status
