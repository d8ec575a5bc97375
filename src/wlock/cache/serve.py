"""`wlock serve`: a read-only Hub endpoint backed by this node's cache.

The Hub emulator's server (wlock.hubserver.server) over a store that reads the cache
instead of a fixture store: other nodes set `HF_ENDPOINT` to it and run `wlock sync` or plain
huggingface_hub. It serves exactly the revisions the given locks pin, and only those the
cache holds complete with verified bytes (`wlock check` at start): any other repo, revision
or file is a 404 with the Hub's error headers. The listing of a served revision is the
lock's files (a lock's include/exclude selection, not the whole commit).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from wlock.cache.check import check_cache
from wlock.cache.layout import RepoPaths
from wlock.hubserver.store import DEFAULT_DATE, Commit, Repo, StoredFile, git_blob_id, lfs_pointer
from wlock.lock.lockfile import is_commit
from wlock.models import Lock, LockedRepo


@dataclass
class CacheStore:
    """A RepoStore (wlock.hubserver.store) over a Hugging Face cache."""

    repos: dict[tuple[str, str], Repo] = field(default_factory=dict)
    objects: dict[str, Path] = field(default_factory=dict)  # etag -> blob file
    skipped: list[str] = field(default_factory=list)  # why a locked repo is not served

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
