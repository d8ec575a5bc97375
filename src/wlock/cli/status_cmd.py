"""`wlock status`: where this project's weights and data live."""

from __future__ import annotations

from dataclasses import asdict

import click

from wlock.cli.options import Settings, archive_option, archive_url, common_options, lock_option
from wlock.cli.output import emit, warn
from wlock.units import human_size


@click.command()
@archive_option
@click.option("--no-archive", is_flag=True, help="Do not ask the archive what it holds.")
@lock_option
@common_options
def status(archive_flag: str | None, no_archive: bool, settings: Settings) -> None:
    """Show, per locked repo, whether the cache holds it (complete, partial, missing), its
    bytes and folder; the filesystem and mount the cache is on, its free space, whether it
    is volatile (tmpfs: gone at reboot) or a network filesystem; and, with an archive
    configured, whether the archive holds each revision. Never downloads; the archive is
    asked with one listing.

    \b
    Examples:
      wlock status
      wlock status --json | jq '.repos[] | select(.state != "complete")'
      HF_HOME=/dev/shm/hf wlock status        # warns: in memory, gone at reboot
    """
    from wlock.cache.status import cache_status
    from wlock.lock.lockfile import read_lock

    lock = read_lock(settings.lock_path())
    report = cache_status(lock, settings.cache_dir)
    url = None if no_archive else archive_url(settings, archive_flag)
    archived: dict[str, bool] = {}
    if url is not None:
        from wlock.archive.push import revision_name
        from wlock.archive.store import open_archive
        from wlock.errors import WlockError

        try:
            store = open_archive(url)
            blobs, manifests = store.listing("blobs"), store.listing("revisions")
            for locked in lock.repos:
                archived[f"{locked.kind} {locked.id}"] = (
                    revision_name(locked).removeprefix("revisions/") in manifests
                    and all(blobs.get(f.etag) == f.size for f in locked.files))
        except WlockError as e:
            report.warnings.append(f"cannot ask the archive at {url}: {e.message}")
            url = None
    mount = report.mount
    if settings.json:
        emit({
            "cache_dir": report.cache_dir,
            "filesystem": {"type": mount.fstype, "mount_point": mount.point,
                           "source": mount.source, "volatile": mount.volatile,
                           "network": mount.network, "free_bytes": report.free_bytes,
                           "total_bytes": report.total_bytes},
            "archive": url,
            "repos": [asdict(r) | ({"archived": archived[f"{r.kind} {r.id}"]} if url else {})
                      for r in report.repos],
            "warnings": report.warnings,
        })
        return
    traits = [t for t, on in (("volatile: lost at reboot", mount.volatile),
                              ("network filesystem", mount.network)) if on]
    click.echo(f"cache: {report.cache_dir}")
    click.echo(f"  on {mount.fstype} at {mount.point} ({mount.source}), "
               f"{human_size(report.free_bytes)} free of {human_size(report.total_bytes)}"
               + (f"; {', '.join(traits)}" if traits else ""))
    if url:
        click.echo(f"archive: {url}")
    for r in report.repos:
        have = (f"{human_size(r.bytes_present)} of {human_size(r.bytes)}, "
                f"{r.files_present}/{r.files} files")
        extra = ""
        if url:
            extra = ", archived" if archived[f"{r.kind} {r.id}"] else ", NOT archived"
        click.echo(f"  {r.state:8s} {r.kind} {r.id}@{r.revision[:7]}: {have}{extra}")
        click.echo(f"           {r.path}")
    for warning in report.warnings:
        warn(warning)
