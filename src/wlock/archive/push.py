"""`wlock archive`: the locked set, from the cache into the archive, verified on the way in.

What the archive holds is found out with one listing, not a request per file, so archiving
again uploads nothing and costs a listing. Each blob is uploaded once whatever revisions use
it; a revision's manifest is written once all its blobs are in.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from concurrent.futures import CancelledError
from dataclasses import dataclass, field
from pathlib import Path

from wlock.archive.store import Archive, WrongBytes
from wlock.cache.layout import RepoPaths, repo_folder_name
from wlock.cancel import each
from wlock.errors import WlockError
from wlock.models import Lock, LockedFile, LockedRepo

MANIFEST_SCHEMA = 1


def revision_name(repo: LockedRepo) -> str:
    """Where a revision's manifest lives in the archive."""
    return f"revisions/{repo_folder_name(repo.kind, repo.id)}/{repo.revision}.json"


def revision_document(repo: LockedRepo) -> str:
    """A revision's files, sizes and hashes: what the archive must hold for it, readable
    without the project's lock."""
    files = []
    for f in repo.files:
        entry: dict[str, object] = {"path": f.path, "size": f.size}
        entry[f.hash_kind.replace("-", "_")] = f.etag
        files.append(entry)
    return json.dumps({"schema": MANIFEST_SCHEMA, "kind": repo.kind, "id": repo.id,
                       "requested": repo.requested, "revision": repo.revision,
                       "files": files}, indent=1) + "\n"


@dataclass
class ArchiveResult:
    url: str
    uploaded_files: int = 0
    uploaded_bytes: int = 0
    present_files: int = 0  # already in the archive
    manifests_written: int = 0
    # Blobs the archive needs that the cache lacks, and cache blobs with wrong bytes (never
    # uploaded): "<id>/<path>" each.
    missing: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)
    complete: list[str] = field(default_factory=list)  # "<kind> <id>@<commit>" fully archived


def plan_archive(lock: Lock, archive: Archive) -> tuple[dict[str, tuple[LockedRepo, LockedFile]],
                                                        int]:
    """The blobs to upload (etag -> the first repo and file naming it), and how many of the
    locked blobs the archive already holds; one listing of the archive."""
    there = archive.listing("blobs")
    todo: dict[str, tuple[LockedRepo, LockedFile]] = {}
    present: set[str] = set()
    for repo in lock.repos:
        for f in repo.files:
            if there.get(f.etag) == f.size:
                present.add(f.etag)
            else:
                todo.setdefault(f.etag, (repo, f))
    return todo, len(present)


def archive_lock(
    lock: Lock, cache_dir: Path, archive: Archive, *, jobs: int = 4,
    plan: tuple[dict[str, tuple[LockedRepo, LockedFile]], int] | None = None,
    on_bytes: Callable[[str, int], None] | None = None,
) -> ArchiveResult:
    """Upload every locked blob the archive lacks (`plan`, else `plan_archive`), then each
    complete revision's manifest.

    Raises ArchiveError (exit 5) when the archive cannot be listed or written; blobs missing
    from the cache or with wrong bytes there are reported in the result, not uploaded."""
    result = ArchiveResult(url=archive.url)
    todo, result.present_files = plan or plan_archive(lock, archive)
    failed: set[str] = set()

    stop = threading.Event()  # the archive itself failed: start no more uploads

    def upload(repo: LockedRepo, f: LockedFile) -> None:
        if stop.is_set():
            raise CancelledError
        source = RepoPaths.of(cache_dir, repo).blob(f.etag)
        archive.put_blob(f.etag, source, f.hash_kind, f.size)
        if on_bytes:
            on_bytes(f"{repo.id}/{f.path}", f.size)

    errors: list[WlockError] = []
    # Daemon threads (cancel.each): an upload blocked on a stalled object store must not
    # hold Ctrl-C; an upload not completed is never visible, in a folder or an object store.
    order = sorted(todo.items(), key=lambda t: -t[1][1].size)
    for (etag, (repo, f)), error in each(lambda t: upload(*t[1]), order, jobs):
        if error is None:
            result.uploaded_files += 1
            result.uploaded_bytes += f.size
        elif isinstance(error, CancelledError):
            failed.add(etag)
        elif isinstance(error, FileNotFoundError):
            failed.add(etag)
            result.missing.append(f"{repo.id}/{f.path}")
        elif isinstance(error, WrongBytes):
            failed.add(etag)
            result.wrong.append(f"{repo.id}/{f.path} (expected {f.hash_kind} {f.etag}, "
                                f"{f.size} bytes; got {error.actual}, {error.size} bytes)")
        elif isinstance(error, WlockError):
            failed.add(etag)
            errors.append(error)
            stop.set()
        else:
            raise error
    if errors:
        raise errors[0]

    written = archive.listing("revisions")
    for repo in lock.repos:
        if any(f.etag in failed for f in repo.files):
            continue
        name = revision_name(repo)
        document = revision_document(repo)
        # Same name, same size: the same document (a revision's files never change).
        if written.get(name.removeprefix("revisions/")) != len(document.encode()):
            archive.put_text(name, document)
            result.manifests_written += 1
        result.complete.append(f"{repo.kind} {repo.id}@{repo.revision}")
    return result
