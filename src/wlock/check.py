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

from wlock.cache import RepoPaths, folder_problem, follows_ref, link_target, read_ref
from wlock.hashing import hash_files
from wlock.models import CheckReport, Lock, LockedFile, LockedRepo, Problem

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
    # Each blob (inode) is hashed once, however many paths and repos use it.
    good: set[tuple[int, int]] = set()
    bad: dict[tuple[int, int], str] = {}
    hashed = 0
    files = 0
    real_cache = os.path.realpath(cache_dir)
    for repo in lock.repos:
        paths = RepoPaths.of(cache_dir, repo)
        batch: list[tuple[LockedFile, str, tuple[int, int]]] = []
        for f in repo.files:
            files += 1
            located = _locate(paths, repo, f, problems, real_cache)
            if located is not None:
                batch.append((f, *located))
            if len(batch) == BATCH:
                hashed += _hash_batch(repo, batch, good, bad, problems, jobs, on_hashed)
                batch = []
        hashed += _hash_batch(repo, batch, good, bad, problems, jobs, on_hashed)
        if follows_ref(repo):
            # The cache may be shared with projects that lock the same branch elsewhere:
            # a ref at another commit is worth saying, not a failure. `wlock run` gives this
            # project its own refs (wlock.view).
            ref = read_ref(paths, repo.requested) or "no commit there"
            if ref != repo.revision:
                notes.append(Problem("wrong-ref", repo.kind, repo.id, f"refs/{repo.requested}",
                                     repo.revision, ref))
    problems.sort(key=lambda p: (p.repo_kind, p.repo_id, p.path))
    return CheckReport(cache_dir=str(cache_dir), repos=len(lock.repos), files=files,
                       bytes_hashed=hashed, problems=tuple(problems),
                       seconds=time.monotonic() - started, notes=tuple(notes))


def _hash_batch(
    repo: LockedRepo,
    batch: list[tuple[LockedFile, str, tuple[int, int]]],
    good: set[tuple[int, int]],
    bad: dict[tuple[int, int], str],
    problems: list[Problem],
    jobs: int | None,
    on_hashed: Callable[[int], None] | None,
) -> int:
    """Hash the blobs of `batch` not judged yet; record a problem for every file whose blob
    is wrong. Returns the bytes hashed."""
    todo: dict[tuple[int, int], tuple[str, LockedFile]] = {}
    for f, real, inode in batch:
        if inode not in good and inode not in bad:
            todo.setdefault(inode, (real, f))
    items = list(todo.items())
    digests = hash_files([(Path(real), f.hash_kind, f.size) for _, (real, f) in items],
                         jobs=jobs, on_hashed=on_hashed)
    for (inode, (_, f)), actual in zip(items, digests, strict=True):
        if isinstance(actual, OSError):
            raise actual
        if actual == f.etag:
            good.add(inode)
        else:
            bad[inode] = actual
    for f, _, inode in batch:
        if inode in bad:
            problems.append(Problem("wrong-hash", repo.kind, repo.id, f.path,
                                    f"{f.hash_kind} {f.etag}", bad[inode]))
    return sum(f.size for _, (_, f) in items)


def _locate(
    paths: RepoPaths, repo: LockedRepo, f: LockedFile, problems: list[Problem], real_cache: str
) -> tuple[str, tuple[int, int]] | None:
    """The real path and the inode of the file's bytes, after checking the snapshot entry,
    where it leads and its size. Only a regular file inside the cache is ever opened: never
    a FIFO, a device, or a file a planted link points at."""
    link = paths.link(repo.revision, f.path)
    if unsafe := folder_problem(paths, link.parent):
        problems.append(Problem("unsafe", repo.kind, repo.id, f.path, "a folder", unsafe))
        return None
    expected = link_target(f.path, f.etag)
    try:
        target = os.readlink(link)
    except FileNotFoundError:
        problems.append(Problem("missing", repo.kind, repo.id, f.path,
                                f"snapshots/{repo.revision[:7]}/{f.path}", "nothing"))
        return None
    except OSError:
        target = None  # a plain file (caches without symlinks, as on Windows): check its bytes
    if target is not None and target != expected:
        problems.append(Problem("wrong-link", repo.kind, repo.id, f.path, expected, target))
        return None
    try:
        st = os.stat(link)
    except OSError:
        problems.append(Problem("missing", repo.kind, repo.id, f.path,
                                f"blobs/{f.etag}", "a dangling link"))
        return None
    if not stat.S_ISREG(st.st_mode):
        problems.append(Problem("unsafe", repo.kind, repo.id, f.path, "a regular file",
                                "a FIFO, device or folder"))
        return None
    real = os.path.realpath(link)
    if os.path.commonpath([real, real_cache]) != real_cache:
        problems.append(Problem("unsafe", repo.kind, repo.id, f.path, "a file in the cache",
                                "a link out of the cache"))
        return None
    if st.st_size != f.size:
        problems.append(Problem("wrong-size", repo.kind, repo.id, f.path,
                                f"{f.size} bytes", f"{st.st_size} bytes"))
        return None
    return real, (st.st_dev, st.st_ino)
