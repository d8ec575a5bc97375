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
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from stat import S_ISREG
from typing import TYPE_CHECKING, Any

from wlock.cache.layout import (
    LEASES,
    RepoPaths,
    SnapshotBuild,
    claim_blob,
    clean_other_repos,
    clean_stale_temps,
    ensure_ref,
    folder_problem,
    follows_ref,
    link_target,
    make_folder,
    publish_blob,
    read_ref,
    temp_blob_path,
    write_empty_blob,
)
from wlock.errors import (
    CheckFailedError,
    ExitCode,
    HubError,
    LocalError,
    OfflineError,
    PolicyError,
    UnsafeCacheError,
    WlockError,
)
from wlock.models import Lock, LockedFile, LockedRepo, RepoSyncPlan, SyncPlan, SyncResult
from wlock.units import human_size

if TYPE_CHECKING:
    from wlock.cache.sources import BlobSource
    from wlock.ratelimit import RateBudget

# Asked about each blob's verified bytes (a temp file) before they are published: raises to
# refuse them (the policy's gate, wlock.policy.gate).
Admit = Callable[[LockedRepo, LockedFile, str], None]

DEFAULT_JOBS = 4
DEFAULT_TIMEOUT = 30.0  # seconds without a byte before a transfer is cancelled and retried


class IntegrityFailure(CheckFailedError):
    """Downloaded bytes did not match the lock, twice (exit 1)."""


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


def preflight(plan: SyncPlan) -> None:
    """Raise LocalError (exit 6) before any byte is fetched if the cache's disk is too small."""
    need = plan.bytes_to_fetch
    if need == 0:
        return
    where, free = free_space(Path(plan.cache_dir))
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
        raise _local(e, cache_dir) from e
    if work:
        clean_other_repos(cache_dir, {RepoPaths.of(cache_dir, r.repo).root for r in work})

    failures: list[WlockError] = []
    failed_blobs: set[tuple[str, str, str]] = set()
    downloads = [(r.repo, f) for r in work for f in r.downloads]
    fetched_bytes = hub_files = 0
    by_others = (0, 0)
    # The link as the probe found it (Transfer.tune), and the small files' gate (SmallGate).
    tuning: list[Any] = [None, None]
    upgrades: dict[str, Any] = {}
    engines: dict[str, tuple[str, str]] = {}
    streams: dict[str, int] = {}
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
            raise _local(e, cache_dir) from e
        if downloads and offline and not sources:
            failures = [_offline_error(repo, f) for repo, f in downloads]
            failed_blobs = {(*repo.key, f.etag) for repo, f in downloads}
            downloads = []
        elif downloads:
            # Blobs present with wrong bytes: the good ones replace them. Any other blob that
            # appears meanwhile was published by another writer and is kept.
            wrong_blobs: set[tuple[str, str, str]] = {
                (*r.repo.key, f.etag) for r in work for f in r.corrupt}
            fetched_bytes, hub_files, failures, failed_blobs, by_others = _download_all(
                downloads, cache_dir, endpoint, token, jobs, connections, timeout, wrong_blobs,
                builds, _Sources(sources, offline, restored, refused),
                on_start, on_bytes, on_done, tuning, upgrades, admit, engine, engines,
                streams, budget,
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
            raise _local(e, cache_dir) from e
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
                      connections=dict(sorted(streams.items())))


def _offline_error(repo: LockedRepo, f: LockedFile, asked: str = "") -> OfflineError:
    cause = ("offline mode is on (--offline or HF_HUB_OFFLINE=1) and these are not in the "
             f"cache{asked}")
    return OfflineError(
        f"{repo.id}/{f.path} ({human_size(f.size)}): {cause}", repo=repo.id,
        hint="Run `wlock sync` with network access, or give a source that holds them "
        "(--archive URL, --from-cache DIR).", cause=cause, subject=f"{repo.id}/{f.path}")


class _Sources:
    """The sources a sync asks before the Hub, and what each gave or was refused."""

    def __init__(self, sources: Sequence[BlobSource], offline: bool,
                 restored: dict[str, list[int]], refused: list[str]) -> None:
        self.sources, self.offline = sources, offline
        self.restored, self.refused = restored, refused
        self._lock = threading.Lock()

    def fetch(self, repo: LockedRepo, f: LockedFile, temp: str) -> bool:
        """Fill `temp` with verified bytes from the first source that has them; False when
        none has (then the Hub is asked, or, offline, the file fails)."""
        from wlock.hashing import hash_file

        refusals: list[str] = []
        for source in self.sources:
            try:
                got = source.fetch(repo, f, Path(temp))
                if got is False:
                    continue
                size = os.stat(temp).st_size
                if size != f.size:
                    digest = None
                elif isinstance(got, str):
                    digest = got  # hashed by us as the bytes were written, in this process
                else:
                    digest = hash_file(temp, f.hash_kind)
            except (OSError, WlockError) as e:
                with contextlib.suppress(OSError):
                    os.unlink(temp)
                why = e.strerror or str(e) if isinstance(e, OSError) else e.message
                refusals.append(f"{source.label}: cannot be read ({why})")
                continue
            if digest != f.etag:
                os.unlink(temp)
                refusals.append(f"{source.label}: wrong bytes (expected {f.hash_kind} "
                                f"{f.etag}, {f.size} bytes; got {digest or '?'}, {size} "
                                "bytes), refused")
                continue
            with self._lock:
                counts = self.restored.setdefault(source.label, [0, 0])
                counts[0] += 1
                counts[1] += f.size
                self.refused.extend(f"{repo.id}/{f.path}: {r}" for r in refusals)
            return True
        with self._lock:
            self.refused.extend(f"{repo.id}/{f.path}: {r}" for r in refusals)
        if self.offline:
            asked = f" or in {', '.join(s.label for s in self.sources)}"
            if refusals:
                asked += f" ({'; '.join(refusals)})"
            raise _offline_error(repo, f, asked)
        return False


def _download_all(
    downloads: list[tuple[LockedRepo, LockedFile]],
    cache_dir: Path,
    endpoint: str,
    token: str | None,
    jobs: int,
    connections: int | None,
    timeout: float,
    wrong_blobs: set[tuple[str, str, str]],
    builds: dict[tuple[str, str], SnapshotBuild],
    sources: _Sources,
    on_start: Callable[[str, int], None] | None,
    on_bytes: Callable[[str, int], None] | None,
    on_done: Callable[[str, int], None] | None,
    tuning: list[Any],
    upgrades: dict[str, Any],
    admit: Admit | None = None,
    engine: str = "auto",
    engines: dict[str, tuple[str, str]] | None = None,
    streams: dict[str, int] | None = None,
    budget: RateBudget | None = None,
) -> tuple[int, int, list[WlockError], set[tuple[str, str, str]], tuple[int, int]]:
    """Fetch every blob; returns the bytes fetched (from any source), the files the Hub
    served, the failures, the blobs that failed, and the files (and bytes) another sync
    published while this one waited for them. `upgrades` is filled with what chunk-level
    upgrades did: files, bytes copied from cached blobs, bytes fetched, and why each file
    that was tried was downloaded whole instead. `engines` is filled with the engine that
    fetched each large file the Hub served, and why (Transfer.engines); `streams` with the
    connections each file through hf_transfer got (Transfer.streams)."""
    from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

    # Here, not at the top: the upgrade path's chunking imports numpy, a tenth of a no-op
    # sync's time, and only a sync that downloads needs it.
    from wlock.cache.transfer import (
        LARGE_FILE,
        PROBE_FROM,
        FetchJob,
        IntegrityError,
        Transfer,
        connection_ceiling,
        small_ceiling,
    )
    from wlock.cache.upgrade import UPGRADE_FROM, NotUpgraded, Upgrader, predecessor

    failures: list[WlockError] = []
    failed: set[tuple[str, str, str]] = set()
    fetched = 0
    from_hub = [0]  # files the Hub served (not another writer, a source, or an empty file)
    by_others = [0, 0]  # files (and bytes) another sync published while this one waited
    counting = threading.Lock()
    not_upgraded: list[str] = []

    def report(job: FetchJob, n: int) -> None:
        if on_bytes:
            on_bytes(job.label, n)

    def one(repo: LockedRepo, f: LockedFile) -> int:
        fetched = _one(repo, f)
        builds[repo.key].add(f)  # its blob is in
        if on_done:
            on_done(f"{repo.id}/{f.path}", f.size)
        return fetched

    def _one(repo: LockedRepo, f: LockedFile) -> int:
        # One RepoPaths per repo, shared by its files: it remembers the folders checked.
        paths = builds[repo.key].paths
        label = f"{repo.id}/{f.path}"
        if on_start:
            on_start(label, f.size)
        wrong = (*repo.key, f.etag) in wrong_blobs
        if wrong and (blob := paths.blob(f.etag)).is_dir() and not blob.is_symlink():
            # Bytes cannot be renamed onto a folder, and wlock does not delete what it did
            # not write: say so before fetching them in vain.
            raise UnsafeCacheError(blob, "a folder", "a blob file")
        if f.size == 0:
            write_empty_blob(paths, f, replace=wrong)
            return 0
        waited = [0]  # the bytes of another writer's progress shown on our bar

        def on_wait(done: int) -> None:
            if on_bytes and done > waited[0]:
                on_bytes(label, done - waited[0])
                waited[0] = done

        with claim_blob(paths, f, stall=timeout, stop=transfer.stopped,
                        on_wait=on_wait) as mine:
            # Published by another writer: the bar fills; ours to fetch: it restarts.
            settled = f.size if not mine and not wrong else 0
            if on_bytes and settled != waited[0]:
                on_bytes(label, settled - waited[0])
            if not mine and not wrong:
                with counting:  # another sync (another node) published it meanwhile
                    by_others[0] += 1
                    by_others[1] += f.size
                return 0
            temp = temp_blob_path(paths, f.etag)
            found = False
            if sources.sources or sources.offline:
                with LEASES.hold(temp):
                    found = sources.fetch(repo, f, temp)
            if found:
                if on_bytes:
                    on_bytes(label, f.size)
                _admitted(admit, repo, f, temp)
                publish_blob(temp, paths.blob_file(f.etag), replace=wrong)
                return f.size
            if f.hash_kind == "sha256" and f.size >= UPGRADE_FROM and not sources.offline:
                upgraded = _upgrade(repo, f, paths, temp)
                if upgraded:
                    _admitted(admit, repo, f, temp)
                    publish_blob(temp, paths.blob_file(f.etag), replace=wrong)
                    return 0  # its bytes from the Hub are counted by the upgrader
            for attempt in (1, 2):
                job = FetchJob(
                    kind=repo.kind, repo_id=repo.id, revision=repo.revision, path=f.path,
                    size=f.size, etag=f.etag, hash_kind=f.hash_kind,
                    temp=temp if attempt == 1 else temp_blob_path(paths, f.etag),
                )
                try:
                    with LEASES.hold(job.temp):  # renewed while it downloads, for hours
                        transfer.fetch(job)
                    break
                except IntegrityError as e:
                    report(job, -f.size)
                    if e.actual_hash == f.etag:
                        # The very bytes the lock's hash names, at another size: it is the
                        # lock's size that is wrong (edited by hand), not the download.
                        raise IntegrityFailure(
                            f"{repo.kind} {repo.id}: {f.path}: weights.lock says {f.size} "
                            f"bytes, but the bytes with its {f.hash_kind} {f.etag} are "
                            f"{e.actual_size} bytes",
                            hint="The lock's size was edited (a lock is generated, never "
                            "edited): restore it from version control, or run `wlock lock` "
                            "to write it again.",
                        ) from None
                    if attempt == 2 and (said := transfer.attested_etag(job)) is not None \
                            and said == e.actual_hash != f.etag:
                        # The Hub names the bytes it served, and they are not the lock's:
                        # the lock disagrees with the Hub, not the download with the lock.
                        raise IntegrityFailure(
                            f"{repo.kind} {repo.id}: {f.path}: weights.lock names "
                            f"{f.hash_kind} {f.etag}, but the Hub attests {said} for it at "
                            f"{repo.revision[:7]}, and serves those bytes",
                            hint="weights.lock was edited (a lock is generated, never "
                            "edited): restore it from version control, or see every "
                            "difference with `wlock lock --check --remote`.",
                        ) from None
                    if attempt == 2:
                        raise IntegrityFailure(
                            f"{repo.kind} {repo.id}: {f.path}: downloaded bytes do not match "
                            f"the lock (expected {f.hash_kind} {f.etag}, {f.size} bytes; "
                            f"got {e.actual_hash}, {e.actual_size} bytes)",
                            hint="The file was refused and not cached. Retry; if it persists, "
                            "the Hub or a proxy is serving other bytes than the lock names.",
                        ) from None
            _admitted(admit, repo, f, str(job.temp))
            publish_blob(job.temp, paths.blob_file(f.etag), replace=wrong)
            with counting:
                from_hub[0] += 1
        return f.size

    def _upgrade(repo: LockedRepo, f: LockedFile, paths: RepoPaths, temp: str) -> bool:
        """The file put together from its cached earlier revision and the chunks that
        changed (wlock.cache.upgrade), verified in `temp`; False: not (then it is
        downloaded whole, the reason kept for `-v` and --json)."""
        old = predecessor(paths, repo.revision, f.path, f.etag)
        if old is None:
            return False
        job = FetchJob(kind=repo.kind, repo_id=repo.id, revision=repo.revision, path=f.path,
                       size=f.size, etag=f.etag, hash_kind=f.hash_kind, temp=temp, xet=f.xet)
        try:
            with LEASES.hold(temp):
                upgrader.fetch(job, old)
        except NotUpgraded as e:
            with counting:
                not_upgraded.append(f"{repo.id}/{f.path}: downloaded whole ({e})")
                if e.refused:
                    sources.refused.append(f"{repo.id}/{f.path}: chunk-level upgrade: {e}; "
                                           "downloaded whole instead")
            return False
        return True

    # An LFS file costs two round trips (the endpoint, then the CDN), a git file one: the
    # small files in flight follow their mix (small_ceiling says why).
    smalls = [f for _, f in downloads if 0 < f.size < LARGE_FILE]
    round_trips = (sum(2 if f.hash_kind == "sha256" else 1 for f in smalls) / len(smalls)
                   if smalls else 1.0)
    # None: the link decides (Transfer.tune), up to what the machine holds
    # (connection_ceiling: 32 a core, within a quarter of its free memory); a number: exactly
    # that budget, shared by the large files in flight, as the user asked.
    with Transfer(endpoint, token, jobs=jobs, connections=connections or connection_ceiling(),
                  fixed=connections is not None, timeout=timeout,
                  small=small_ceiling(round_trips), on_bytes=report,
                  engine=engine, budget=budget) as transfer, \
            ThreadPoolExecutor(max_workers=jobs) as large, \
            ThreadPoolExecutor(max_workers=transfer.small_gate.ceiling) as small:
        upgrader = Upgrader(transfer, report)
        # Two pools: --jobs bounds the large transfers (each a worker process and several
        # connections); small files are latency-bound and get their own, wider concurrency,
        # so thousands of them do not wait behind the shards or behind --jobs.
        # Largest first within each: the long transfers start at once.
        # Ctrl-C anywhere in here, even while the first files are handed out (their
        # threads may already wait on another sync's blob locks): stop everything in flight
        # instead of waiting for it. Seen: a SIGINT between the first submit and the loop
        # below left the pools' exit waiting out the other writer's download.
        try:
            ordered = sorted(downloads, key=lambda d: -d[1].size)
            bigs = [(r, f) for r, f in ordered if f.size >= LARGE_FILE]
            # Offline, or with other sources to ask first (another cache, the archive), the
            # Hub may never be asked: no probe then, and no worker started before it is
            # needed.
            hub_only = bool(bigs) and not sources.offline and not sources.sources
            if hub_only and engine != "xet":
                transfer.warm(min(jobs, len(bigs)))
            # The probe reads ranges of a file from the Hub: not of one an upgrade will put
            # together from its cached revision (those bytes would be fetched in vain).
            fresh = [(r, f) for r, f in bigs if f.size < UPGRADE_FROM or predecessor(
                builds[r.key].paths, r.revision, f.path, f.etag) is None]
            # hf_xet (--engine xet) finds its own concurrency: no probe of the bridge then.
            if hub_only and connections is None and engine != "xet" and \
                    sum(f.size for _, f in fresh) >= PROBE_FROM:
                r0, f0 = fresh[0]
                tuning[0] = _tune(transfer, cache_dir, endpoint, FetchJob(
                    kind=r0.kind, repo_id=r0.id, revision=r0.revision, path=f0.path,
                    size=f0.size, etag=f0.etag, hash_kind=f0.hash_kind,
                    temp=temp_blob_path(builds[r0.key].paths, f0.etag)), min(jobs, len(bigs)))
            if any(f.size < LARGE_FILE for _, f in ordered):
                tuning[1] = transfer.small_gate
            futures = {
                (large if f.size >= LARGE_FILE else small).submit(one, repo, f): (repo, f)
                for repo, f in ordered
            }
            # Woken once all are done, or at the first failure (then file by file), not at
            # every file: a wakeup per file was a handoff of the GIL per file, 6% of a sync
            # of 1,000 small files.
            wait(futures, return_when=FIRST_EXCEPTION)
            for future in futures:
                repo, f = futures[future]
                try:
                    fetched += future.result()
                except (HubError, IntegrityFailure, LocalError, PolicyError) as e:
                    # Every failure names its file, so a report grouped by cause lists the
                    # files it hit (it said "?, ?, ?" for a disk that filled up).
                    e.subject = e.subject or f"{repo.id}/{f.path}"
                    failures.append(e)
                    failed.add((*repo.key, f.etag))
                except OSError as e:
                    failures.append(_local(e, cache_dir, f"{repo.id}/{f.path}"))
                    failed.add((*repo.key, f.etag))
        except BaseException:
            for pool in (large, small):
                pool.shutdown(wait=False, cancel_futures=True)
            transfer.abort()
            raise
        finally:
            if engines is not None:
                engines.update(transfer.engines)
            if streams is not None:
                streams.update(transfer.connections_of)
    upgrades.update(files=upgrader.files, copied_bytes=upgrader.copied,
                    fetched_bytes=upgrader.fetched, downloaded_whole=sorted(not_upgraded))
    return fetched, from_hub[0], failures, failed, (by_others[0], by_others[1])


def _tune(transfer: Any, cache_dir: Path, endpoint: str, job: Any, files: int) -> Any:
    """The link's verdict: another sync's of this cache if recent (wlock.cache.link_record),
    else probed here, one sync at a time, and recorded for the others."""
    from wlock.cache import link_record

    known = link_record.recall(cache_dir, endpoint)
    if known is None:
        with link_record.probing(cache_dir, transfer.stopped):
            known = link_record.recall(cache_dir, endpoint)  # measured while this waited
            if known is None:
                found = transfer.tune(job, files)
                if found.one_stream:  # a failed probe is not worth keeping
                    link_record.remember(cache_dir, endpoint, found.one_stream,
                                         found.four_streams, found.capped)
                return found
    return transfer.tune(job, files, known)


def _admitted(admit: Admit | None, repo: LockedRepo, f: LockedFile, temp: str) -> None:
    """Ask `admit` about verified bytes about to be published; a refusal deletes them."""
    if admit is None:
        return
    try:
        admit(repo, f, temp)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def _local(e: OSError, cache_dir: Path, subject: str | None = None) -> LocalError:
    """A file's write that the machine refused. Its cause (the cache and the error, not the
    temp file's name) groups the files one full disk or one exhausted inode table hit."""
    cause = f"cannot write the cache at {cache_dir}: {e.strerror or e}"
    return LocalError(
        (f"{subject}: " if subject else "") + cause
        + (f" ({e.filename})" if e.filename else ""),
        hint="Check that the cache folder is writable and has free space (and free inodes: "
        "`df -i`), or point --cache-dir (or HF_HOME) elsewhere.",
        cause=cause, subject=subject,
    )
