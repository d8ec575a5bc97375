"""`wlock export`: one locked revision as plain files in a folder (`/dev/shm/model`), from the
cache, without the network.

Each file is a hard link to its blob where the folder is on the cache's filesystem, a
reflink where the filesystem shares blocks, else a kernel-side copy; never a symlink (a
loader given the folder, a container mount, `rsync` all see ordinary files). Each is written
to a temp name, hashed against the lock, and only then renamed into place. A file already
there with the blob's size and modification time (which export gives every file it writes)
is left alone, as rsync's quick check does; `verify` hashes those too.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from stat import S_ISREG

from wlock.cache.layout import RepoPaths
from wlock.errors import CheckFailedError, LocalError
from wlock.fastcopy import clone_or_copy, link_or_copy
from wlock.hashing import hash_file
from wlock.models import LockedFile, LockedRepo

TEMP_SUFFIX = ".wlock-export"


@dataclass
class ExportResult:
    dest: str
    written: int = 0
    written_bytes: int = 0
    unchanged: int = 0
    how: dict[str, int] = field(default_factory=dict)  # "link" / "reflink" / "copy" -> files
    extra: list[str] = field(default_factory=list)  # in dest, not in the lock
    deleted: list[str] = field(default_factory=list)


def export_repo(
    repo: LockedRepo, cache_dir: Path, dest: Path, *, copy: bool = False, delete: bool = False,
    verify: bool = False, jobs: int = 4, on_bytes: Callable[[str, int], None] | None = None,
) -> ExportResult:
    """Make `dest` hold exactly the locked files of `repo`, from the cache.

    Raises CheckFailedError (exit 1) when the cache lacks a file or holds wrong bytes (run
    `wlock sync`), LocalError (exit 6) when `dest` cannot be written. Files in `dest` the
    lock does not name are reported, and removed only with `delete`."""
    paths = RepoPaths.of(cache_dir, repo)
    missing = []
    for f in repo.files:
        try:
            if os.stat(paths.blob(f.etag)).st_size != f.size:
                missing.append(f"{f.path} (wrong size in the cache)")
        except OSError:
            missing.append(f.path)
    if missing:
        raise CheckFailedError(
            f"{repo.kind} {repo.id}@{repo.revision[:7]}: {len(missing)} locked files are not in "
            f"the cache at {cache_dir}: " + ", ".join(missing[:5])
            + (f" and {len(missing) - 5} more" if len(missing) > 5 else ""),
            hint="Run `wlock sync` first (it can restore from an archive without the Hub).")
    result = ExportResult(dest=str(dest))
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise _local(e, dest) from e
    wrong: list[str] = []

    def one(f: LockedFile) -> tuple[LockedFile, str | None]:
        blob = paths.blob(f.etag)
        target = dest / f.path
        if _unchanged(blob, target, f, verify):
            if on_bytes:
                on_bytes(f.path, f.size)
            return f, None
        target.parent.mkdir(parents=True, exist_ok=True)
        temp = target.with_name(f".{target.name}.{os.getpid()}{TEMP_SUFFIX}")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        try:
            how = clone_or_copy(blob, temp) if copy else link_or_copy(blob, temp)
            if hash_file(temp, f.hash_kind) != f.etag:
                wrong.append(f.path)
                return f, None
            if how != "link":  # a link already has the blob's time; give a copy the same
                st = os.stat(blob)
                os.utime(temp, ns=(st.st_atime_ns, st.st_mtime_ns))
            os.replace(temp, target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
        if on_bytes:
            on_bytes(f.path, f.size)
        return f, how

    try:
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            for f, how in pool.map(one, sorted(repo.files, key=lambda f: -f.size)):
                if how is None:
                    if f.path not in wrong:
                        result.unchanged += 1
                    continue
                result.written += 1
                result.written_bytes += f.size
                result.how[how] = result.how.get(how, 0) + 1
    except OSError as e:
        raise _local(e, dest) from e
    if wrong:
        raise CheckFailedError(
            f"{repo.kind} {repo.id}: {len(wrong)} blobs in the cache have wrong bytes and were "
            "not exported: " + ", ".join(sorted(wrong)[:5]),
            hint="Run `wlock sync --verify` to repair the cache, then export again.")

    locked = {f.path for f in repo.files}
    for root, _, names in os.walk(dest):
        for name in names:
            rel = os.path.relpath(os.path.join(root, name), dest)
            if rel not in locked:
                result.extra.append(rel)
    result.extra.sort()
    if delete:
        for rel in result.extra:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(dest / rel)
            result.deleted.append(rel)
        for root, _, _ in os.walk(dest, topdown=False):
            if root != str(dest) and not os.listdir(root):
                os.rmdir(root)
    return result


def _unchanged(blob: Path, target: Path, f: LockedFile, verify: bool) -> bool:
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return False
    if not S_ISREG(st.st_mode) or st.st_size != f.size:  # lstat: a symlink is not regular
        return False
    b = os.stat(blob)
    if (st.st_dev, st.st_ino) == (b.st_dev, b.st_ino):
        return not verify or hash_file(target, f.hash_kind) == f.etag
    if st.st_mtime_ns != b.st_mtime_ns:
        return False
    return not verify or hash_file(target, f.hash_kind) == f.etag


def _local(e: OSError, dest: Path) -> LocalError:
    return LocalError(f"cannot export into {dest}: {e.strerror or e}"
                      + (f" ({e.filename})" if e.filename else ""),
                      hint="Check that the folder is writable and has room for the files.")
