"""Lock + cache -> CheckReport, offline: every byte re-hashed against the lock.

Each distinct blob (inode) is hashed once, on all cores (hashlib releases the GIL), largest
first within each batch of files so the longest hash starts at once; memory stays flat for a
lock of a million files. The CLI decides the exit code from the report.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable
from pathlib import Path

from wlock.cache.layout import (
    RepoPaths,
    describe_ref,
    folder_problem,
    follows_ref,
    link_target,
)
from wlock.hashing import HashPool
from wlock.models import CheckReport, Lock, LockedFile, LockedRepo, Problem, ProblemKind

# Files are located and hashed this many at a time: memory stays flat whatever the lock's
# size, and within a batch the largest blob is hashed first.
BATCH = 4096


def check_cache(
    lock: Lock,
    cache_dir: Path,
    *,
    jobs: int | None = None,
    on_hashed: Callable[[int], None] | None = None,
) -> CheckReport:
    """Verify every locked file: present, linked to its blob, right size, right hash. Never
    raises for a cache problem: each one is a Problem in the report; a ref at another
    commit is a note."""
    started = time.monotonic()
    problems: list[Problem] = []
    notes: list[Problem] = []
    files = 0
    real_cache = os.path.realpath(cache_dir)
    with HashPool(jobs, on_hashed) as pool:
        judge = _Judge(pool, problems)
        for repo in lock.repos:
            paths = RepoPaths.of(cache_dir, repo)
            locator = _Locator(paths, repo, problems, real_cache)
            for f in repo.files:
                files += 1
                located = locator.locate(f)
                if located is not None:
                    judge.add(repo, f, *located)
            if follows_ref(repo):
                # The cache may be shared with projects that lock the same branch elsewhere:
                # a ref at another commit is worth saying, not a failure. `wlock run` gives
                # this project its own refs (wlock.cache.view).
                ref = describe_ref(paths, repo.requested)
                if ref != repo.revision:
                    notes.append(Problem("wrong-ref", repo.kind, repo.id,
                                         f"refs/{repo.requested}", repo.revision, ref))
        judge.finish()
    problems.sort(key=lambda p: (p.repo_kind, p.repo_id, p.path))
    return CheckReport(cache_dir=str(cache_dir), repos=len(lock.repos), files=files,
                       bytes_hashed=judge.hashed, problems=tuple(problems),
                       seconds=time.monotonic() - started, notes=tuple(notes))


class _Judge:
    """Hashes located files in batches, one batch hashing while the next is located, and
    records a problem for every file whose blob is wrong. Each blob (inode) is judged once,
    however many paths and repos use it."""

    def __init__(self, pool: HashPool, problems: list[Problem]) -> None:
        self.pool, self.problems = pool, problems
        self.good: set[int] = set()  # (st_dev << 64) | st_ino: one int, not a tuple, each
        self.bad: dict[int, str] = {}
        self.hashed = 0
        self._batch: list[tuple[LockedRepo, LockedFile, str, int]] = []
        self._in_flight: Callable[[], None] | None = None
        self._hashing: set[int] = set()

    def add(self, repo: LockedRepo, f: LockedFile, real: str, inode: int) -> None:
        self._batch.append((repo, f, real, inode))
        if len(self._batch) == BATCH:
            self._submit()

    def finish(self) -> None:
        self._submit()
        self._settle()

    def _settle(self) -> None:
        if self._in_flight is not None:
            self._in_flight()
            self._in_flight = None

    def _submit(self) -> None:
        batch, self._batch = self._batch, []
        todo: dict[int, tuple[str, LockedFile]] = {}
        for _, f, real, inode in batch:
            # Judged, or being hashed with the previous batch (settled before this one).
            if inode not in self.good and inode not in self.bad \
                    and inode not in self._hashing:
                todo.setdefault(inode, (real, f))
        self._hashing = set(todo)
        items = list(todo.items())
        wait = self.pool.submit([(real, f.hash_kind, f.size) for _, (real, f) in items])
        self._settle()  # the previous batch, hashed while this one was located

        def settle() -> None:
            for (inode, (_, f)), actual in zip(items, wait(), strict=True):
                if isinstance(actual, OSError):
                    raise actual
                self.hashed += f.size
                if actual == f.etag:
                    self.good.add(inode)
                else:
                    self.bad[inode] = actual
            for repo, f, _, inode in batch:
                if inode in self.bad:
                    self.problems.append(Problem("wrong-hash", repo.kind, repo.id, f.path,
                                                 f"{f.hash_kind} {f.etag}", self.bad[inode]))

        self._in_flight = settle


class _Locator:
    """Finds where one repo's files' bytes are, checking the way there (see locate)."""

    def __init__(self, paths: RepoPaths, repo: LockedRepo, problems: list[Problem],
                 real_cache: str) -> None:
        self.paths, self.repo, self.problems, self.real_cache = paths, repo, problems, real_cache
        # Plain strings and one check per folder: this loop is the whole cost of checking a
        # lock of many small files.
        self.snapshot = f"{paths.snapshot(repo.revision)}/"
        self.blobs = f"{paths.blobs}/" if folder_problem(paths, paths.blobs) is None else None
        self.folders: dict[str, str | None] = {}

    def _problem(self, kind: ProblemKind, f: LockedFile, expected: str, actual: str) -> None:
        self.problems.append(Problem(kind, self.repo.kind, self.repo.id, f.path, expected,
                                     actual))

    def locate(self, f: LockedFile) -> tuple[str, int] | None:
        """The real path and the inode of the file's bytes, after checking the snapshot
        entry, where it leads and its size. Only a regular file inside the cache is ever
        opened: never a FIFO, a device, or a file a planted link points at."""
        parent = f.path.rpartition("/")[0]
        if parent not in self.folders:
            self.folders[parent] = folder_problem(
                self.paths, self.paths.snapshot(self.repo.revision) / parent)
        if unsafe := self.folders[parent]:
            self._problem("unsafe", f, "a folder", unsafe)
            return None
        link = self.snapshot + f.path
        expected = link_target(f.path, f.etag)
        try:
            target: str | None = os.readlink(link)
        except FileNotFoundError:
            self._problem("missing", f, f"snapshots/{self.repo.revision}/{f.path}",
                          "nothing")
            return None
        except OSError:
            target = None  # a plain file (caches without symlinks, as on Windows)
        if target is not None and target != expected:
            self._problem("wrong-link", f, expected, target)
            return None
        # The link is the expected one through real folders: the bytes are the blob itself,
        # unless the blob is a link too (huggingface_hub 2.x's shared store, or planted).
        real = link if target is None else (self.blobs + f.etag if self.blobs else None)
        try:
            st = os.lstat(real) if real else None
            if st is None or stat.S_ISLNK(st.st_mode):
                st, real = os.stat(link), None
        except OSError:
            self._problem("missing", f, f"blobs/{f.etag}", "a dangling link")
            return None
        if not stat.S_ISREG(st.st_mode):
            self._problem("unsafe", f, "a regular file", "a FIFO, device or folder")
            return None
        if real is None:
            real = os.path.realpath(link)
            if os.path.commonpath([real, self.real_cache]) != self.real_cache:
                self._problem("unsafe", f, "a file in the cache", "a link out of the cache")
                return None
        if st.st_size != f.size:
            self._problem("wrong-size", f, f"{f.size} bytes", f"{st.st_size} bytes")
            return None
        return real, (st.st_dev << 64) | st.st_ino
