"""Manifest + Hub -> lock. Pins are kept unless the entry changed or an upgrade asks to move them.

The semantics are uv's: `wlock lock` resolves only what is new or changed in weights.toml;
`--upgrade` re-resolves everything, `--upgrade-package ID` just that entry.
"""

from __future__ import annotations

import fnmatch
import threading
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from wlock.cancel import result_of
from wlock.errors import (
    InvalidFileError,
    LockStaleError,
    OfflineError,
    RepoNotFoundError,
    RevisionNotFoundError,
    UsageError,
    WlockError,
)
from wlock.lock.hub import DEFAULT_TIMEOUT, HubClient, RemoteSnapshot
from wlock.lock.loaders import LoaderProblem, Options, Requirement, collapse, detect_loader
from wlock.lock.lockfile import (
    LOCK_NAME,
    conflict_sides,
    glob_pattern,
    hand_edited,
    include_adds_back,
    is_commit,
    is_fresh,
    path_selected,
    read_lock,
    stale_error,
    write_lock,
)
from wlock.lock.manifest import glob_line, read_manifest
from wlock.models import (
    REPO_KINDS,
    FormatScan,
    Lock,
    LockChange,
    LockedFile,
    LockedRepo,
    LockResult,
    Manifest,
    ManifestEntry,
    PickleScan,
    RepoKind,
)
from wlock.units import human_size

if TYPE_CHECKING:
    from wlock.ratelimit import RateBudget
    from wlock.scan import ScanLimits

DEFAULT_JOBS = 16

ReadFile = Callable[[RepoKind, str, str, str], bytes]
# The judgement of a locked file, read from the Hub with ranges (HubClient.scan_pickle).
ScanPickle = Callable[[RepoKind, str, str, LockedFile], PickleScan]
ScanFormats = Callable[[RepoKind, str, str, LockedFile], tuple[FormatScan, ...]]
T = TypeVar("T")


def _no_reads(kind: RepoKind, repo_id: str, revision: str, path: str) -> bytes:
    raise AssertionError(f"{repo_id}: {path} read without a reader")


def _read_once(read_file: ReadFile) -> ReadFile:
    """`read_file` asked once per small file of one lock: a loader's rule, the remote-code
    pass and the judgement's list of shards read the same configs and indexes."""
    known: dict[tuple[RepoKind, str, str, str], bytes] = {}
    guard = threading.Lock()

    def read(kind: RepoKind, repo_id: str, revision: str, path: str) -> bytes:
        key = (kind, repo_id, revision, path)
        with guard:
            if key in known:
                return known[key]
        data = read_file(kind, repo_id, revision, path)
        with guard:
            known[key] = data
        return data

    return read


@dataclass(frozen=True, slots=True)
class Picked:
    """A repo as listed at its commit, and what its loader takes from it (before globs)."""

    snapshot: RemoteSnapshot
    files: tuple[LockedFile, ...]
    requires: tuple[Requirement, ...] = ()
    notes: tuple[str, ...] = ()
    code: tuple[str, ...] = ()


def options_of(entry: ManifestEntry) -> Options:
    """What weights.toml's entry tells its loader."""
    return Options(variant=entry.variant, base=entry.base, mmproj=entry.mmproj,
                   config=entry.config, split=entry.split)


def pick(snap: RemoteSnapshot, loader: str | None, options: Options,
         read_file: ReadFile) -> Picked:
    """Apply `loader`'s rule to a listed repo. Raises LoaderProblem when it cannot choose."""
    from wlock.lock.loaders import select

    if (loader is None or loader == "all") and snap.kind == "dataset":
        return Picked(snap, snap.files)  # data files: no config names code to run
    # A model's `all` (or no loader) takes every file, and still follows every auto_map to
    # the code a trust_remote_code load runs (issue 47): the policy judges it as for any
    # loader, and code in another repo is required and locked.
    choice = select(loader or "all", snap.files,
                    lambda path: read_file(snap.kind, snap.hub_id, snap.revision, path), options)
    return Picked(snap, tuple(f for f in snap.files if f.path in choice.paths),
                  choice.requires, choice.notes, choice.code)


def selection_line(repo: LockedRepo, listed: tuple[LockedFile, ...]) -> str:
    """`acme/bert: transformers, 9 of 23 files, 440 MB of 2.3 GB (not locked: onnx/, ...)`."""
    total = sum(f.size for f in listed)
    line = (f"{repo.id}: {repo.loader or 'all'}, {len(repo.files)} of {len(listed)} files, "
            f"{human_size(repo.size)} of {human_size(total)}")
    if repo.skipped:
        shown = ", ".join(repo.skipped[:6]) + (", ..." if len(repo.skipped) > 6 else "")
        line += f" (not locked: {shown})"
    return line


def select_files(
    files: tuple[LockedFile, ...], include: tuple[str, ...], exclude: tuple[str, ...],
    listed: tuple[LockedFile, ...] | None = None,
) -> tuple[tuple[LockedFile, ...], tuple[str, ...]]:
    """Apply globs as `snapshot_download(allow_patterns, ignore_patterns)` does; or, with
    `listed` (every file of the repo, for an entry whose loader chose `files`), `include`
    adds back files the loader left out and `exclude` removes: the escape hatch `wlock tree
    --why` points at, which a filter could never honour (issue 37).

    Returns the kept files and the patterns that matched no file (a likely typo).
    """
    if listed is None:
        unmatched = tuple(
            p for p in (*include, *exclude)
            if not any(fnmatch.fnmatch(f.path, glob_pattern(p)) for f in files)
        )
        return tuple(f for f in files if path_selected(f.path, include, exclude)), unmatched
    chosen = {f.path for f in files}
    added = tuple(f for f in listed if f.path not in chosen and any(
        fnmatch.fnmatch(f.path, glob_pattern(p)) for p in include))
    pool = (*files, *added)
    unmatched = tuple(
        p for p in (*include, *exclude)
        if not any(fnmatch.fnmatch(f.path, glob_pattern(p)) for f in pool)
    )
    kept = tuple(sorted((f for f in pool if path_selected(f.path, (), exclude)),
                        key=lambda f: f.path))
    return kept, unmatched


@dataclass(frozen=True, slots=True)
class Resolution:
    """One entry the lock cannot keep as is, and the revision to list its files at: the
    locked commit when only its globs changed or its file lines were edited by hand (a pin
    moves only on upgrade or a new ref),
    else the entry's ref."""

    entry: ManifestEntry
    revision: str
    why: str  # "new", "ref changed", "files re-selected", "file lines edited by hand", "upgrade"


def resolutions(
    manifest: Manifest,
    previous: Lock | None,
    *,
    upgrade: bool = False,
    upgrade_packages: Collection[str] = (),
) -> tuple[dict[tuple[str, str], LockedRepo], list[Resolution]]:
    """Which entries keep their locked repo as is, and which need the Hub (and at what)."""
    known = {e.id for e in manifest.entries}
    for name in upgrade_packages:
        if name not in known:
            raise UsageError(
                f"--upgrade-package {name}: not in {manifest.path}",
                hint=f"Entries are: {', '.join(sorted(known)) or '(none)'}.",
            )
    kept: dict[tuple[str, str], LockedRepo] = {}
    to_resolve: list[Resolution] = []
    for entry in manifest.entries:
        old = previous.find(entry.kind, entry.id) if previous else None
        if old is None:
            to_resolve.append(Resolution(entry, entry.ref, "new"))
        elif upgrade or entry.id in upgrade_packages:
            to_resolve.append(Resolution(entry, entry.ref, "upgrade"))
        elif old.requested != entry.ref:
            to_resolve.append(Resolution(entry, entry.ref, "ref changed"))
        elif old.selection != entry.selection or not all(
            # A loader's entry: `include` adds back, only `exclude` filters what is locked.
            path_selected(f.path, () if include_adds_back(old.loader) else old.include,
                          old.exclude) for f in old.files
        ):
            to_resolve.append(Resolution(entry, old.revision, "files re-selected"))
        elif hand_edited(old):
            to_resolve.append(Resolution(entry, old.revision, "file lines edited by hand"))
        else:
            kept[entry.key] = old
    return kept, to_resolve


class EntriesFailed(WlockError):
    """Several entries of weights.toml could not be resolved; each is named."""

    def __init__(self, failures: list[WlockError]) -> None:
        hints = list(dict.fromkeys(f.hint for f in failures if f.hint))
        super().__init__(
            f"{len(failures)} entries of weights.toml failed:\n"
            + "\n".join(f"  {f.message}" for f in failures),
            hint="\n      ".join(hints) or None)
        self.exit_code = min(f.exit_code for f in failures)
        self.label = failures[0].label


def plan_lock(
    manifest: Manifest,
    previous: Lock | None,
    snapshot: Callable[[ManifestEntry, str], RemoteSnapshot],
    *,
    upgrade: bool = False,
    upgrade_packages: Collection[str] = (),
    jobs: int = DEFAULT_JOBS,
    read_file: ReadFile = _no_reads,
    scan_pickle: ScanPickle | None = None,
    scan_formats: ScanFormats | None = None,
) -> LockResult:
    """The lock the manifest calls for, and how it differs from `previous`; writes nothing.

    `snapshot(entry, revision)` is called (concurrently) only for entries that need the Hub:
    at the entry's ref when a pin is made or moved, at the locked commit when only the
    entry's globs changed. An entry with a `loader` keeps the files its library reads
    (wlock.lock.loaders), reading small files with `read_file(kind, id, commit, path)`; the
    models entries require are locked too (`_dependencies`). Raises InvalidFileError (exit 4)
    for a glob that matches nothing or a loader that cannot choose, HubError (exit 5).
    """
    kept, to_resolve = resolutions(manifest, previous, upgrade=upgrade,
                                   upgrade_packages=upgrade_packages)
    read_file = _read_once(read_file)

    def resolve_one(entry: ManifestEntry, revision: str) -> Picked:
        snap = snapshot(entry, revision)
        try:
            return pick(snap, entry.loader, options_of(entry), read_file)
        except LoaderProblem as e:
            key = next((k for k in ("variant", "config", "split") if getattr(entry, k)),
                       "loader")
            raise InvalidFileError(
                manifest.path, f"{entry.id} at {snap.revision[:7]}: {e.message}",
                line=glob_line(Path(manifest.path), entry, key),
                key=f"{entry.kind}.{key}", hint=e.hint) from None

    resolved: dict[tuple[str, str], Picked] = {}
    if to_resolve:
        failures: list[WlockError] = []
        with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(to_resolve)))) as pool:
            futures = [pool.submit(resolve_one, r.entry, r.revision) for r in to_resolve]
            for item, future in zip(to_resolve, futures, strict=True):
                try:
                    resolved[item.entry.key] = result_of(future)
                except WlockError as e:  # every failing entry is reported, not the first
                    failures.append(e)
        if len(failures) == 1:
            raise failures[0]
        if failures:
            raise EntriesFailed(failures)

    repos: list[LockedRepo] = []
    renamed: list[tuple[str, str]] = []
    lines: list[str] = []
    # (a requirement, the id of the entry that requires it)
    pending: list[tuple[Requirement, str]] = []
    for entry in manifest.entries:
        if entry.key in kept:
            repo = kept[entry.key]
            repos.append(repo)
            for name in repo.requires:
                old = previous.find("model", name) if previous else None
                pending.append((Requirement(name, old.requested if old else "main",
                                            "kept from the lock",
                                            old.include if old else ()), repo.id))
            continue
        picked = resolved[entry.key]
        snap = picked.snapshot
        if snap.hub_id != entry.id:
            renamed.append((entry.id, snap.hub_id))
        files, unmatched = select_files(
            picked.files, entry.include, entry.exclude,
            snap.files if include_adds_back(entry.loader) else None)
        if unmatched:
            pattern = unmatched[0]
            key = "include" if pattern in entry.include else "exclude"
            raise InvalidFileError(
                manifest.path,
                f"{pattern!r} matches no file of {entry.id} at {snap.revision[:7]}"
                + (f" that its loader ({entry.loader}) takes" if entry.loader and (
                    key == "exclude" or not include_adds_back(entry.loader)) else ""),
                line=glob_line(Path(manifest.path), entry, key),
                key=f"{entry.kind}.{key}",
                hint=f"List the repo's files with `hf download {entry.id} --dry-run`, "
                "or fix the pattern.",
            )
        repo = _locked(entry.kind, entry.id, entry.ref, snap, files, entry.include,
                       entry.exclude, entry.loader, entry.variant, picked.requires,
                       picked.code, entry.base)
        repo = replace(repo, config=entry.config, split=entry.split, mmproj=entry.mmproj)
        repos.append(repo)
        pending += [(r, entry.id) for r in picked.requires]
        if entry.loader is not None:
            lines.append(selection_line(repo, snap.files))
            lines += [f"{entry.id}: {note}" for note in picked.notes]

    notes, dependencies = _dependencies(
        manifest, previous, pending, snapshot, read_file,
        upgrade=upgrade, upgrade_packages=upgrade_packages)
    fresh = {e.key for e in manifest.entries if e.key not in kept}
    fresh |= {d.key for d in dependencies if previous is None or d is not previous.find(*d.key)}
    repos = scan_pickles(repos + dependencies, fresh, scan_pickle, jobs, read_file)
    repos = judge_formats(repos, fresh, scan_formats, jobs)
    lock = Lock(manifest_digest=manifest.digest, repos=tuple(repos))
    return LockResult(
        lock=lock, changes=diff_locks(previous, lock), written=False, renamed=tuple(renamed),
        selected=(*lines, *notes),
    )


def _locked(kind: RepoKind, repo_id: str, requested: str, snap: RemoteSnapshot,
            files: tuple[LockedFile, ...], include: tuple[str, ...], exclude: tuple[str, ...],
            loader: str | None, variant: str | None,
            requires: tuple[Requirement, ...], code: tuple[str, ...] = (),
            base: str | None = None) -> LockedRepo:
    """The lock entry of a repo resolved now. What a loader left out is recorded with it (only
    then: a lock of entries without a loader keeps its bytes)."""
    kept = {f.path for f in files}
    left = [f for f in snap.files if f.path not in kept]
    return LockedRepo(
        kind=kind, id=repo_id, requested=requested, revision=snap.revision, files=files,
        include=include, exclude=exclude, loader=loader, variant=variant, base=base,
        requires=tuple(sorted({r.id for r in requires})),
        skipped=tuple(collapse((f.path for f in left), kept)) if loader is not None else (),
        skipped_size=sum(f.size for f in left) if loader is not None else 0,
        licenses=snap.licenses, license_name=snap.license_name, base_models=snap.base_models,
        remote_code=code,
    )


def scan_pickles(repos: list[LockedRepo], fresh: set[tuple[RepoKind, str]],
                 scan_pickle: ScanPickle | None, jobs: int,
                 read_file: ReadFile = _no_reads) -> list[LockedRepo]:
    """`repos` with the judgement of every locked file of the `fresh` ones that holds a
    pickle recorded (each file judged by its bytes, read with ranges, concurrently: see
    wlock.scan.judged_at_lock for which files); the others as they were locked."""
    if scan_pickle is None:
        return repos
    from wlock.scan import judged_at_lock, pickle_shards

    work = []
    for repo in repos:
        if repo.key not in fresh:
            continue
        shards = pickle_shards(repo.files, partial(read_file, repo.kind, repo.id,
                                                   repo.revision))
        work += [(repo, f) for f in repo.files
                 if f.size and judged_at_lock(repo.kind, f.path, shards)]
    if not work:
        return repos
    found = _judged(work, scan_pickle, jobs)
    by_repo: dict[tuple[RepoKind, str], list[PickleScan]] = {}
    for (repo, _), scan in zip(work, found, strict=True):
        # Only what holds a pickle is recorded: a file without one is judged again, from
        # its bytes, by sync and audit.
        if scan.pickle:
            by_repo.setdefault(repo.key, []).append(scan)
    return [replace(r, pickles=tuple(sorted(by_repo[r.key], key=lambda p: p.path)))
            if r.key in by_repo else r for r in repos]


def _judged(work: list[tuple[LockedRepo, LockedFile]],
            judge: Callable[[RepoKind, str, str, LockedFile], T], jobs: int) -> list[T]:
    """`judge` of each (repo, file) of `work`, `jobs` at a time, in `work`'s order."""
    with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(work)))) as pool:
        return list(pool.map(lambda item: judge(item[0].kind, item[0].id, item[0].revision,
                                                item[1]), work))


def judge_formats(repos: list[LockedRepo], fresh: set[tuple[RepoKind, str]],
                  scan_formats: ScanFormats | None, jobs: int) -> list[LockedRepo]:
    """`repos` with what the files of the `fresh` ones in formats other than pickle would
    run or read past their folder (chat templates, Keras configs, ONNX external data:
    wlock.scan.is_format_judged), or that could not be judged, recorded (`formats`); the
    others as they were locked."""
    if scan_formats is None:
        return repos
    from wlock.scan import formats_judged_at_lock

    # A file read for pickles and found to hold one is no GGUF: not read a second time.
    work = [(repo, f) for repo in repos if repo.key in fresh
            for pickles in [{p.path for p in repo.pickles}]
            for f in repo.files if f.size and f.path not in pickles
            and formats_judged_at_lock(repo.kind, f.path)]
    if not work:
        return repos
    found = _judged(work, scan_formats, jobs)
    by_repo: dict[tuple[RepoKind, str], list[FormatScan]] = {}
    for (repo, _), scans in zip(work, found, strict=True):
        by_repo.setdefault(repo.key, []).extend(scans)
    return [replace(r, formats=tuple(sorted(by_repo[r.key],
                                            key=lambda t: (t.path, t.kind, t.key))))
            if by_repo.get(r.key) else r for r in repos]


def _dependencies(
    manifest: Manifest, previous: Lock | None, pending: list[tuple[Requirement, str]],
    snapshot: Callable[[ManifestEntry, str], RemoteSnapshot], read_file: ReadFile, *,
    upgrade: bool, upgrade_packages: Collection[str],
) -> tuple[list[str], list[LockedRepo]]:
    """Lock every model the entries require (and what those require), each as an entry of
    its own: kept from the previous lock while the requirement is unchanged, else resolved at
    the ref the requiring repo names. An entry of weights.toml for the same repo wins.
    Returns notes for the user and the dependencies' lock entries."""
    listed = {e.key: e for e in manifest.entries}
    found: dict[tuple[RepoKind, str], LockedRepo] = {}
    notes: list[str] = []
    while pending:
        requirement, by = pending.pop(0)
        key: tuple[RepoKind, str] = ("model", requirement.id)
        if key in listed:
            entry = listed[key]
            if is_commit(requirement.ref) and entry.ref != requirement.ref:
                notes.append(f"{requirement.id}: {by} names commit {requirement.ref[:7]}, "
                             f"weights.toml's entry (ref {entry.ref!r}) is what is locked")
            continue
        if key in found:
            continue
        old = previous.find(*key) if previous else None
        moving = upgrade or requirement.id in upgrade_packages or by in upgrade_packages
        if old is not None and old.requested == requirement.ref and \
                old.include == requirement.include and not moving:
            found[key] = old
            pending += [(Requirement(n, "main", "kept"), old.id) for n in old.requires
                        if ("model", n) not in found]
            continue
        try:
            snap = snapshot(ManifestEntry("model", requirement.id, requirement.ref,
                                          include=requirement.include), requirement.ref)
        except (RepoNotFoundError, RevisionNotFoundError) as e:
            # Say where the name came from: the error named only the repo (issue 37).
            e.message = f"{e.message} (required by {by}: {requirement.why})"
            e.args = (e.message,)
            e.hint = requirement.hint or e.hint
            raise
        loader = None if requirement.include else detect_loader(
            snap.library_name, (f.path for f in snap.files))
        try:
            picked = pick(snap, loader, Options(), read_file)
        except LoaderProblem:
            loader, picked = None, Picked(snap, snap.files)  # every file: it still loads
        files, _ = select_files(picked.files, requirement.include, ())
        repo = _locked("model", requirement.id, requirement.ref, snap, files,
                       requirement.include, (), loader, None, picked.requires, picked.code)
        found[key] = repo
        pending += [(r, requirement.id) for r in picked.requires]
        how = ("at the commit it names" if is_commit(requirement.ref) else
               f"at {requirement.ref!r} as of now (it names no commit)")
        notes.append(f"{requirement.id}: required by {by} ({requirement.why}); locked {how}: "
                     f"{snap.revision[:7]}, {len(repo.files)} files, {human_size(repo.size)}")
    return notes, list(found.values())


def diff_locks(old: Lock | None, new: Lock) -> tuple[LockChange, ...]:
    """Pins that appear, move or disappear between two locks, in a stable order."""
    before = {r.key: r for r in old.repos} if old else {}
    after = {r.key: r for r in new.repos}
    changes = []
    order = {kind: n for n, kind in enumerate(REPO_KINDS)}
    for key in sorted(before.keys() | after.keys(), key=lambda k: (order[k[0]], k[1])):
        a, b = before.get(key), after.get(key)
        if a is not None and b is not None and a.revision == b.revision and (
            {f.path for f in a.files} == {f.path for f in b.files}
        ):
            continue
        current = b or a
        assert current is not None
        changes.append(LockChange(
            kind=current.kind, id=current.id, requested=current.requested,
            old=a.revision if a else None, new=b.revision if b else None,
        ))
    return tuple(changes)


def rescan_lock(lock: Lock, *, endpoint: str, token: str | None,
                scan_limits: ScanLimits | None = None, jobs: int = DEFAULT_JOBS,
                timeout: float = DEFAULT_TIMEOUT, budget: RateBudget | None = None) -> Lock:
    """`lock` with every repo's records made anew from the Hub's bytes (ranges, as `lock`
    reads them), for `lock --check --rescan` to compare with what the lock records. Raises
    a HubError subclass (exit 5) naming the file when a read fails."""
    client = HubClient(endpoint, token, timeout=timeout, budget=budget)
    fresh = {r.key for r in lock.repos}
    cleared = [replace(r, pickles=(), formats=()) for r in lock.repos]
    scanned = scan_pickles(cleared, fresh, lambda kind, repo_id, revision, f: client.scan_pickle(
        kind, repo_id, revision, f, scan_limits)[0], jobs, client.read_file)
    scanned = judge_formats(
        scanned, fresh, lambda kind, repo_id, revision, f: client.scan_formats(
            kind, repo_id, revision, f, scan_limits), jobs)
    return replace(lock, repos=tuple(scanned))


def lock_project(
    project: Path,
    *,
    endpoint: str,
    token: str | None,
    check: bool = False,
    dry_run: bool = False,
    upgrade: bool = False,
    upgrade_packages: Collection[str] = (),
    jobs: int = DEFAULT_JOBS,
    timeout: float = DEFAULT_TIMEOUT,
    offline: bool = False,
    accept: Callable[[Lock], None] | None = None,
    scan_limits: ScanLimits | None = None,
    budget: RateBudget | None = None,
    note: Callable[[str], None] | None = None,
) -> LockResult:
    """`wlock lock`: resolve weights.toml into weights.lock.

    `accept(lock)` is called with the lock about to be written (or checked, with `check`),
    and may raise to refuse it: the project's policy, which the resolver knows nothing of,
    judges there, and a refused lock leaves weights.lock as it was.

    With `check`, raises LockStaleError (exit 3) unless the lock matches the manifest, and
    makes no request at all. With `offline`, an unchanged manifest still locks; anything that
    needs the Hub raises OfflineError (exit 5) naming the entries. With `dry_run`, computes
    the changes and writes nothing.
    """
    manifest = read_manifest(project / "weights.toml")
    lock_path = project / LOCK_NAME
    notes: tuple[str, ...] = ()
    previous: Lock | None
    # A folder where the lock belongs is read_lock's to name (exit 4), not read as text here.
    sides = None if check or not lock_path.is_file() else conflict_sides(
        lock_path.read_text(encoding="utf-8", errors="replace"))
    if sides is not None:
        ours, theirs = (read_lock(lock_path, text=side) for side in sides)
        previous, notes = merge_locks(manifest, ours, theirs)
    else:
        previous = read_lock(lock_path) if lock_path.exists() else None
    if check:
        if not is_fresh(manifest, previous):
            raise stale_error(manifest, lock_path, previous, "--check")
        if upgrade or upgrade_packages:
            asked = "--upgrade" if upgrade else "--upgrade-package " + ", ".join(
                upgrade_packages)
            raise LockStaleError(
                f"{asked} asks for new pins, which `--check` does not look for (it writes "
                "nothing and asks the Hub nothing): weights.lock would change",
                hint=f"Run `wlock lock {asked}` to move the pins, or `wlock outdated` to "
                "see which moved, without writing.")
        assert previous is not None
        if accept is not None:
            accept(previous)
        return LockResult(lock=previous, changes=(), written=False)
    if is_fresh(manifest, previous) and not upgrade and not upgrade_packages:
        assert previous is not None
        if accept is not None:
            accept(previous)
        # Nothing to resolve; still rewrite a lock whose bytes are not canonical.
        written = False if dry_run else write_lock(lock_path, previous)
        return LockResult(lock=previous, changes=(), written=written, notes=notes)

    if offline:
        _, needed = resolutions(manifest, previous, upgrade=upgrade,
                                upgrade_packages=upgrade_packages)
        if needed:
            raise OfflineError(
                "offline mode is on (--offline or HF_HUB_OFFLINE=1) and these entries need "
                "the Hub: " + ", ".join(f"{r.entry.id} ({r.why})" for r in needed),
                hint="Run `wlock lock` with network access; an unchanged weights.toml locks "
                "offline.",
            )

    # Constructing the client makes no request; offline, it is never called.
    client = HubClient(endpoint, token, timeout=timeout, budget=budget, note=note)
    result = plan_lock(
        manifest, previous, lambda e, revision: client.snapshot(e.kind, e.id, revision),
        upgrade=upgrade, upgrade_packages=upgrade_packages, jobs=jobs,
        read_file=client.read_file,
        scan_pickle=lambda kind, repo_id, revision, f: client.scan_pickle(
            kind, repo_id, revision, f, scan_limits)[0],
        scan_formats=lambda kind, repo_id, revision, f: client.scan_formats(
            kind, repo_id, revision, f, scan_limits),
    )
    if accept is not None:
        accept(result.lock)
    written = False if dry_run else write_lock(lock_path, result.lock)
    # After a merge conflict, what moved is told against our side, the user's branch.
    changes = diff_locks(ours, result.lock) if sides is not None else result.changes
    return LockResult(
        lock=result.lock, changes=changes, written=written, renamed=result.renamed,
        notes=notes, selected=result.selected,
    )


def merge_locks(manifest: Manifest, ours: Lock, theirs: Lock) -> tuple[Lock, tuple[str, ...]]:
    """The lock to start from when weights.lock holds a merge conflict (as npm resolves
    package-lock.json): per entry of the merged weights.toml, the pin of the side(s) whose
    entry matches it when they agree; nothing when the two sides pin different commits (the
    entry is then resolved anew, and the note says so). Returns the lock and one note per
    entry, for the user to read."""
    repos: list[LockedRepo] = []
    notes: list[str] = []
    for entry in manifest.entries:
        sides = {"ours": ours.find(*entry.key), "theirs": theirs.find(*entry.key)}
        fits = {name: r for name, r in sides.items()
                if r is not None and r.selection == entry.selection}
        revisions = sorted({r.revision for r in fits.values()})
        if len(revisions) == 1:
            name, chosen = next(iter(fits.items()))
            why = ("both sides agree" if len(fits) == 2
                   else f"only {name} locks it as weights.toml asks")
            notes.append(f"{entry.id}: kept {chosen.revision[:7]} ({why})")
            repos.append(chosen)
        elif len(revisions) == 2:
            notes.append(f"{entry.id}: the two sides pin {fits['ours'].revision[:7]} (ours) and "
                         f"{fits['theirs'].revision[:7]} (theirs); resolving {entry.ref!r} on "
                         "the Hub again, which may move it to the current head")
        else:
            notes.append(f"{entry.id}: neither side locks it as weights.toml asks; resolving it")
    return Lock(manifest_digest=ours.manifest_digest, repos=tuple(repos)), tuple(notes)


def verify_remote(manifest: Manifest, lock: Lock, *, endpoint: str, token: str | None,
                  jobs: int = DEFAULT_JOBS, timeout: float = DEFAULT_TIMEOUT,
                  budget: RateBudget | None = None) -> tuple[str, ...]:
    """Every line of `lock` against what the Hub attests at each pinned commit: the files
    the manifest's entries select there (the resolver's own rules, at the locked commit, not
    at the ref's head), each with its size and hash. Returns one finding per difference (a
    file the lock lacks, one it adds, another size or hash, a pin the Hub does not have),
    naming the entry and the file; () when the lock is the Hub's truth. Pickle records are
    `--rescan`'s question, not this one's. Raises a HubError subclass (exit 5) when the Hub
    cannot answer."""
    client = HubClient(endpoint, token, timeout=timeout, budget=budget)
    pinned = {r.key: r.revision for r in lock.repos}
    findings: list[str] = []
    snapshots: dict[tuple[RepoKind, str], RemoteSnapshot] = {}

    def at_pin(kind: RepoKind, repo_id: str, revision: str) -> RemoteSnapshot:
        key = (kind, repo_id)
        if key not in snapshots:
            snapshots[key] = client.snapshot(kind, repo_id, pinned.get(key, revision))
        return snapshots[key]

    def first_pass(repo: LockedRepo) -> str | None:
        try:
            at_pin(repo.kind, repo.id, repo.revision)
        except RevisionNotFoundError:
            return (f"{repo.kind} {repo.id}: revision {repo.revision} is not a commit of "
                    "the repo on the Hub")
        return None

    with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(lock.repos) or 1))) as pool:
        problems = list(pool.map(first_pass, lock.repos))
    findings += [p for p in problems if p is not None]
    gone = {r.key for r, p in zip(lock.repos, problems, strict=True) if p is not None}
    kept = replace(manifest, entries=tuple(e for e in manifest.entries if e.key not in gone))
    fresh = plan_lock(kept, None, lambda e, revision: at_pin(e.kind, e.id, revision),
                      jobs=jobs, read_file=client.read_file).lock
    theirs = {r.key: r for r in fresh.repos}
    for repo in lock.repos:
        if repo.key in gone:
            continue
        hub = theirs.get(repo.key)
        where = f"{repo.kind} {repo.id}@{repo.revision[:7]}"
        if hub is None:
            findings.append(f"{where}: locked, but weights.toml neither lists nor requires it")
            continue
        ours = {f.path: f for f in repo.files}
        attested = {f.path: f for f in hub.files}
        for path in sorted(ours.keys() | attested.keys()):
            a, b = ours.get(path), attested.get(path)
            if a is None and b is not None:
                findings.append(f"{where}: {path}: missing from the lock ({b.size} bytes, "
                                f"{b.hash_kind} {b.etag} on the Hub)")
            elif b is None and a is not None:
                findings.append(f"{where}: {path}: in the lock, but not a file the entry "
                                "selects at that commit")
            elif a is not None and b is not None and (a.size, a.etag) != (b.size, b.etag):
                findings.append(f"{where}: {path}: the lock says {a.size} bytes, "
                                f"{a.hash_kind} {a.etag}; the Hub attests {b.size} bytes, "
                                f"{b.hash_kind} {b.etag}")
            elif a is not None and b is not None and a.xet != b.xet:
                # Every field the lock records is compared (issue 59): the Xet hash is
                # what an upgrade's chunk reuse and the Xet engine fetch by.
                findings.append(f"{where}: {path}: the lock says Xet hash {a.xet or 'none'}; "
                                f"the Hub attests {b.xet or 'none'}")
    for repo in fresh.repos:
        if lock.find(*repo.key) is None:
            findings.append(f"{repo.kind} {repo.id}: weights.toml asks for it, the lock has "
                            "no entry")
    return tuple(findings)
