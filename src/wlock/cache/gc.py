"""`wlock gc`: free the cache of the revisions no kept lock uses.

Many projects share one HF_HOME, so what to keep is the union of every lock given (this
project's and `--keep-lock` others), plus, if asked, revisions used recently. The deletion
itself is huggingface_hub's own plan (`scan_cache_dir().delete_revisions()`), which removes a
blob only when no remaining revision links to it, so blobs shared with a kept revision stay.

One trap of that plan is handled here: it deletes a commit hash in every repo that has it,
and forks share commits. A hash that a kept revision of any repo uses is never passed to it.
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from wlock.models import Lock


@dataclass(frozen=True, slots=True)
class Removal:
    kind: str
    id: str
    revision: str
    refs: tuple[str, ...]
    files: int
    last_used: float  # the revision's snapshot, last modified (seconds since the epoch)


@dataclass
class GcPlan:
    cache_dir: str
    remove: list[Removal] = field(default_factory=list)
    kept: int = 0  # revisions kept
    freed_bytes: int = 0  # blobs that only removed revisions use
    # A commit of a repo that no lock uses, kept because a kept revision of another repo (a
    # fork) has the same hash: "<kind> <id>@<commit>".
    shared: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    _hashes: tuple[str, ...] = ()


def plan_gc(cache_dir: Path, locks: list[Lock], *, keep_newer_days: float | None = None) -> GcPlan:
    """What `gc` would remove from `cache_dir`, keeping every revision any of `locks` pins
    (and, with `keep_newer_days`, any revision whose snapshot changed more recently)."""
    from huggingface_hub import scan_cache_dir

    keep = {(r.kind, r.id.lower(), r.revision) for lock in locks for r in lock.repos}
    plan = GcPlan(cache_dir=str(cache_dir))
    if not cache_dir.is_dir():
        return plan
    scan = scan_cache_dir(cache_dir)
    plan.warnings = [str(w) for w in scan.warnings]
    cutoff = time.time() - keep_newer_days * 86400 if keep_newer_days is not None else None
    kept_hashes: set[str] = set()
    candidates = []
    for repo in scan.repos:
        for rev in repo.revisions:
            kept = (repo.repo_type, repo.repo_id.lower(), rev.commit_hash) in keep or (
                cutoff is not None and rev.last_modified >= cutoff)
            if kept:
                plan.kept += 1
                kept_hashes.add(rev.commit_hash)
            else:
                candidates.append((repo, rev))
    for repo, rev in candidates:
        if rev.commit_hash in kept_hashes:
            plan.shared.append(f"{repo.repo_type} {repo.repo_id}@{rev.commit_hash}")
            plan.kept += 1
            continue
        plan.remove.append(Removal(
            kind=repo.repo_type, id=repo.repo_id, revision=rev.commit_hash,
            refs=tuple(sorted(rev.refs)), files=rev.nb_files, last_used=rev.last_modified))
    plan._hashes = tuple(sorted({r.revision for r in plan.remove}))
    if plan._hashes:
        strategy = scan.delete_revisions(*plan._hashes)
        # huggingface_hub's figure counts blobs only; a repo it removes whole takes its refs
        # and .no_exist/ with it, and a removed revision its refs: counted, so the report is
        # what leaves the disk (gc said 40 bytes less per ref).
        whole = {Path(p) for p in strategy.repos}
        refs = sum(_file_bytes(Path(p)) for p in strategy.refs
                   if not any(Path(p).is_relative_to(r) for r in whole))
        plan.freed_bytes = strategy.expected_freed_size + refs + sum(
            _file_bytes(r) - _file_bytes(r / "blobs") for r in whole)
    return plan


def _file_bytes(path: Path) -> int:
    """Bytes of the regular files at or under `path` (links neither followed nor counted)."""
    if path.is_file() and not path.is_symlink():
        return path.stat().st_size
    total = 0
    for folder, _, names in os.walk(path):
        for name in names:
            st = os.lstat(os.path.join(folder, name))
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
    return total


def execute_gc(plan: GcPlan) -> int:
    """Remove what `plan` lists; returns the bytes freed. Scans the cache again first, so a
    revision another process completed meanwhile is judged as it is now."""
    from huggingface_hub import scan_cache_dir

    if not plan._hashes:
        return 0
    strategy = scan_cache_dir(Path(plan.cache_dir)).delete_revisions(*plan._hashes)
    # What left the disk, measured: the repo folders it touches, before and after.
    touched = {Path(p).parent.parent for p in strategy.snapshots} | {
        Path(p) for p in strategy.repos}
    before = sum(_file_bytes(r) for r in touched)
    try:
        strategy.execute()
    except OSError as e:  # a read-only or failing cache: a sentence, not a traceback
        from wlock.errors import LocalError

        raise LocalError(
            f"cannot remove from the cache at {plan.cache_dir}: {e.strerror or e}",
            hint="Check that the cache is writable by you (a read-only mount, or another "
            "user's files); what was removed before this stays removed, and `wlock gc` "
            "again finishes the rest.") from e
    return before - sum(_file_bytes(r) for r in touched if r.exists())
