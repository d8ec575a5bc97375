"""`wlock serve`: a read-only Hub endpoint backed by this node's cache.

The Hub emulator's server (wlock.hubserver.server) over a store that reads the cache
instead of a fixture store: other nodes set `HF_ENDPOINT` to it and run `wlock sync` or plain
huggingface_hub. It serves exactly the revisions the given locks pin, and only those the
cache holds complete with verified bytes (`wlock check` at start): any other repo, revision
or file is a 404 with the Hub's error headers. The listing of a served revision is the
lock's files (a lock's include/exclude selection, not the whole commit).

Bytes are checked again while they are served (BlobGuard): a blob that rots or is
overwritten after the start is never sent whole under its name.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from wlock.cache.check import check_cache
from wlock.cache.layout import RepoPaths
from wlock.hashing import hash_file, new_digest
from wlock.hubserver.store import DEFAULT_DATE, Commit, Repo, StoredFile, git_blob_id, lfs_pointer
from wlock.lock.lockfile import is_commit
from wlock.models import Lock, LockedRepo


@dataclass
class CacheStore:
    """A RepoStore (wlock.hubserver.store) over a Hugging Face cache."""

    repos: dict[tuple[str, str], Repo] = field(default_factory=dict)
    objects: dict[str, Path] = field(default_factory=dict)  # etag -> blob file
    skipped: list[str] = field(default_factory=list)  # why a locked repo is not served
    guard: BlobGuard = field(default_factory=lambda: BlobGuard())

    @classmethod
    def from_locks(
        cls, locks: Iterable[Lock], cache_dir: Path, *, jobs: int | None = None,
        on_hashed: Callable[[int], None] | None = None,
    ) -> CacheStore:
        store = cls()
        for lock in locks:
            report = check_cache(lock, cache_dir, jobs=jobs, on_hashed=on_hashed)
            problems: dict[tuple[str, str], int] = {}
            for p in report.problems:
                problems[(p.repo_kind, p.repo_id)] = problems.get((p.repo_kind, p.repo_id), 0) + 1
            for repo in lock.repos:
                if count := problems.get(repo.key):
                    store.skipped.append(
                        f"{repo.kind} {repo.id} @ {repo.revision[:7]}: {count} file(s) missing "
                        "or wrong in the cache (run `wlock sync`, then `wlock check`)")
                else:
                    store.add(repo, RepoPaths.of(cache_dir, repo))
        return store

    def add(self, locked: LockedRepo, paths: RepoPaths) -> None:
        files = {}
        for f in locked.files:
            if f.sha256 is not None:  # LFS: served from /cdn/, named by its sha256
                stored = StoredFile(path=f.path, size=f.size, sha256=f.sha256, lfs=True,
                                    blob_id=git_blob_id(lfs_pointer(f.sha256, f.size)))
            else:  # kept in git: the emulator's store keys its bytes by this field
                stored = StoredFile(path=f.path, size=f.size, sha256=f.etag, lfs=False,
                                    blob_id=f.etag)
            files[f.path] = stored
            self.objects[f.etag] = paths.blob(f.etag)
            self.guard.expect(f.etag, f.hash_kind, f.size, paths.blob(f.etag))
        commit = Commit(sha=locked.revision, parent=None, message="", date=DEFAULT_DATE,
                        files=files)
        key = (locked.kind, locked.id.lower())  # the Hub compares ids case-insensitively
        repo = self.repos.get(key) or Repo(kind=locked.kind, id=locked.id, branches={},
                                           tags={}, commits={})
        branches = dict(repo.branches)
        if not is_commit(locked.requested):  # the first lock to pin a branch or tag names it
            branches.setdefault(locked.requested, locked.revision)
        self.repos[key] = replace(repo, branches=branches,
                                  commits={**repo.commits, locked.revision: commit})

    # -- RepoStore ------------------------------------------------------------------------

    def get_repo(self, kind: str, repo_id: str) -> Repo | None:
        return self.repos.get((kind, repo_id.lower()))

    def renamed(self, kind: str, repo_id: str) -> str | None:
        return None

    def object_path(self, sha256: str) -> Path | None:
        return self.objects.get(sha256)


_log = logging.getLogger("wlock.serve")
Signature = tuple[int, int, int, int]


class BlobGuard:
    """What the server promises about the bytes it sends: never a complete response whose
    bytes do not hash to the blob's name.

    A whole-file GET is hashed as it streams, and its last chunk is held back until the
    hash matches; on a mismatch the connection is closed first, so the client sees a short
    body (which huggingface_hub and wlock refuse), never a complete wrong file. A range (how
    hf_transfer reads) is served from a blob verified whole, once per version of the file
    (inode, size, mtime, ctime): a blob rewritten in place after the start is hashed again
    before its next range. A blob found wrong is refused (404) while it stays as it is;
    replaced (`wlock sync --verify`, which `wlock check` asks for), it is judged anew.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._expected: dict[str, tuple[str, int]] = {}  # key -> (hash kind, size)
        self._good: dict[str, Signature] = {}  # verified at start, or since
        self._bad: dict[str, tuple[Signature, str]] = {}  # refused, and why

    @staticmethod
    def signature(path: Path) -> Signature:
        st = os.stat(path)
        return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def expect(self, key: str, kind: str, size: int, path: Path) -> None:
        """`key`'s bytes must hash to `key` (a blob verified by the start-up check)."""
        with self._lock:
            self._expected[key] = (kind, size)
            with contextlib.suppress(OSError):
                self._good[key] = self.signature(path)

    def refused(self, key: str, path: Path, *, verify: bool = True) -> str | None:
        """Why `key` is not served now, or None. With `verify` (a range), the blob must be
        verified in its current version, and is hashed here when it changed since; without
        (a whole-file GET, hashed as it streams), it is refused only when found wrong before
        and still the same file."""
        if key not in self._expected:
            return None
        try:
            now = self.signature(path)
        except OSError as e:
            return f"cannot read it: {e.strerror or e}"
        with self._lock:
            bad = self._bad.get(key)
            if bad is not None and bad[0] == now:
                return bad[1]
            if not verify or self._good.get(key) == now:
                return None
        kind, size = self._expected[key]
        actual = hash_file(path, kind)
        if actual != key or now[1] != size:
            return self.quarantine(key, path, f"its bytes hash to {actual}, not {key}")
        with self._lock:
            self._good[key] = now
            self._bad.pop(key, None)
        return None

    def hasher(self, key: str) -> Any:
        """A running hash for streaming `key` whole, or None for a file not guarded."""
        expected = self._expected.get(key)
        return None if expected is None else new_digest(expected[0], expected[1])

    def finished(self, key: str, path: Path, digest: str) -> bool:
        """After streaming all but the last chunk (and hashing all of it): may it be sent?"""
        if digest == key:
            return True
        self.quarantine(key, path, f"its bytes hash to {digest}, not {key} (changed while "
                        "served)")
        return False

    def quarantine(self, key: str, path: Path, why: str) -> str:
        try:
            now = self.signature(path)
        except OSError:
            now = (0, 0, 0, 0)
        reason = f"blob {path} is not served: {why}; run `wlock check`, then `wlock sync " \
            "--verify` to replace it"
        with self._lock:
            self._bad[key] = (now, reason)
            self._good.pop(key, None)
        _log.error(reason)
        return reason
