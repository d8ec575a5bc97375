"""Lock + cache -> CheckReport, offline: every byte re-hashed against the lock.

Each distinct blob is hashed once, on all cores (hashlib releases the GIL), largest first so
the longest hash starts at once. The CLI decides the exit code from the report.
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
    to_hash: dict[str, tuple[LockedFile, list[tuple[LockedRepo, LockedFile]]]] = {}
    files = 0
    real_cache = os.path.realpath(cache_dir)
    for repo in lock.repos:
        paths = RepoPaths.of(cache_dir, repo)
        for f in repo.files:
            files += 1
            real = _locate(paths, repo, f, problems, real_cache)
            if real is None:
                continue
            entry = to_hash.setdefault(real, (f, []))
            entry[1].append((repo, f))
        if follows_ref(repo):
            # The cache may be shared with projects that lock the same branch elsewhere:
            # a ref at another commit is worth saying, not a failure. `wlock run` gives this
            # project its own refs (wlock.view).
            ref = read_ref(paths, repo.requested) or "no commit there"
            if ref != repo.revision:
                notes.append(Problem("wrong-ref", repo.kind, repo.id, f"refs/{repo.requested}",
                                     repo.revision, ref))

    hashed = 0
    entries = list(to_hash.items())
    digests = hash_files([(Path(real), f.hash_kind, f.size) for real, (f, _) in entries],
                         jobs=jobs, on_hashed=on_hashed)
    for (_, (f, users)), actual in zip(entries, digests, strict=True):
        if isinstance(actual, OSError):
            raise actual
        hashed += f.size
        if actual != f.etag:
            for repo, user in users:
                problems.append(Problem("wrong-hash", repo.kind, repo.id, user.path,
                                        f"{user.hash_kind} {user.etag}", actual))
    problems.sort(key=lambda p: (p.repo_kind, p.repo_id, p.path))
    return CheckReport(cache_dir=str(cache_dir), repos=len(lock.repos), files=files,
                       bytes_hashed=hashed, problems=tuple(problems),
                       seconds=time.monotonic() - started, notes=tuple(notes))


def _locate(
    paths: RepoPaths, repo: LockedRepo, f: LockedFile, problems: list[Problem], real_cache: str
) -> str | None:
    """The real path of the file's bytes, after checking the snapshot entry, where it leads
    and its size. Only a regular file inside the cache is ever opened: never a FIFO, a
    device, or a file a planted link points at."""
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
    return real
