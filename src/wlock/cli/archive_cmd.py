"""`wlock archive`: copy the locked set from the cache into the archive tier."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from wlock.cli.options import Settings, archive_url, common_options, lock_option
from wlock.cli.output import emit, error, info
from wlock.errors import CheckFailedError, ExitCode, UsageError
from wlock.units import count, human_size

if TYPE_CHECKING:
    from wlock.archive.push import ArchiveResult
    from wlock.models import LockedFile, LockedRepo


@click.command()
@click.option("--to", "to", metavar="URL",
              help="A folder (a NAS mount), s3://bucket/prefix or oci://REGISTRY/NAMESPACE "
              "(default: $WLOCK_ARCHIVE, else [tool.wlock.archive] url in weights.toml).")
@click.option("--tag", metavar="NAME", default=None,
              help="With oci://: tag each pushed artifact NAME too (besides its commit).")
@click.option("--jobs", "-j", type=click.IntRange(1, 64), default=8, show_default=True,
              help="Blobs uploaded at once.")
@click.option("--dry-run", is_flag=True, help="Print what would be uploaded; change nothing.")
@lock_option
@common_options
def archive(to: str | None, tag: str | None, jobs: int, dry_run: bool,
            settings: Settings) -> None:
    """Copy every locked blob from the cache into the archive, verified on the way in.

    The archive is content-addressed (each blob once, under the name the lock gives it) and
    self-describing (per locked revision, a manifest of its files, sizes and hashes). What
    it already holds is found with one listing and not uploaded again; an upload becomes
    visible only once complete and verified. Afterwards `wlock sync` restores from it
    without the Hub (it is asked before the Hub whenever an archive is configured).

    An OCI registry (oci://REGISTRY/NAMESPACE) gets each locked repo as a CNCF ModelPack
    artifact, NAMESPACE/<org>/<name>:<commit>, with the Hub's provenance.

    \b
    Credentials and endpoint for s3:// come from the environment, never from weights.toml:
      AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, or AWS_PROFILE
      AWS_ENDPOINT_URL    for a store other than AWS (MinIO, SeaweedFS, Ceph, R2)
    For oci://, from `docker login` / `podman login` (REGISTRY_AUTH_FILE, DOCKER_CONFIG).
    \b
    Examples:
      wlock archive --to /mnt/nas/weights
      wlock archive --to s3://ml-weights/archive
      wlock archive --to oci://registry.example.com/ml
      wlock archive --dry-run
    """
    from wlock.archive.push import archive_lock, plan_archive
    from wlock.archive.store import open_archive
    from wlock.cli.progress import make_progress
    from wlock.lock.lockfile import read_lock

    url = archive_url(settings, to)
    if url is None:
        raise UsageError("no archive given",
                         hint="Pass --to URL (a folder or s3://bucket/prefix), set "
                         "$WLOCK_ARCHIVE, or add [tool.wlock.archive] url = \"...\" to "
                         "weights.toml.")
    lock = read_lock(settings.lock_path())
    from wlock.archive.oci import is_oci

    if is_oci(url):
        _push_oci(lock, url, tag, dry_run, settings)
        return
    if tag is not None:
        raise UsageError(f"--tag {tag}: only an oci:// archive has tags",
                         hint="Drop --tag, or push to oci://REGISTRY/NAMESPACE.")
    store = open_archive(url)
    plan = plan_archive(lock, store)
    todo, present = plan
    to_upload = sum(f.size for _, f in todo.values())
    if dry_run:
        if settings.json:
            emit(_document(store.url, todo, present, None))
            return
        for repo, f in sorted(todo.values(), key=lambda t: (t[0].id, t[1].path)):
            click.echo(f"  upload {repo.id}/{f.path} ({human_size(f.size)})")
        click.echo(f"Would upload {len(todo)} blobs ({human_size(to_upload)}) to {store.url}; "
                   f"{present} already there.")
        return
    progress = make_progress("Archiving", to_upload, quiet=settings.json)
    try:
        result = archive_lock(lock, settings.cache_dir, store, jobs=jobs, plan=plan,
                              on_bytes=progress.advance)
    finally:
        progress.close()
    if settings.json:
        emit(_document(store.url, todo, present, result))
    else:
        info(f"Archived to {result.url}: uploaded {count(result.uploaded_files, 'blob')} "
             f"({human_size(result.uploaded_bytes)}), {result.present_files} already "
             f"there; {len(result.complete)} of {count(len(lock.repos), 'revision')} complete.")
    problems: list[CheckFailedError] = []
    if result.wrong:
        problems.append(CheckFailedError(
            f"{len(result.wrong)} blobs in the cache have wrong bytes and were not "
            "archived:\n" + "\n".join(f"  {w}" for w in sorted(result.wrong)),
            hint="Run `wlock sync --verify` to repair the cache, then archive again."))
    if result.missing:
        shown = sorted(result.missing)
        problems.append(CheckFailedError(
            f"{len(shown)} locked files are neither in the cache at {settings.cache_dir} nor "
            "in the archive, so they were not archived:\n"
            + "\n".join(f"  {m}" for m in shown[:20])
            + (f"\n  ... and {len(shown) - 20} more" if len(shown) > 20 else ""),
            hint="Run `wlock sync` first, then archive again."))
    if problems and settings.json:
        # The report above is the one JSON document; the words go to stderr.
        for problem in problems:
            error(problem.message, problem.hint)
        raise SystemExit(ExitCode.CHECK_FAILED)
    if problems:
        raise problems[0] if len(problems) == 1 else CheckFailedError(
            "\n".join(p.message for p in problems), hint=problems[0].hint)


def _document(url: str, todo: dict[str, tuple[LockedRepo, LockedFile]], present: int,
              result: ArchiveResult | None) -> dict[str, object]:
    """The same fields for a dry run and a real one (`dry_run` says which)."""
    return {
        "ok": not (result and (result.missing or result.wrong)), "url": url,
        "dry_run": result is None,
        "files_to_upload": len(todo), "bytes_to_upload": sum(f.size for _, f in todo.values()),
        "upload": sorted(f"{r.id}/{f.path}" for r, f in todo.values()),
        "files_present": present,
        "uploaded_files": result.uploaded_files if result else 0,
        "uploaded_bytes": result.uploaded_bytes if result else 0,
        "manifests_written": result.manifests_written if result else 0,
        "complete": result.complete if result else [],
        "missing": sorted(result.missing) if result else [],
        "wrong": sorted(result.wrong) if result else [],
    }


def _push_oci(lock: Any, url: str, tag: str | None, dry_run: bool, settings: Settings
              ) -> None:
    """`wlock archive --to oci://REGISTRY/NAMESPACE`: each locked repo as a ModelPack
    artifact (wlock.archive.oci)."""
    import re

    from wlock.archive.oci import Target, push_lock
    from wlock.cli.progress import make_progress

    target = Target.parse(url)
    if tag is not None and not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}", tag):
        raise UsageError(f"--tag {tag}: not an OCI tag",
                         hint="A tag is letters, digits, _ . and - (128 at most), not "
                         "starting with . or -.")
    if dry_run:
        for repo in lock.repos:
            click.echo(f"  push {repo.kind} {repo.id}@{repo.revision[:7]} -> "
                       f"{target.reference(repo)} ({len(repo.files)} layers)")
        return
    total = sum(f.size for repo in lock.repos for f in repo.files)
    progress = make_progress("Pushing", total, quiet=settings.json)
    try:
        result = push_lock(lock, settings.cache_dir, target, tag=tag, on_bytes=progress.advance)
    finally:
        progress.close()
    if settings.json:
        emit({"url": result.url, "uploaded_files": result.uploaded_files,
              "uploaded_bytes": result.uploaded_bytes, "present_files": result.present_files,
              "mounted_files": result.mounted_files,
              "artifacts": result.artifacts, "missing": result.missing, "wrong": result.wrong})
    else:
        info(f"Pushed to {result.url}: uploaded {count(result.uploaded_files, 'blob')} "
             f"({human_size(result.uploaded_bytes)}), {result.present_files} already there, "
             f"{result.mounted_files} mounted from another repository; "
             f"{count(len(result.artifacts), 'artifact')} of {len(lock.repos)} complete.")
    if result.missing or result.wrong:
        shown = sorted(result.missing + result.wrong)
        raise CheckFailedError(
            f"{len(shown)} locked files could not be pushed from the cache at "
            f"{settings.cache_dir}:\n" + "\n".join(f"  {m}" for m in shown[:20]),
            hint="Run `wlock sync --verify` first, then push again.")
