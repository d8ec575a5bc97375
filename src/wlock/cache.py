"""The Hugging Face cache layout, written exactly as huggingface_hub writes it.

    <cache>/{models|datasets}--<org>--<name>/
        blobs/<etag>                      the bytes (sha256 for LFS/Xet, git blob id otherwise)
        snapshots/<commit>/<path>         relative symlink to ../../blobs/<etag> (one ../ more
                                          per subfolder)
        refs/<branch or tag>              the commit, no trailing newline

huggingface_hub 2.x may also keep a cache-wide store (`<cache>/blobs/<2 hex>/<xet hash>`) with
the per-repo `blobs/<etag>` as symlinks into it; we read such blobs through the link and
write plain files, which huggingface_hub reads either way.

Every write is atomic (a temp name unique to this host and process, then rename), so several
processes on several nodes can sync one cache at once without relying on `flock`, which is a
no-op on some network filesystems (huggingface_hub reached the same conclusion for Lustre/NFS:
huggingface/huggingface_hub#2086). We never write `trees/<commit>.json`: huggingface_hub
trusts it forever, and a lock often holds a filtered subset of a commit.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

from wlock.atomic import HOST, temp_path_for
from wlock.lockfile import is_commit
from wlock.models import LockedFile, LockedRepo, RepoKind

TEMP_SUFFIX = ".wlock-incomplete"
LINK_TEMP_SUFFIX = ".wlock-tmp"
# A temp file from another host is only removed once it is this old: we cannot tell whether
# its writer is alive, and removing a live writer's file would only cost it a retry.
FOREIGN_TEMP_AGE = 6 * 3600


def repo_folder_name(kind: RepoKind, repo_id: str) -> str:
    return f"{kind}s--" + "--".join(repo_id.split("/"))


@dataclass(frozen=True, slots=True)
class RepoPaths:
    root: Path

    @classmethod
    def of(cls, cache_dir: Path, repo: LockedRepo) -> RepoPaths:
        return cls(cache_dir / repo_folder_name(repo.kind, repo.id))

    @property
    def blobs(self) -> Path:
        return self.root / "blobs"

    def blob(self, etag: str) -> Path:
        return self.root / "blobs" / etag

    def snapshot(self, revision: str) -> Path:
        return self.root / "snapshots" / revision

    def link(self, revision: str, path: str) -> Path:
        return self.root / "snapshots" / revision / path

    def ref(self, name: str) -> Path:
        return self.root / "refs" / name


def link_target(path: str, etag: str) -> str:
    """What `snapshots/<commit>/<path>` points at: `../../blobs/<etag>`, one `../` per folder."""
    return "../" * (path.count("/") + 2) + f"blobs/{etag}"


def follows_ref(repo: LockedRepo) -> bool:
    """A branch or tag gets a refs/ file; a pinned commit does not (as huggingface_hub)."""
    return not is_commit(repo.requested)


def temp_blob_path(paths: RepoPaths, etag: str) -> Path:
    return temp_path_for(paths.blob(etag), TEMP_SUFFIX)


def publish_blob(tmp: Path, blob: Path) -> None:
    """Move a verified temp file into place; a concurrent writer's identical bytes may win."""
    os.chmod(tmp, 0o644)
    os.replace(tmp, blob)


def write_empty_blob(paths: RepoPaths, file: LockedFile) -> None:
    """Zero-byte files are never fetched (hf_transfer fails on them with 416)."""
    tmp = temp_blob_path(paths, file.etag)
    tmp.touch()
    publish_blob(tmp, paths.blob(file.etag))


def ensure_link(paths: RepoPaths, revision: str, file: LockedFile) -> bool:
    """Point snapshots/<revision>/<path> at its blob; True when something was changed."""
    link = paths.link(revision, file.path)
    target = link_target(file.path, file.etag)
    try:
        if os.readlink(link) == target:
            return False
    except FileNotFoundError:
        pass
    except OSError:
        # A regular file or folder where the link belongs (an older copy): replaced below.
        if link.is_dir() and not link.is_symlink():
            raise
    link.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path_for(link, LINK_TEMP_SUFFIX)
    os.symlink(target, tmp)
    os.replace(tmp, link)
    return True


def ensure_ref(paths: RepoPaths, name: str, revision: str) -> bool:
    ref = paths.ref(name)
    try:
        if ref.read_text(encoding="utf-8") == revision:
            return False
    except (FileNotFoundError, NotADirectoryError):
        pass
    ref.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path_for(ref, LINK_TEMP_SUFFIX)
    tmp.write_text(revision, encoding="utf-8")
    os.replace(tmp, ref)
    return True


def clean_stale_temps(paths: RepoPaths, revision: str) -> int:
    """Remove temp files left by killed syncs (blobs, and links or refs caught mid-rename):
    this host's when their process is gone, other hosts' when old. Returns how many."""
    removed = 0
    now = time.time()
    folders = [paths.blobs, paths.snapshot(revision), paths.root / "refs"]
    for folder in folders:
        for dirpath, _, names in os.walk(folder):
            for name in names:
                if not name.endswith((TEMP_SUFFIX, LINK_TEMP_SUFFIX)):
                    continue
                path = os.path.join(dirpath, name)
                if _stale(name, path, now):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)
                        removed += 1
    return removed


def _stale(name: str, path: str, now: float) -> bool:
    # .<name>.<host>.<pid>.<random>.<suffix>: <name> may hold dots, the rest cannot.
    parts = name.rsplit(".", 4)
    if len(parts) == 5 and parts[1] == HOST and parts[2].isdigit():
        return not _alive(int(parts[2]))
    try:
        return now - os.lstat(path).st_mtime > FOREIGN_TEMP_AGE
    except OSError:
        return False


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
