"""`wlock lock`: resolve weights.toml into weights.lock."""

from __future__ import annotations

import json
import time

import click

from wlock.cli.options import Settings, common_options, offline_option
from wlock.units import human_size


@click.command()
@click.option("--check", is_flag=True,
              help="Exit 3 if weights.lock does not match weights.toml; no network request.")
@click.option("--dry-run", is_flag=True, help="Show what would change; write nothing.")
@click.option("--upgrade", "-U", is_flag=True, help="Move every pin to its ref's current commit.")
@click.option("--upgrade-package", "-P", multiple=True, metavar="ID",
              help="Move only this entry's pin (repeatable).")
@click.option("--jobs", "-j", type=click.IntRange(1, 128), default=16, show_default=True,
              help="Repos resolved at once.")
@click.option("--timeout", type=click.FloatRange(0.1, 3600), default=30, show_default=True,
              metavar="SECONDS",
              help="Give up on a Hub request that answers nothing for this long (tried twice).")
@offline_option
@common_options
def lock(
    check: bool, dry_run: bool, upgrade: bool, upgrade_package: tuple[str, ...], jobs: int,
    timeout: float, settings: Settings,
) -> None:
    """Pin every entry of weights.toml to a commit, and every file to its size and hash.

    Existing pins are kept while their entry is unchanged; no weights are downloaded. A
    weights.lock with git merge-conflict markers is resolved: every pin both sides agree on
    (or only one side has) is kept, and each choice is printed.

    \b
    Examples:
      wlock lock                          # pin new and changed entries
      wlock lock --check                  # in CI: is weights.lock up to date?
      wlock lock --upgrade-package acme/tiny-bert --dry-run
      wlock lock --upgrade                # move every pin to its ref's newest commit
      HF_HUB_OFFLINE=1 wlock lock         # no request: fine while weights.toml is unchanged
    """
    from wlock.lock.resolve import lock_project

    if check and dry_run:
        raise click.UsageError("--check and --dry-run cannot be used together")
    project = settings.project()
    started = time.monotonic()
    result = lock_project(
        project, endpoint=settings.endpoint, token=settings.token, check=check,
        dry_run=dry_run, upgrade=upgrade, upgrade_packages=upgrade_package, jobs=jobs,
        timeout=timeout, offline=settings.offline,
    )
    elapsed = time.monotonic() - started
    for note in result.notes:
        click.echo(f"merge: {note}", err=True)
    for old, new in result.renamed:
        click.echo(f"warning: {old} was renamed to {new} on the Hub; "
                   f"consider updating weights.toml", err=True)
    if settings.json:
        click.echo(json.dumps({
            "lock": str(project / "weights.lock"),
            "written": result.written,
            "merge": list(result.notes),
            "changes": [
                {"kind": c.kind, "id": c.id, "requested": c.requested, "old": c.old, "new": c.new}
                for c in result.changes
            ],
            "repos": len(result.lock.repos),
            "files": sum(len(r.files) for r in result.lock.repos),
            "bytes": sum(r.size for r in result.lock.repos),
        }, indent=2))
        return
    for change in result.changes:
        click.echo(change.render())
    repos = len(result.lock.repos)
    files = sum(len(r.files) for r in result.lock.repos)
    size = human_size(sum(r.size for r in result.lock.repos))
    if check:
        click.echo(f"weights.lock is up to date ({repos} repos, {files} files, {size}).",
                   err=True)
    elif dry_run:
        what = f"{len(result.changes)} change(s)" if result.changes else "no changes"
        click.echo(f"Would write weights.lock: {what}. (--dry-run: nothing written)", err=True)
    else:
        verb = "Wrote" if result.written else "Unchanged:"
        click.echo(f"{verb} weights.lock: {repos} repos, {files} files, {size} "
                   f"in {elapsed:.2f}s.", err=True)
