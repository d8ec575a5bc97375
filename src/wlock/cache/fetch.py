"""Every missing blob of a sync fetched, verified and published: from another source (a
cache, the archive), by a chunk-level upgrade, or from the Hub through an engine
(wlock.cache.transfer picks it); claimed across processes and nodes so each blob is fetched
once; its bytes checked against the lock and judged by the policy (`admit`) before the
publish, the same for every way they came.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wlock.cache.layout import (
    RepoPaths,
    SnapshotBuild,
    claim_blob,
    publish_blob,
    temp_blob_path,
    write_empty_blob,
)
from wlock.cache.leases import LEASES
from wlock.errors import (
    CheckFailedError,
    HubError,
    LocalError,
    OfflineError,
    PolicyError,
    UnsafeCacheError,
    WlockError,
)
from wlock.models import LockedFile, LockedRepo
from wlock.units import human_size

if TYPE_CHECKING:
    from wlock.cache.sources import BlobSource
    from wlock.ratelimit import RateBudget

# Asked about each blob's verified bytes (a temp file) before they are published: raises to
# refuse them (the policy's gate, wlock.policy.gate).
Admit = Callable[[LockedRepo, LockedFile, str], None]


class IntegrityFailure(CheckFailedError):
    """Downloaded bytes did not match the lock, twice (exit 1)."""


def offline_error(repo: LockedRepo, f: LockedFile, asked: str = "") -> OfflineError:
    cause = ("offline mode is on (--offline or HF_HUB_OFFLINE=1) and these are not in the "
             f"cache{asked}")
    return OfflineError(
        f"{repo.id}/{f.path} ({human_size(f.size)}): {cause}", repo=repo.id,
        hint="Run `wlock sync` with network access, or give a source that holds them "
        "(--archive URL, --from-cache DIR).", cause=cause, subject=f"{repo.id}/{f.path}")


class Sources:
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
            raise offline_error(repo, f, asked)
        return False


def download_all(
    downloads: list[tuple[LockedRepo, LockedFile]],
    cache_dir: Path,
    endpoint: str,
    token: str | None,
    jobs: int,
    connections: int | None,
    timeout: float,
    wrong_blobs: set[tuple[str, str, str]],
    builds: dict[tuple[str, str], SnapshotBuild],
    sources: Sources,
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
    read_again: dict[str, int] | None = None,
) -> tuple[int, int, list[WlockError], set[tuple[str, str, str]], tuple[int, int]]:
    """Fetch every blob; returns the bytes fetched (from any source), the files the Hub
    served, the failures, the blobs that failed, and the files (and bytes) another sync
    published while this one waited for them. `upgrades` is filled with what chunk-level
    upgrades did: files, bytes copied from cached blobs, bytes fetched, and why each file
    that was tried was downloaded whole instead. `engines` is filled with the engine that
    fetched each large file the Hub served, and why (Transfer.engines); `streams` with the
    connections each file through hf_transfer got (Transfer.connections_of); `read_again`
    with each large file hashed again whole after its download (Transfer.read_again)."""
    from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

    # Here, not at the top: only a sync that downloads needs them (and the upgrade path's
    # chunking, which imports numpy, only a sync that upgrades a file: chunks.Upgrader.plan).
    from wlock.cache.engines import LARGE_FILE, FetchJob, IntegrityError
    from wlock.cache.engines.chunks import Upgrader
    from wlock.cache.engines.link import PROBE_FROM, connection_ceiling
    from wlock.cache.engines.small import small_ceiling
    from wlock.cache.transfer import Transfer
    from wlock.cache.upgrade import UPGRADE_FROM, NotUpgraded, predecessor

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
                    if attempt == 2 and (said := transfer.route.attested_etag(job)) is not None \
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
    # None: the link decides (Link.tune), up to what the machine holds
    # (connection_ceiling: 32 a core, within a quarter of its free memory); a number: exactly
    # that budget, shared by the large files in flight, as the user asked.
    with Transfer(endpoint, token, jobs=jobs, connections=connections or connection_ceiling(),
                  fixed=connections is not None, timeout=timeout,
                  small=small_ceiling(round_trips), on_bytes=report,
                  engine=engine, budget=budget) as transfer, \
            ThreadPoolExecutor(max_workers=jobs) as large, \
            ThreadPoolExecutor(max_workers=transfer.small.gate.ceiling) as small:
        upgrader = Upgrader(transfer.route, report, transfer.stopped)
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
                transfer.hf_transfer.warm(min(jobs, len(bigs)))
            # The probe reads ranges of a file from the Hub: not of one an upgrade will put
            # together from its cached revision (those bytes would be fetched in vain).
            fresh = [(r, f) for r, f in bigs if f.size < UPGRADE_FROM or predecessor(
                builds[r.key].paths, r.revision, f.path, f.etag) is None]
            # hf_xet (--engine xet) finds its own concurrency: no probe of the bridge then.
            if hub_only and connections is None and engine != "xet" and \
                    sum(f.size for _, f in fresh) >= PROBE_FROM:
                r0, f0 = fresh[0]
                tuning[0] = transfer.link.decide(cache_dir, FetchJob(
                    kind=r0.kind, repo_id=r0.id, revision=r0.revision, path=f0.path,
                    size=f0.size, etag=f0.etag, hash_kind=f0.hash_kind,
                    temp=temp_blob_path(builds[r0.key].paths, f0.etag)), min(jobs, len(bigs)),
                    transfer.stopped)
            if any(f.size < LARGE_FILE for _, f in ordered):
                tuning[1] = transfer.small.gate
            futures = {
                (large if f.size >= LARGE_FILE else small).submit(one, repo, f): (repo, f)
                for repo, f in ordered
            }
            # Woken once all are done, or at the first failure (then file by file), not at
            # every file: a wakeup per file was a handoff of the GIL per file, 6% of a sync
            # of 1,000 small files. And every half second: Linux may deliver Ctrl-C to any
            # thread, and a main thread blocked with no timeout never runs the handler (a
            # sync waiting on another writer's blob locks ignored Ctrl-C, seen in CI).
            while True:
                done, pending = wait(futures, timeout=0.5, return_when=FIRST_EXCEPTION)
                if not pending or any(not f.cancelled() and f.exception() is not None
                                      for f in done):
                    break
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
                    failures.append(local_error(e, cache_dir, f"{repo.id}/{f.path}"))
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
            if read_again is not None:
                read_again.update(transfer.read_again)
    upgrades.update(files=upgrader.files, copied_bytes=upgrader.copied,
                    fetched_bytes=upgrader.fetched, downloaded_whole=sorted(not_upgraded))
    return fetched, from_hub[0], failures, failed, (by_others[0], by_others[1])


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


def local_error(e: OSError, cache_dir: Path, subject: str | None = None) -> LocalError:
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

