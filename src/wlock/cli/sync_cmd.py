"""`wlock sync`: exactly the lock, into the Hugging Face cache."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from wlock.cli.options import (
    Settings,
    archive_option,
    archive_url,
    common_options,
    lock_option,
    offline_option,
)
from wlock.cli.output import emit, info, verbosity, warn
from wlock.errors import UsageError
from wlock.models import SyncPlan, SyncResult
from wlock.units import count, human_size

if TYPE_CHECKING:
    from wlock.cache.sources import BlobSource
    from wlock.models import Lock


@click.command()
@click.option("--locked", is_flag=True,
              help="Exit 3 if weights.lock is out of date with weights.toml.")
@click.option("--frozen", is_flag=True, help="Use weights.lock as is; do not read weights.toml.")
@click.option("--dry-run", is_flag=True, help="Print the plan with byte counts; change nothing.")
@click.option("--verify", is_flag=True,
              help="Also hash what is present, as `wlock check` does, and refetch wrong bytes.")
@click.option("--jobs", "-j", type=click.IntRange(1, 64), default=4, show_default=True,
              help="Large files (8 MiB and up) downloaded at once, each through hf_transfer "
              "with several connections; small files have their own: up to 64 at once, "
              "128 when they are LFS files (two round trips each).")
@click.option("--connections", type=click.IntRange(1, 256), default=None, metavar="N",
              help="HTTP connections shared by the large files in flight (hf_transfer "
              "ranges). Default: found from the link, up to 32 a CPU core within a quarter "
              "of free memory (a sync of 256 MiB or more first reads 1 MiB with one stream "
              "and with four, once per cache in 10 minutes; 8 where more do not help). "
              "From an endpoint that serves the files itself (a mirror such as olah), the "
              "default asks for its 64 MiB blocks, 32 at once in all.")
@click.option("--engine", type=click.Choice(["auto", "xet", "hf_transfer"]), default="auto",
              show_default=True,
              help="What fetches large files. auto: hf_transfer (parallel ranges, fastest "
              "on a link capped per stream), and hf_xet (the Hub's Xet client, from its "
              "CAS) for a file the plain-HTTP bridge refuses (over its size limit); xet: "
              "hf_xet for every large file on Xet; hf_transfer: never hf_xet. Every engine's "
              "bytes are verified before they are published; -v and --json say which "
              "fetched each file.")
@click.option("--timeout", type=click.FloatRange(0.1, 3600), default=30, show_default=True,
              metavar="SECONDS",
              help="Cancel and retry (once) a transfer that receives nothing for this long; "
              "a stalled server ends the sync within about twice this.")
@click.option("--from-cache", "from_caches", multiple=True, metavar="DIR",
              type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Another Hugging Face cache (a NAS copy, a colleague's HF_HOME) to copy "
              "missing blobs from before the archive and the Hub; repeatable.")
@archive_option
@click.option("--no-archive", is_flag=True, help="Do not restore from the configured archive.")
@lock_option
@offline_option
@common_options
def sync(
    locked: bool, frozen: bool, dry_run: bool, verify: bool, jobs: int, connections: int | None,
    engine: str, timeout: float, from_caches: tuple[Path, ...], archive_flag: str | None,
    no_archive: bool, settings: Settings,
) -> None:
    """Materialize exactly the locked files into the Hugging Face cache.

    Files already present are not fetched again; a sync with nothing to do makes no network
    request. Every download is verified against the lock, and judged again by the policy of
    weights.toml ([tool.wlock.policy]; the default without one: pickles may import only what
    torch's weights-only loading allows), before it becomes visible: a refused file is never
    published (exit 7). After a sync, `from_pretrained(id, revision=<commit>)` works with
    HF_HUB_OFFLINE=1.

    \b
    Examples:
      wlock sync                         # into $HF_HOME/hub
      wlock sync --locked                # in CI: fail if weights.lock is stale
      wlock sync --dry-run               # what would be fetched, and how many bytes
      wlock sync --cache-dir /nvme/hf --jobs 8
      wlock sync --frozen --lock /deploy/weights.lock   # a machine with only the lock
      wlock sync --offline               # link what is present; report what is missing
      wlock sync --verify                # repair what `wlock check` found
      wlock sync --offline --archive /mnt/nas/weights   # restore without the Hub
      wlock sync --from-cache /mnt/nas/hf-cache         # copy from another cache first

    Sources are asked in this order, each blob verified whichever gave it: --from-cache
    folders, the archive (--archive, $WLOCK_ARCHIVE or [tool.wlock.archive] in
    weights.toml), then the Hub. Wrong bytes from a source are refused and reported.
    """
    # SIGTERM (a scheduler's stop, `kill`) ends the sync as Ctrl-C does (wlock.cancel, set
    # up by the CLI's main): every transfer stopped within a second, its temp files
    # removed, nothing unverified published; exit 143.
    from wlock.cache.sync import execute_plan, plan_sync, preflight, tidy
    from wlock.lock.lockfile import LOCK_NAME, is_fresh, read_lock, stale_error
    from wlock.lock.manifest import MANIFEST_NAME

    if locked and frozen:
        raise UsageError("--locked and --frozen cannot be used together",
                         hint="--locked checks weights.lock against weights.toml; --frozen "
                         "skips weights.toml.")
    lock_path = settings.lock_path()
    lock = read_lock(lock_path)
    manifest_path = lock_path.parent / MANIFEST_NAME
    if not frozen and not manifest_path.is_file() and not locked:
        # A deploy image or a CI job that got only the lock: nothing to compare it with.
        warn(f"no {MANIFEST_NAME} beside {lock_path}; syncing the lock as it is "
             "(--frozen).", label="note")
        frozen = True
    if not frozen:
        from wlock.lock.manifest import read_manifest

        manifest = read_manifest(manifest_path)
        if not is_fresh(manifest, lock):
            error = stale_error(manifest, lock_path, lock, "--locked")
            if locked:
                raise error
            if settings.offline or lock_path.name != LOCK_NAME:
                warn(f"{lock_path.name} is out of date with weights.toml; syncing the "
                     "lock as it is. Run `wlock lock` to update it.")
            else:
                lock = _relock(lock_path.parent, settings, dry_run=dry_run)

    if verify:
        from wlock.cli.progress import make_progress

        hashing = make_progress("Verifying", sum(r.size for r in lock.repos),
                                quiet=settings.json)
        try:
            plan = plan_sync(lock, settings.cache_dir, verify=True,
                             on_hashed=lambda n: hashing.advance("", n))
        finally:
            hashing.close()
    else:
        plan = plan_sync(lock, settings.cache_dir)
    if dry_run:
        _render_plan(plan, settings.json)
        return
    if plan.is_noop:
        tidy(plan)
        if settings.json:
            emit(_result_json(plan, None, dry_run=False))
        else:
            files = sum(len(r.repo.files) for r in plan.repos)
            info(f"Already in sync: {count(len(plan.repos), 'repo')}, "
                 f"{count(files, 'file')} in {plan.cache_dir}.")
        return
    if not settings.offline:
        preflight(plan)
    from wlock.cli.progress import make_progress
    from wlock.policy import Policy, read_policy
    from wlock.policy.gate import admission

    policy = Policy()  # without weights.toml: the default, which refuses unknown imports
    if manifest_path.is_file():
        from wlock.errors import InvalidFileError

        try:
            policy = read_policy(manifest_path)
        except InvalidFileError:
            if not frozen:
                raise
            # --frozen never needs weights.toml: its policy is read when it can be, and the
            # default judges otherwise (failing closed, not open).
            warn(f"{MANIFEST_NAME} cannot be read; judging the bytes with the default policy "
                 "(pickle = \"safe-imports\").", label="note")
    sources = _sources(settings, from_caches, archive_flag, no_archive)
    progress = make_progress("Syncing", plan.bytes_to_fetch, quiet=settings.json)
    try:
        result = execute_plan(
            plan, endpoint=settings.endpoint, token=_token(settings), jobs=jobs,
            connections=connections, timeout=timeout, offline=settings.offline,
            sources=sources,
            on_start=progress.start, on_bytes=progress.advance, on_done=progress.done,
            admit=admission(policy), engine=engine,
            budget=settings.rate_budget(on_wait=progress.note),
        )
    finally:
        progress.close()
    if settings.json:
        emit(_result_json(plan, result, dry_run=False))
        return
    for line in result.refused:
        warn(line)
    if verbosity() >= 1:
        for line in result.upgraded.get("downloaded_whole", ()):
            info(line)
        for label, (engine_used, why) in result.engines.items():
            if engine_used != "hf_transfer":  # the default, said once below
                info(f"{label}: through {engine_used} ({why})")
    info(_summary(plan, result))
    if result.engines and verbosity() >= 1:
        info(_engine_line(result.engines))
    if len(set(result.connections.values())) > 1 and verbosity() >= 1:
        info(_streams_line(result))
    if result.link is not None and verbosity() >= 1:
        info(_link_line(result.link))
    if result.small is not None and verbosity() >= 1:
        info(_small_line(result.small))


def _engine_line(engines: dict[str, tuple[str, str]]) -> str:
    used: dict[str, int] = {}
    for engine_used, _ in engines.values():
        used[engine_used] = used.get(engine_used, 0) + 1
    return "large files: " + ", ".join(f"{count(n, 'file')} through {name}"
                                       for name, n in sorted(used.items()))


def _streams_line(result: SyncResult) -> str:
    """The connections the files got as the sync went on (Streams): each level and its
    files, in the order the levels were first used."""
    levels: dict[int, int] = {}
    for n in result.connections.values():
        levels[n] = levels.get(n, 0) + 1
    return ("connections per large file, chosen as files finished: " + ", ".join(
        f"{n} ({count(k, 'file')})" for n, k in sorted(levels.items())))


def _link_line(link: object) -> str:
    from wlock.cache.engines.link import LinkTuning

    assert isinstance(link, LinkTuning)
    if not link.one_stream:
        return f"link: {link.limit}; {link.per_file} connections per large file"
    rate = human_size(int(link.one_stream))
    when = ("" if link.measured_ago is None else
            f" (measured by another sync of this cache {link.measured_ago:.0f}s ago)")
    return (f"link: one stream {rate}/s, four {link.four_streams / link.one_stream:.1f}x that"
            f"{when}; {link.per_file} connections per large file ({link.files} at once): the "
            f"limit is {link.limit}")


def _small_line(gate: object) -> str:
    from wlock.cache.engines.small import SmallGate

    assert isinstance(gate, SmallGate)
    line = f"small files: up to {gate.ceiling} at once"
    if gate.backoffs:
        line += (f"; the Hub asked for less (429 or 5xx): halved {gate.backoffs} time"
                 f"{'s' if gate.backoffs > 1 else ''}, down to {gate.lowest}, then grown back "
                 f"to {gate.limit}")
    return line


def _summary(plan: SyncPlan, result: SyncResult) -> str:
    """What a sync did, each file counted once: fetched (per source), already downloaded
    and only linked (as after an interrupted sync), or already in place."""
    files = sum(len(r.repo.files) for r in plan.repos)
    linked = plan.files_to_link
    parts = []
    upgraded = result.upgraded.get("files", 0)
    if result.fetched_files or not (result.restored or linked or upgraded):
        parts.append(f"{count(result.fetched_files, 'file')} "
                     f"({human_size(result.fetched_bytes)}) from the Hub")
    parts += [f"{count(n, 'file')} ({human_size(b)}) from {label}"
              for label, (n, b) in result.restored.items()]
    if upgraded:
        copied, fetched = result.upgraded["copied_bytes"], result.upgraded["fetched_bytes"]
        parts.append(f"{count(upgraded, 'file')} upgraded from its cached revision "
                     f"({human_size(fetched)} of changed chunks from the Hub, "
                     f"{human_size(copied)} copied)")
    if result.by_others[0]:
        parts.append(f"{count(result.by_others[0], 'file')} "
                     f"({human_size(result.by_others[1])}) published by another sync meanwhile")
    empty = sum(1 for r in plan.repos for f in r.downloads if not f.size)
    if empty:
        parts.append(f"{count(empty, 'empty file')} written")
    if linked:
        parts.append(f"{linked:,} already downloaded, now linked")
    parts.append(f"{plan.files_present:,} already in place")
    return (f"Synced {count(len(plan.repos), 'repo')} ({count(files, 'file')}) in "
            f"{result.seconds:.1f}s: " + "; ".join(parts) + ".")


def _sources(settings: Settings, from_caches: tuple[Path, ...], archive_flag: str | None,
             no_archive: bool) -> list[BlobSource]:
    """The sources asked before the Hub: other caches, then the archive."""
    from wlock.cache.sources import OtherCache

    sources: list[BlobSource] = []
    for folder in from_caches:
        other = OtherCache(folder)
        if other.folder == settings.cache_dir.expanduser().resolve():
            raise UsageError(f"--from-cache {folder} is the cache being synced",
                             hint="Give another machine's or user's cache.")
        sources.append(other)
    url = None if no_archive else archive_url(settings, archive_flag)
    if url is not None:
        from wlock.archive.oci import OciSource, Target, is_oci
        from wlock.archive.restore import ArchiveSource
        from wlock.archive.store import open_archive

        sources.append(OciSource(Target.parse(url)) if is_oci(url)
                       else ArchiveSource(open_archive(url)))
    return sources


def _token(settings: Settings) -> str | None:
    if settings.token:
        return settings.token
    from huggingface_hub import get_token  # HF_TOKEN, else the stored `hf auth login`

    return get_token()


def _plan_json(plan: SyncPlan) -> dict[str, object]:
    return {
        "cache_dir": plan.cache_dir,
        "repos": [
            {
                "kind": r.repo.kind, "id": r.repo.id, "revision": r.repo.revision,
                "fetch": [f.path for f in r.fetch], "corrupt": [f.path for f in r.corrupt],
                "link": [f.path for f in r.link], "present": r.present, "ref": r.ref,
                "bytes_to_fetch": sum(f.size for f in r.downloads),
            }
            for r in plan.repos
        ],
        "bytes_to_fetch": plan.bytes_to_fetch,
        "files_to_fetch": plan.files_to_fetch,
    }


def _result_json(plan: SyncPlan, result: SyncResult | None, *, dry_run: bool,
                 ) -> dict[str, object]:
    """The same fields for a dry run, a sync with nothing to do, and a real sync."""
    return _plan_json(plan) | {
        "dry_run": dry_run,
        "fetched_files": result.fetched_files if result else 0,
        "fetched_bytes": result.fetched_bytes if result else 0,
        "restored": {label: {"files": n, "bytes": b}
                     for label, (n, b) in (result.restored.items() if result else ())},
        "refused": list(result.refused) if result else [],
        # Files put together from their cached earlier revision and the changed chunks:
        # the Hub's bytes for them are `fetched_bytes` here, not in the top-level count.
        "upgraded": {key: (result.upgraded.get(key, default) if result else default)
                     for key, default in (("files", 0), ("copied_bytes", 0),
                                          ("fetched_bytes", 0), ("downloaded_whole", []))},
        # Each large file the Hub served: the engine that fetched it, and why that one
        # where it is not the default (hf_transfer).
        "engines": _engines_json(result),
        "by_other_syncs": {"files": result.by_others[0] if result else 0,
                           "bytes": result.by_others[1] if result else 0},
        "link": ({"one_stream_bytes_per_s": round(result.link.one_stream),
                  "four_streams_bytes_per_s": round(result.link.four_streams),
                  "connections_per_file": result.link.per_file,
                  "files_at_once": result.link.files, "limit": result.link.limit,
                  "measured_seconds_ago": (None if result.link.measured_ago is None
                                           else round(result.link.measured_ago, 1))}
                 if result and result.link else None),
        "small_files": ({"ceiling": result.small.ceiling, "lowest": result.small.lowest,
                         "backoffs": result.small.backoffs, "final": result.small.limit}
                        if result and result.small else None),
        # Large files hashed again whole after their download (their digest could not
        # follow them as they landed: a filesystem without holes): a second read of them.
        "read_again": {"files": len(result.read_again) if result else 0,
                       "bytes": sum(result.read_again.values()) if result else 0},
        "seconds": round(result.seconds, 3) if result else 0.0,
    }


def _engines_json(result: SyncResult | None) -> dict[str, dict[str, object]]:
    if result is None:
        return {}
    out: dict[str, dict[str, object]] = {}
    for label, (used, why) in result.engines.items():
        out[label] = {"engine": used, "why": why}
        if label in result.connections:
            out[label]["connections"] = result.connections[label]
    return out


def _render_plan(plan: SyncPlan, as_json: bool) -> None:
    if as_json:
        emit(_result_json(plan, None, dry_run=True))
        return
    click.echo(f"Plan for {Path(plan.cache_dir)} (dry run: nothing is changed):")
    for r in plan.repos:
        parts = [f"fetch {len(r.downloads)} ({human_size(sum(f.size for f in r.downloads))})"]
        if r.corrupt:
            parts.append(f"{len(r.corrupt)} of them corrupt")
        parts += [f"link {len(r.link)}", f"present {r.present}"]
        if r.ref:
            parts.append(f"ref {r.ref}")
        click.echo(f"  {r.repo.kind} {r.repo.id} @ {r.repo.revision[:7]}: {', '.join(parts)}")
    linked = plan.files_to_link
    click.echo(f"Would fetch {count(plan.files_to_fetch, 'file')}, "
               f"{human_size(plan.bytes_to_fetch)}; "
               + (f"{linked:,} already downloaded, to link; " if linked else "")
               + f"{plan.files_present:,} already in place.")


def _relock(project: Path, settings: Settings, *, dry_run: bool) -> Lock:
    """As `uv sync`: weights.toml changed since the lock, so lock again first (as `wlock
    lock`, with the project's policy; `--dry-run` writes nothing) and sync that."""
    from wlock.lock.lockfile import LOCK_NAME
    from wlock.lock.resolve import lock_project
    from wlock.policy import enforcer, read_policy

    info(f"{LOCK_NAME} is out of date with weights.toml: locking first (--locked fails "
         "instead, --frozen syncs the lock as it is).")
    result = lock_project(
        project, endpoint=settings.endpoint, token=settings.token, dry_run=dry_run,
        accept=enforcer(project / "weights.toml", "weights.lock was left as it was."),
        scan_limits=read_policy(project / "weights.toml").limits,
        budget=settings.rate_budget(), note=None if settings.json else info)
    return result.lock
