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

Nothing is written or read through a link the cache does not own: every folder from the repo
folder down is checked to be a real folder (a link planted at `snapshots/<commit>/onnx` would
otherwise make a sync write outside the cache), refs are opened without following links, and
a fresh snapshot is built in a staging folder and renamed into place whole, so a killed sync
never leaves a `snapshots/<commit>/` that huggingface_hub would take as complete.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from wlock.atomic import MACHINE, temp_name, temp_path_for
from wlock.cache.leases import LEASE, LEASES, alive, flock_works, lock_free, try_flock
from wlock.errors import UnsafeCacheError
from wlock.lock.lockfile import is_commit
from wlock.models import LockedFile, LockedRepo, RepoKind

TEMP_SUFFIX = ".wlock-incomplete"
LINK_TEMP_SUFFIX = ".wlock-tmp"
# Older wlock built snapshots in this one folder, shared by every sync of the repo; its
# leftovers are still cleaned (RepoPaths.staging says where new ones are built, and why).
LEGACY_STAGING = ".wlock-staging"



def default_cache_dir() -> Path:
    """HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub, as huggingface_hub."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface"
    )
    return Path(home).expanduser() / "hub"


def cache_dir_problem(cache_dir: Path) -> str | None:
    """Why `cache_dir` cannot be a cache folder (its nearest existing part is a file, not a
    folder), or None. Links are followed: a cache on a linked volume is a folder. Anything
    else (no permission, a missing folder) is left to the command, which says it better."""
    for part in (cache_dir, *cache_dir.parents):
        try:
            mode = part.stat().st_mode
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError:
            return None
        if stat.S_ISDIR(mode):
            return None
        return f"{part} is {_what(mode)}" if part == cache_dir else (
            f"{part}, on its way, is {_what(mode)}")
    return None


def repo_folder_name(kind: RepoKind, repo_id: str) -> str:
    return f"{kind}s--" + "--".join(repo_id.split("/"))


@dataclass(frozen=True, slots=True)
class RepoPaths:
    cache_dir: Path
    root: Path
    # Folders already checked to be real folders; a RepoPaths lives for one command.
    verified: set[str] = field(default_factory=set, compare=False, repr=False)
    # `blobs/` and the blobs' lock folder as strings, for the steps taken once per file: a
    # pathlib join costs more than the system call it names (a small file's sync made ten).
    blobs_dir: str = field(init=False, compare=False, repr=False)
    locks_dir: str = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "blobs_dir", os.path.join(self.root, "blobs"))
        object.__setattr__(self, "locks_dir",
                           os.path.join(self.cache_dir, ".locks", self.root.name))

    @classmethod
    def of(cls, cache_dir: Path, repo: LockedRepo) -> RepoPaths:
        return cls(cache_dir, cache_dir / repo_folder_name(repo.kind, repo.id))

    @property
    def blobs(self) -> Path:
        return self.root / "blobs"

    def blob(self, etag: str) -> Path:
        return self.root / "blobs" / etag

    def blob_file(self, etag: str) -> str:
        """`blob(etag)`, as a string."""
        return f"{self.blobs_dir}/{etag}"

    def snapshot(self, revision: str) -> Path:
        return self.root / "snapshots" / revision

    def link(self, revision: str, path: str) -> Path:
        return self.root / "snapshots" / revision / path

    def ref(self, name: str) -> Path:
        return self.root / "refs" / name

    def staging(self, revision: str) -> Path:
        """Where this sync builds `snapshots/<revision>`: `<revision>` inside a folder of its
        own in the repo folder, `.<revision>.<writer>.wlock-tmp/`, at the depth of
        `snapshots/` (the same relative link targets work there) and out of
        huggingface_hub's cache scan. Nothing else writes in that folder and nobody removes
        the repo folder it is in: a folder shared by every sync and removed by the last
        (as `.wlock-staging/` was) raced on a network filesystem, where one node made its
        staging inside the copy another node had just removed (JuiceFS keeps a removed
        folder's entry cached for a second) and failed with "Stale file handle"."""
        return temp_path_for(self.root / revision, LINK_TEMP_SUFFIX) / revision


def folder_problem(paths: RepoPaths, folder: Path) -> str | None:
    """What is wrong on the way from the cache to `folder`: None when every existing part
    below the cache folder is a real folder (missing parts are fine), else a description
    of the link or file in the way. Touches nothing."""
    return _walk_folders(paths, folder, create=False)


def make_folder(paths: RepoPaths, folder: Path | str) -> None:
    """Create `folder` and its parents inside the cache, refusing to go through a link.

    Raises UnsafeCacheError (exit 6) naming a link or file where a folder belongs.
    """
    if str(folder) not in paths.verified:
        paths.cache_dir.mkdir(parents=True, exist_ok=True)
        _walk_folders(paths, Path(folder), create=True)


def _walk_folders(paths: RepoPaths, folder: Path, *, create: bool) -> str | None:
    """Check each part of `folder` below the cache with lstat (never following a link),
    remembering the real folders in `paths.verified`; with `create`, make missing ones and
    raise for a part that is not a folder, else describe it."""
    current = paths.cache_dir
    for part in folder.relative_to(paths.cache_dir).parts:
        current = current / part
        key = str(current)
        if key in paths.verified:
            continue
        if create:
            with contextlib.suppress(FileExistsError):
                os.mkdir(current)
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            if create:
                raise
            return None
        if not stat.S_ISDIR(mode):
            if create:
                raise UnsafeCacheError(current, _what(mode))
            return f"{current} is {_what(mode)}, where the cache needs a folder"
        paths.verified.add(key)
    return None


def _what(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISREG(mode):
        return "a file"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a socket or a pipe"


def link_target(path: str, etag: str) -> str:
    """What `snapshots/<commit>/<path>` points at: `../../blobs/<etag>`, one `../` per folder."""
    return "../" * (path.count("/") + 2) + f"blobs/{etag}"


def follows_ref(repo: LockedRepo) -> bool:
    """A branch or tag gets a refs/ file; a pinned commit does not (as huggingface_hub)."""
    return not is_commit(repo.requested)


def read_ref(paths: RepoPaths, name: str) -> str | None:
    """The commit `refs/<name>` holds, or None when it is missing or not a plain file inside
    the cache (never read through a link: a ref's content is printed in messages)."""
    ref = paths.ref(name)
    if folder_problem(paths, ref.parent) is not None:
        return None
    try:
        fd = os.open(ref, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        text = os.read(fd, 64).decode("ascii", "replace")
    finally:
        os.close(fd)
    return text if is_commit(text) else None


def describe_ref(paths: RepoPaths, name: str) -> str:
    """The commit `refs/<name>` holds, else what is there instead, in words (for a note that
    must not blame another project for a link or a file that is not a ref)."""
    if (commit := read_ref(paths, name)) is not None:
        return commit
    ref = paths.ref(name)
    if (problem := folder_problem(paths, ref.parent)) is not None:
        return problem
    if os.path.islink(ref):
        return f"{ref} is a symbolic link, which wlock does not read through"
    if not os.path.lexists(ref):
        return "no ref file"
    return f"{ref} holds no commit"


def temp_blob_path(paths: RepoPaths, etag: str) -> str:
    """Where this process writes a blob before it is verified and published."""
    return f"{paths.blobs_dir}/{temp_name(etag, TEMP_SUFFIX)}"


def publish_blob(tmp: Path | str, blob: Path | str, *, replace: bool = False) -> bool:
    """Give a verified temp file its blob name; True when ours is the one published.

    A blob another writer already published is kept, never replaced: on a network
    filesystem a replace-by-rename makes the file vanish for a moment for readers on other
    nodes (measured on JuiceFS: tens of thousands of ENOENT in seconds). So the name is
    created by a hard link, which fails when it exists. `replace` is for a blob known to be
    wrong (`sync --verify`, a wrong size): then the good bytes replace it by rename.
    """
    os.chmod(tmp, 0o644)
    if replace:
        os.replace(tmp, blob)
        return True
    try:
        os.link(tmp, blob)
        published = True
    except FileExistsError:
        published = False
    except OSError:
        # A filesystem without hard links: rename, unless the blob appeared meanwhile.
        if os.path.lexists(blob):
            published = False
        else:
            os.replace(tmp, blob)
            return True
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    return published


def write_empty_blob(paths: RepoPaths, file: LockedFile, *, replace: bool = False) -> None:
    """Zero-byte files are never fetched (hf_transfer fails on them with 416)."""
    tmp = temp_blob_path(paths, file.etag)
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
    publish_blob(tmp, paths.blob_file(file.etag), replace=replace)


def blob_lock_path(paths: RepoPaths, etag: str) -> Path:
    """huggingface_hub's own lock file for a blob (`<cache>/.locks/<repo folder>/<etag>.lock`):
    taking the same lock makes wlock and huggingface_hub downloads wait for each other."""
    return Path(_lock_file(paths, etag))


def _lock_file(paths: RepoPaths, etag: str) -> str:
    return f"{paths.locks_dir}/{etag}.lock"



@contextlib.contextmanager
def claim_blob(
    paths: RepoPaths, file: LockedFile, *, stall: float, stop: threading.Event,
    on_wait: Callable[[int], None] | None = None,
) -> Iterator[bool]:
    """Take the blob's download lock, so that syncs on several nodes download it once.

    Yields False when another writer published the blob while we waited (nothing to do),
    True when the caller should download it: with the lock held, or without it when the
    holder made no progress for `stall` seconds (a stalled or foreign node) or when the
    filesystem has no `flock`. Correctness never depends on the lock: publishing is atomic
    and never replaces a published blob; the lock only saves the bytes. While it waits,
    `on_wait(bytes)` hears how far the holder got, for the waiter's progress bar.
    """

    blob = paths.blob_file(file.etag)
    lock = _lock_file(paths, file.etag)
    fd = None
    try:
        make_folder(paths, paths.locks_dir)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o664) if flock_works(paths.locks_dir) \
            else None
    except (OSError, UnsafeCacheError):
        fd = None  # a read-only .locks or odd filesystem: proceed without the lock
    try:
        progress, moved = -1, time.monotonic()
        while fd is not None:
            if try_flock(fd) is not False:
                break  # ours, or flock not supported here
            if _published(blob, file.size):
                yield False
                return
            now = _writers_progress(paths, file.etag)
            if now != progress:
                progress, moved = now, time.monotonic()
                if on_wait:
                    on_wait(min(file.size, now * 512))
            elif time.monotonic() - moved > stall:
                break  # the holder is stuck: download alongside it
            if stop.wait(0.2):
                break
        if _published(blob, file.size):
            yield False
            return
        yield True
    finally:
        if fd is not None:
            os.close(fd)  # releases the flock


def _published(blob: Path | str, size: int) -> bool:
    # Opened, not only stat'ed: on a network filesystem this node may hold the attributes
    # of the inode from when it was another writer's growing temp file (JuiceFS caches
    # them for a second); an open revalidates them. Measured: 1 blob in 47 fetched twice
    # in a race of 8 syncs on two JuiceFS mounts without it.
    try:
        fd = os.open(blob, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    return stat.S_ISREG(st.st_mode) and st.st_size == size


def _writers_progress(paths: RepoPaths, etag: str) -> int:
    """Bytes written so far by every writer of this blob (wlock's temp files and
    huggingface_hub's `<etag>.incomplete`): allocated blocks, as downloads write sparsely."""
    total = 0
    try:
        names = os.listdir(paths.blobs)
    except OSError:
        return 0
    for name in names:
        if name.startswith((f".{etag}.", f"{etag}.incomplete")):
            with contextlib.suppress(OSError):
                total += os.stat(paths.blobs / name).st_blocks
    return total


def ensure_link(paths: RepoPaths, folder: Path, file: LockedFile, *, fresh: bool = False
                ) -> None:
    """Point `<folder>/<path>` (a snapshot, or its staging folder) at its blob. A link or
    file already there is replaced, never followed.
    `fresh`: `folder` is a staging folder this process just made, so nothing is there."""
    target = link_target(file.path, file.etag)
    if fresh:  # once per file of a new snapshot: strings, not pathlib (RepoPaths says why)
        name = f"{folder}/{file.path}"
        make_folder(paths, os.path.dirname(name))
        os.symlink(target, name)
        return
    link = folder / file.path
    make_folder(paths, link.parent)
    try:
        if os.readlink(link) == target:
            return
    except FileNotFoundError:
        pass
    except OSError:
        # A regular file where the link belongs (an older copy): replaced below.
        if stat.S_ISDIR(os.lstat(link).st_mode):
            raise UnsafeCacheError(link, "a folder", "a link to a blob") from None
    swap_link(link, target)


def swap_link(link: Path, target: str) -> None:
    """Make `link` a symlink to `target` in one rename: a reader sees the old entry or the
    new one, never none."""
    tmp = temp_path_for(link, LINK_TEMP_SUFFIX)
    os.symlink(target, tmp)
    os.replace(tmp, link)


# How long a network filesystem may answer ESTALE for a folder other nodes remove and make
# again: past its cached entry's life (JuiceFS's --entry-cache and --dir-entry-cache are 1 s
# by default, NFS's acdirmin 30 s but revalidated on ESTALE), tried again with backoff.
STALE_PATIENCE = 3.0

T = TypeVar("T")


def past_stale_handles(operation: Callable[[], T]) -> T:
    """`operation()`, tried again while a network filesystem says a folder on its way went
    stale (ESTALE: JuiceFS, NFS), as its cached entry for a folder other nodes remove and
    make again can: each try looks the path up anew. Kept for the rename of a snapshot into
    `snapshots/`; the staging folders that first met it, inside a folder every sync shared
    and the last removed, no longer exist (RepoPaths.staging)."""
    delay, deadline = 0.05, time.monotonic() + STALE_PATIENCE
    while True:
        try:
            return operation()
        except OSError as e:
            if e.errno != errno.ESTALE or time.monotonic() + delay > deadline:
                raise
            time.sleep(delay)
            delay *= 2


class SnapshotBuild:
    """`snapshots/<revision>` being made for `files`, its links added as their blobs land.

    A snapshot that does not exist yet is built in a staging folder, a link as soon as its
    blob is in (from any thread: the links overlap the downloads), and renamed into place
    whole by finish(). One that exists (another lock's subset, huggingface_hub's own
    download, a concurrent sync that won the rename) gets the missing links in place, all in
    finish(), once every blob is in. discard() drops what was built (a failed sync).
    """

    def __init__(self, paths: RepoPaths, revision: str, files: tuple[LockedFile, ...]) -> None:
        self.paths, self.revision, self.files = paths, revision, files
        self.snapshot = paths.snapshot(revision)
        self.staging: Path | None = None
        make_folder(paths, self.snapshot.parent)
        self._lease = contextlib.ExitStack()
        if not os.path.lexists(self.snapshot):
            staging = paths.staging(revision)
            os.mkdir(staging.parent)  # in the repo folder make_folder made above
            self._lease.enter_context(LEASES.hold(staging.parent))  # it may live for hours
            self.staging = staging
            try:
                os.mkdir(staging)
            except BaseException:
                self.discard()
                raise
            paths.verified.update((str(staging.parent), str(staging)))
        self._added: set[str] = set()
        self._lock = threading.Lock()

    def add(self, file: LockedFile) -> None:
        """Link `file` now when building in staging (its blob must be in)."""
        if self.staging is not None:
            ensure_link(self.paths, self.staging, file, fresh=True)
            with self._lock:
                self._added.add(file.path)

    def finish(self) -> None:
        """Link what is not linked yet and put the snapshot in place."""
        if self.staging is not None:
            for f in self.files:
                if f.path not in self._added:
                    self.add(f)
            try:
                staging = self.staging
                past_stale_handles(lambda: os.rename(staging, self.snapshot))
                self.paths.verified.add(str(self.snapshot))
                return
            except OSError as e:
                # Another sync published this snapshot first: complete it in place. Its
                # ENOTEMPTY says so even where this node cannot see the folder yet (a
                # network filesystem's cached "no such entry": seen on two JuiceFS mounts).
                if e.errno not in (errno.ENOTEMPTY, errno.EEXIST) and \
                        not os.path.lexists(self.snapshot):
                    raise
            finally:
                self.discard()
        make_folder(self.paths, self.snapshot)
        for f in self.files:
            ensure_link(self.paths, self.snapshot, f)

    def discard(self) -> None:
        if self.staging is not None:
            # The folder of this sync's own (what it built, if the rename did not take it).
            shutil.rmtree(self.staging.parent, ignore_errors=True)
        self.staging = None
        self._lease.close()


def ensure_ref(paths: RepoPaths, name: str, revision: str) -> None:
    if read_ref(paths, name) == revision:
        return
    ref = paths.ref(name)
    make_folder(paths, ref.parent)
    if os.path.isdir(ref) and not os.path.islink(ref):
        raise UnsafeCacheError(ref, "a folder", "a ref file")
    tmp = temp_path_for(ref, LINK_TEMP_SUFFIX)
    tmp.write_text(revision, encoding="utf-8")
    os.replace(tmp, ref)


def clean_stale_temps(paths: RepoPaths, revision: str, *, deep: bool = True) -> int:
    """Remove what killed syncs left (temp blobs, links or refs caught mid-rename, staging
    folders): a temp blob never while someone holds its blob's lock (every writer holds it
    while writing, where flock works); a leftover of this machine and PID namespace when its
    process is gone; any other once its lease has run out (LEASE seconds without renewal).
    Returns how many. Folders that are links are not walked. `deep=False` looks only where
    the big leftovers are (blobs/ and staging), cheap enough for a sync with nothing to do."""
    removed = 0
    now = time.time()
    legacy = paths.root / LEGACY_STAGING
    folders = [paths.blobs, legacy]
    if deep:
        folders += [paths.snapshot(revision), paths.root / "refs"]
    for entry in _leftover_candidates(paths, folders):
        if not entry.name.endswith((TEMP_SUFFIX, LINK_TEMP_SUFFIX)):
            continue
        if _stale(paths, entry.name, entry.path, now):
            with contextlib.suppress(FileNotFoundError):
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path)
                else:
                    os.unlink(entry.path)
                removed += 1
    if folder_problem(paths, legacy) is None:
        with contextlib.suppress(OSError):  # once empty (a live older sync's staging keeps it)
            os.rmdir(legacy)
    return removed


def _leftover_candidates(paths: RepoPaths, folders: list[Path]) -> Iterator[os.DirEntry[str]]:
    """The repo folder's own entries (staging folders sit there), then every entry under
    each of `folders` that is a real folder inside the cache."""
    if folder_problem(paths, paths.root) is None and os.path.isdir(paths.root):
        with os.scandir(paths.root) as entries:
            yield from list(entries)
    for folder in folders:
        if folder_problem(paths, folder) is None and os.path.isdir(folder):
            yield from _walk(str(folder))


def clean_other_repos(cache_dir: Path, skip: set[Path]) -> None:
    """clean_stale_temps (blobs/ and staging only) in every repo folder of the cache but
    `skip`: a sync that downloads anyway reclaims what dead syncs left in repos no lock of
    its own names, so a shared cache does not keep them until someone syncs those repos."""
    with contextlib.suppress(OSError), os.scandir(cache_dir) as entries:
        for entry in entries:
            root = Path(entry.path)
            if entry.name.startswith(("models--", "datasets--")) and root not in skip \
                    and entry.is_dir(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    clean_stale_temps(RepoPaths(cache_dir, root), "", deep=False)


def _walk(folder: str) -> Iterator[os.DirEntry[str]]:
    """Every entry under `folder`, streamed (a blobs/ folder of a million files is never
    held as a list); links and temp folders are not entered."""
    with os.scandir(folder) as entries:
        for entry in entries:
            yield entry
            if entry.is_dir(follow_symlinks=False) and not entry.name.endswith(
                    LINK_TEMP_SUFFIX):
                yield from _walk(entry.path)


def _stale(paths: RepoPaths, name: str, path: str, now: float) -> bool:
    """Whether the leftover `name` (`.<name>.<host>.<writer>.<random>.<suffix>`; <name> may
    hold dots, the rest cannot) belongs to nobody any more."""
    parts = name.rsplit(".", 4)
    if len(parts) == 5 and name.endswith(TEMP_SUFFIX) \
            and lock_free(blob_lock_path(paths, parts[0][1:])) is False:
        return False  # a writer holds the blob's lock
    machine, _, pid = parts[2].partition("-") if len(parts) == 5 else ("", "", "")
    if machine == MACHINE and pid.isdigit():
        return not alive(int(pid))  # this machine and PID namespace: its pid tells
    try:
        age = now - os.lstat(path).st_mtime
    except OSError:
        return False
    return age > LEASE
