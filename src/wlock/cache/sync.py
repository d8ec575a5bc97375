"""Lock + cache -> SyncPlan -> execute. Sync never resolves: it reads the lock.

The plan is data (what is present, missing, corrupt, or only needs a link) computed with `stat`
alone, so a sync with nothing to do makes no request and returns in milliseconds. Executing it
fetches each missing blob once (claimed across processes and nodes), verifies it, publishes it
under its final name without ever replacing another writer's, links it in the snapshot's
staging folder as it lands, then puts the snapshot in place and writes the ref, in that
order: a snapshot never points at a missing or unverified blob, whatever moment a sync is
killed at.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from stat import S_ISREG
from typing import TYPE_CHECKING, Any

from wlock.cache.fetch import (
    Admit,
    Sources,
    download_all,
    local_error,
    offline_error,
)
from wlock.cache.layout import (
    RepoPaths,
    SnapshotBuild,
    clean_other_repos,
    clean_stale_temps,
    ensure_ref,
    folder_problem,
    follows_ref,
    link_target,
    make_folder,
    read_ref,
)
from wlock.errors import (
    ExitCode,
    LocalError,
    WlockError,
)
from wlock.models import Lock, LockedFile, LockedRepo, RepoSyncPlan, SyncPlan, SyncResult
from wlock.units import human_size

if TYPE_CHECKING:
    from wlock.cache.sources import BlobSource
    from wlock.ratelimit import RateBudget

DEFAULT_JOBS = 4
DEFAULT_TIMEOUT = 30.0  # seconds without a byte before a transfer is cancelled and retried


class SyncFailed(WlockError):
    """Several files failed; the exit code is the most telling of their codes. Failures with
    one cause (a dead endpoint, a stalled server, a gated repo) are reported once, with the
    files they hit."""

    def __init__(self, failures: list[WlockError]) -> None:
        codes = {f.exit_code for f in failures}
        groups: dict[str, list[WlockError]] = {}
        for failure in failures:
            if failure.cause:
                key = failure.cause
            elif failure.subject:  # the same words about another file: the same cause
                key = failure.message.replace(f"{failure.subject}: ", "", 1)
            else:
                key = failure.message
            groups.setdefault(key, []).append(failure)
        lines = []
        for key, group in groups.items():
            if len(group) == 1:
                lines.append(f"  {group[0].message}")
                continue
            names = sorted(f.subject or "?" for f in group)
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3
                                            else "")
            lines.append(f"  {key}: {len(group)} files ({shown})")
        super().__init__(f"{len(failures)} files failed:\n" + "\n".join(lines),
                         hint=failures[0].hint)
        # A refusal of the policy says most, then wrong bytes (more than a flaky network);
        # otherwise the lowest (Hub before local).
        self.exit_code = next((c for c in (ExitCode.POLICY, ExitCode.CHECK_FAILED)
                               if c in codes), min(codes))


def plan_sync(
    lock: Lock, cache_dir: Path, *, verify: bool = False, jobs: int | None = None,
    on_hashed: Callable[[int], None] | None = None,
) -> SyncPlan:
    """Compare the lock with the cache using `readlink`/`stat` only; touches nothing.

    With `verify`, every blob that looks present is also hashed (as `wlock check` does) and
    one with wrong bytes is planned as corrupt, so that executing the plan refetches it.
    """
    plan = SyncPlan(
        cache_dir=str(cache_dir), repos=tuple(_plan_repo(r, cache_dir) for r in lock.repos)
    )
    return _verified(plan, jobs, on_hashed) if verify else plan


def _verified(
    plan: SyncPlan, jobs: int | None, on_hashed: Callable[[int], None] | None
) -> SyncPlan:
    from wlock.hashing import hash_files

    blobs: dict[str, LockedFile] = {}
    for r in plan.repos:
        paths = RepoPaths.of(Path(plan.cache_dir), r.repo)
        for f in r.in_place():
            blobs.setdefault(str(paths.blob(f.etag)), f)
    items = list(blobs.items())
    digests = hash_files([(path, f.hash_kind, f.size) for path, f in items],
                         jobs=jobs, on_hashed=on_hashed)
    # Unreadable counts as wrong: refetching replaces it.
    bad = {path for (path, f), digest in zip(items, digests, strict=True) if digest != f.etag}
    if not bad:
        return plan
    repos = []
    for r in plan.repos:
        paths = RepoPaths.of(Path(plan.cache_dir), r.repo)
        wrong = tuple(f for f in r.in_place() if str(paths.blob(f.etag)) in bad)
        if not wrong:
            repos.append(r)
            continue
        moved = {f.path for f in wrong}
        link = tuple(f for f in r.link if f.path not in moved)
        # Each wrong file leaves `link` or the files in place, for `corrupt`.
        present = r.present - (len(wrong) - (len(r.link) - len(link)))
        repos.append(replace(r, corrupt=(*r.corrupt, *wrong), link=link, present=present))
    return replace(plan, repos=tuple(repos))


def _plan_repo(repo: LockedRepo, cache_dir: Path) -> RepoSyncPlan:
    paths = RepoPaths.of(cache_dir, repo)
    fetch, corrupt, link, present = _plan_files(repo, paths)
    ref = None
    if follows_ref(repo) and read_ref(paths, repo.requested) != repo.revision:
        ref = repo.requested
    return RepoSyncPlan(repo=repo, fetch=tuple(fetch), corrupt=tuple(corrupt),
                        link=tuple(link), present=present, ref=ref)


def _plan_files(repo: LockedRepo, paths: RepoPaths
                ) -> tuple[list[LockedFile], list[LockedFile], list[LockedFile], int]:
    """The files of `repo` to fetch, whose blob is corrupt, or to link only, and how many
    are in place."""
    # Names relative to the snapshot's and blobs' folders (dir_fd), not paths: this loop is
    # the whole cost of a no-op sync, and the kernel then resolves one name a call, not
    # eight (100,000 files on tmpfs: 0.33 s of calls, 0.41 s by whole path). Nothing is
    # kept per file in place (a million-file lock plans in flat memory): only what needs
    # work. Planning in threads was slower: the loop's Python holds the GIL.
    blobs_ok = folder_problem(paths, paths.blobs) is None
    snapshot_fd = _folder_fd(paths.snapshot(repo.revision))
    blobs_fd = _folder_fd(paths.blobs) if blobs_ok else None
    # A folder on the way to a link that is itself a link (out of the cache) means nothing
    # under it is present: execution then refuses to write through it, naming it (exit 6).
    folders_ok: dict[str, bool] = {}
    fetch: list[LockedFile] = []
    corrupt: list[LockedFile] = []
    link: list[LockedFile] = []
    present = 0
    try:
        for f in repo.files:
            etag = f.etag
            parent = f.path.rpartition("/")[0]
            if parent not in folders_ok:
                folders_ok[parent] = folder_problem(
                    paths, paths.snapshot(repo.revision) / parent) is None
            try:
                link_ok = folders_ok[parent] and snapshot_fd is not None and (
                    os.readlink(f.path, dir_fd=snapshot_fd) == link_target(f.path, etag))
            except OSError:
                link_ok = False
            try:
                st = os.stat(etag, dir_fd=blobs_fd, follow_symlinks=False) \
                    if blobs_fd is not None else os.lstat(f"{paths.blobs}/{etag}")
                # Only a regular file counts: a FIFO, a device or a link is refetched and
                # replaced.
                size: int | None = st.st_size if blobs_ok and S_ISREG(st.st_mode) else -1
            except OSError:
                size = None
            if size is None:
                fetch.append(f)
            elif size != f.size:
                corrupt.append(f)
            elif link_ok:
                present += 1
            else:
                link.append(f)
    finally:
        for fd in (snapshot_fd, blobs_fd):
            if fd is not None:
                os.close(fd)
    return fetch, corrupt, link, present


def _folder_fd(folder: Path) -> int | None:
    """A descriptor of `folder` to resolve names from, or None when it is not a folder."""
    try:
        return os.open(folder, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None


def tidy(plan: SyncPlan) -> None:
    """What a sync with nothing to do still does: remove the temp blobs and staging folders
    that killed syncs (on this node or others) left in the locked repos. Once another node
    completed the cache, every later sync is a no-op, and nothing else would. Never raises
    for a cache it cannot clean."""
    for r in plan.repos:
        paths = RepoPaths.of(Path(plan.cache_dir), r.repo)
        with contextlib.suppress(OSError):
            clean_stale_temps(paths, r.repo.revision, deep=False)


def nearest_existing(path: Path) -> Path:
    """`path`, or its nearest parent that exists: where a cache not made yet will live."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def free_space(cache_dir: Path) -> tuple[Path, int]:
    """Free bytes on the filesystem that holds (or will hold) the cache."""
    probe = nearest_existing(cache_dir)
    return probe, shutil.disk_usage(probe).free


# The kernel's own filesystems: files there are views of the kernel, none can be stored.
_VIRTUAL = frozenset({"proc", "sysfs", "cgroup", "cgroup2", "devpts", "debugfs", "tracefs",
                      "securityfs", "configfs", "bpf", "pstore", "efivarfs", "mqueue",
                      "binfmt_misc", "fusectl", "autofs"})


def _virtual_filesystem(path: Path) -> str | None:
    """The type of the kernel filesystem `path` is on (`proc`, `sysfs`, ...), else None:
    from /proc/self/mounts, the longest mount point that holds it (Linux; None elsewhere)."""
    try:
        mounts = Path("/proc/self/mounts").read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    target, best, kind = str(path.resolve()), "", None
    for line in mounts:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        if (target == point or target.startswith(point.rstrip("/") + "/")) and \
                len(point) > len(best):
            best, kind = point, fields[2]
    return kind if kind in _VIRTUAL else None


def preflight(plan: SyncPlan) -> None:
    """Raise LocalError (exit 6) before any byte is fetched if the cache's disk is too small."""
    need = plan.bytes_to_fetch
    if need == 0:
        return
    where, free = free_space(Path(plan.cache_dir))
    if (kind := _virtual_filesystem(where)) is not None:  # /proc: no storage, not a full disk
        raise LocalError(
            f"the cache {plan.cache_dir} cannot be made: {where} is on {kind}, a virtual "
            "filesystem (it stores no files)",
            hint="Point --cache-dir (or HF_HOME) at a folder on a disk.")
    if need > free:
        raise LocalError(
            f"not enough free space for the cache at {plan.cache_dir}: this sync needs "
            f"{human_size(need)} and {where} has {human_size(free)} free",
            hint="Free some space, or point --cache-dir (or HF_HOME) at a larger volume.",
        )


def execute_plan(
    plan: SyncPlan,
    *,
    endpoint: str,
    token: str | None,
    jobs: int = DEFAULT_JOBS,
    connections: int | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    offline: bool = False,
    sources: Sequence[BlobSource] = (),
    on_start: Callable[[str, int], None] | None = None,
    on_bytes: Callable[[str, int], None] | None = None,
    on_done: Callable[[str, int], None] | None = None,
    admit: Admit | None = None,
    engine: str = "auto",
    budget: RateBudget | None = None,
) -> SyncResult:
    """Fetch, verify, publish, link and ref everything `plan` lists as missing.

    `budget`: the Hub's rate limits, shared by every request (wlock.ratelimit).

    `engine` (--engine) chooses what fetches large files (wlock.cache.transfer.Transfer);
    the result's `engines` says which fetched each, and why hf_xet where it was not asked.

    `admit(repo, file, temp)` is asked about every blob's verified bytes before they are
    published, and may raise (the policy's judgement of what the bytes would make a loader
    call: wlock.policy.gate); a refused blob is deleted, never published, and its repo's
    snapshot is not made.

    Each missing blob is asked of `sources` in turn (another cache, an archive) before the
    Hub, and verified the same way whichever gave it; wrong bytes from a source are refused
    (reported in the result's `refused`) and the next source asked.

    Raises IntegrityFailure (exit 1) when bytes stay wrong after one retry, HubError (5),
    LocalError (6) when the cache cannot be written; other files still complete first. A
    transfer that receives nothing for `timeout` seconds is cancelled and retried once.
    With `offline`, nothing is fetched from the Hub: what only needs links is done, the
    sources are asked, and every blob none of them holds is an OfflineError (exit 5).
    """
    started = time.monotonic()
    cache_dir = Path(plan.cache_dir)
    work = [r for r in plan.repos if r.needs_work]
    try:
        for r in work:
            paths = RepoPaths.of(cache_dir, r.repo)
            make_folder(paths, paths.blobs)
            # huggingface_hub's cache scan warns about a repo folder without `snapshots/`.
            make_folder(paths, paths.root / "snapshots")
            clean_stale_temps(paths, r.repo.revision)
    except OSError as e:
        raise local_error(e, cache_dir) from e
    if work:
        clean_other_repos(cache_dir, {RepoPaths.of(cache_dir, r.repo).root for r in work})

    failures: list[WlockError] = []
    failed_blobs: set[tuple[str, str, str]] = set()
    downloads = [(r.repo, f) for r in work for f in r.downloads]
    fetched_bytes = hub_files = 0
    by_others = (0, 0)
    # The link as the probe found it (Link.tune), and the small files' gate (SmallGate).
    tuning: list[Any] = [None, None]
    upgrades: dict[str, Any] = {}
    engines: dict[str, tuple[str, str]] = {}
    streams: dict[str, int] = {}
    read_again: dict[str, int] = {}
    restored: dict[str, list[int]] = {}
    refused: list[str] = []
    # Links only to blobs that are in, the ref last: a snapshot never points at a missing
    # blob, and a ref never names a snapshot that is not complete. A new snapshot is built
    # in staging while the downloads run and put in place once its repo has no failure.
    builds: dict[tuple[str, str], SnapshotBuild] = {}
    try:
        try:
            for r in work:
                builds[r.repo.key] = SnapshotBuild(
                    RepoPaths.of(cache_dir, r.repo), r.repo.revision,
                    (*r.fetch, *r.corrupt, *r.link))
        except OSError as e:
            raise local_error(e, cache_dir) from e
        if downloads and offline and not sources:
            failures = [offline_error(repo, f) for repo, f in downloads]
            failed_blobs = {(*repo.key, f.etag) for repo, f in downloads}
            downloads = []
        elif downloads:
            # Blobs present with wrong bytes: the good ones replace them. Any other blob that
            # appears meanwhile was published by another writer and is kept.
            wrong_blobs: set[tuple[str, str, str]] = {
                (*r.repo.key, f.etag) for r in work for f in r.corrupt}
            fetched_bytes, hub_files, failures, failed_blobs, by_others = download_all(
                downloads, cache_dir, endpoint, token, jobs, connections, timeout, wrong_blobs,
                builds, Sources(sources, offline, restored, refused),
                on_start, on_bytes, on_done, tuning, upgrades, admit, engine, engines,
                streams, budget, read_again,
            )
        try:
            for r in work:
                build = builds[r.repo.key]
                if any(failed[:2] == r.repo.key for failed in failed_blobs):
                    build.discard()
                    continue
                build.finish()
                if r.ref:
                    ensure_ref(build.paths, r.ref, r.repo.revision)
        except OSError as e:
            raise local_error(e, cache_dir) from e
    finally:
        for build in builds.values():
            build.discard()  # what a failure or Ctrl-C left in staging

    if failures:
        if len(failures) == 1:
            raise failures[0]
        raise SyncFailed(sorted(failures, key=lambda f: f.message))  # the same on every run
    return SyncResult(plan=plan, fetched_files=hub_files,
                      fetched_bytes=fetched_bytes - sum(b for _, b in restored.values()),
                      seconds=time.monotonic() - started,
                      restored=restored, refused=tuple(refused), by_others=by_others,
                      link=tuning[0], small=tuning[1], upgraded=upgrades,
                      engines=dict(sorted(engines.items())),
                      connections=dict(sorted(streams.items())),
                      read_again=dict(sorted(read_again.items())))
