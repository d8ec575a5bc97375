"""The Python API for code that loads weights: `wlock.revision()`, `wlock.snapshot_path()`
and `wlock.locked()`.

    from transformers import AutoModel
    from datasets import load_dataset
    import wlock

    model = AutoModel.from_pretrained("acme/tiny-bert", revision=wlock.revision("acme/tiny-bert"))
    data = load_dataset(str(wlock.snapshot_path("acme/gsm-mini")))   # works offline

The lock is found through WLOCK_LOCK (set by `wlock run`), else as the nearest weights.lock
at or above the current folder, else at or above the folder of the script that asks. It is
parsed once per process and re-read if it changes. Nothing here imports huggingface_hub.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

from wlock.errors import InvalidFileError, WlockError
from wlock.lock.lockfile import LOCK_NAME, read_lock
from wlock.models import Lock, LockedRepo, RepoKind

LOCK_ENV = "WLOCK_LOCK"

_cache: dict[Path, tuple[tuple[int, int], Lock]] = {}
_cache_lock = threading.Lock()


class NotLockedError(WlockError, LookupError):
    """The repo is not in weights.lock."""


def find_lock(start: Path | None = None) -> Path:
    """WLOCK_LOCK, else the nearest weights.lock at or above `start` (default: the cwd),
    else at or above the folder of the script that called into wlock (a training script
    started from another folder still finds its project's lock)."""
    env = os.environ.get(LOCK_ENV)
    if env:
        return Path(env)
    here = (start or Path.cwd()).resolve()
    starts = [here] if start is not None else [here, *_caller_folder()]
    for origin in starts:
        for folder in (origin, *origin.parents):
            if (folder / LOCK_NAME).is_file():
                return folder / LOCK_NAME
    where = " or ".join(str(s) for s in starts)
    raise InvalidFileError(
        LOCK_NAME, f"not found in {where} or any parent folder, and {LOCK_ENV} is not set",
        hint="Run `wlock lock` in the project, or run your program with `wlock run -- …`.",
    )


def _caller_folder() -> list[Path]:
    """The folder of the first caller outside wlock, when it is a file."""
    package = str(Path(__file__).resolve().parent)
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(package) and not name.startswith("<"):
            return [Path(name).resolve().parent]
        frame = frame.f_back  # type: ignore[assignment]
    return []


def load_lock(path: Path | None = None) -> Lock:
    """The parsed lock, cached per path while its mtime and size are unchanged."""
    path = (path or find_lock()).resolve()
    st = path.stat()
    stamp = (st.st_mtime_ns, st.st_size)
    with _cache_lock:
        hit = _cache.get(path)
        if hit and hit[0] == stamp:
            return hit[1]
    lock = read_lock(path)
    with _cache_lock:
        _cache[path] = (stamp, lock)
    return lock


def locked(repo_id: str, *, kind: RepoKind | None = None, lock: Path | None = None) -> LockedRepo:
    """The lock entry of `repo_id` (a model, or a dataset; pass `kind` when both exist),
    matched without regard to case, as the Hub matches ids.

    Raises NotLockedError when the repo is not in the lock.
    """
    source = load_lock(lock)
    # The Hub treats `Org/Name` and `org/name` as one repo; the lock holds each id once,
    # compared the same way (lockfile.read_lock refuses case-folded duplicates).
    folded = repo_id.lower()
    matches = [r for r in source.repos
               if r.id.lower() == folded and (kind is None or r.kind == kind)]
    if not matches:
        known = ", ".join(sorted({r.id for r in source.repos})) or "(none)"
        what = f"{kind} {repo_id!r}" if kind else repr(repo_id)
        raise NotLockedError(
            f"{what} is not in {lock or find_lock()}",
            hint=f"Add it with `wlock add {repo_id}` (which locks it). Locked: {known}.",
        )
    if len(matches) > 1:
        raise NotLockedError(
            f"{repo_id!r} is locked both as a model and as a dataset",
            hint='Say which: wlock.revision(id, kind="model") or kind="dataset".',
        )
    return matches[0]


def revision(repo_id: str, *, kind: RepoKind | None = None, lock: Path | None = None) -> str:
    """The 40-hex commit weights.lock pins `repo_id` to. Raises NotLockedError if absent."""
    return locked(repo_id, kind=kind, lock=lock).revision


def snapshot_path(repo_id: str, *, kind: RepoKind | None = None, lock: Path | None = None,
                  cache_dir: Path | None = None) -> Path:
    """The local folder of the commit weights.lock pins `repo_id` to, in the Hugging Face
    cache (HF_HUB_CACHE, else $HF_HOME/hub; under `wlock run`, the project's own view):
    for loaders that take a folder, as `load_dataset(str(path))` or
    `from_pretrained(path)`, which then need no network and no revision.

    Raises NotLockedError when the repo is not in the lock, and NotSyncedError when the
    cache does not hold that commit (run `wlock sync`).
    """
    from wlock.cache.layout import default_cache_dir, repo_folder_name

    entry = locked(repo_id, kind=kind, lock=lock)
    cache = cache_dir or default_cache_dir()
    path = cache / repo_folder_name(entry.kind, entry.id) / "snapshots" / entry.revision
    if not path.is_dir():
        raise NotSyncedError(
            f"{entry.kind} {entry.id} @ {entry.revision[:7]} is not in the cache at {cache}",
            hint="Run `wlock sync` (with the same HF_HOME or --cache-dir) first.")
    return path


class NotSyncedError(WlockError, LookupError):
    """The locked commit is not in the cache."""
