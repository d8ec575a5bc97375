"""`wlock outdated`: the pins whose refs have moved, as `npm outdated` shows them."""

from __future__ import annotations

import click

from wlock.cli.options import Settings, common_options
from wlock.cli.output import emit, info
from wlock.errors import ExitCode


@click.command()
@click.option("--jobs", "-j", type=click.IntRange(1, 128), default=16, show_default=True,
              help="Repos asked at once.")
@click.option("--timeout", type=click.FloatRange(0.1, 3600), default=30, show_default=True,
              metavar="SECONDS",
              help="Give up on a Hub request that answers nothing for this long (tried twice).")
@common_options
def outdated(jobs: int, timeout: float, settings: Settings) -> None:
    """Show each locked entry whose ref has moved past its pin: the locked commit, the ref's
    head now, the head's date and title, and how many commits behind. Exit 1 when any has
    moved (as `npm outdated`), 0 when none has. Online: one request per repo when the pin is
    among its ref's newest 50 commits; entries pinned by a commit never move.

    \b
    Examples:
      wlock outdated
      wlock outdated --json | jq -r '.entries[] | select(.moved) | .id'
      wlock lock --upgrade-package org/model   # then move the one you chose
    """
    from wlock.lock.hub import HubClient
    from wlock.lock.lockfile import read_lock
    from wlock.lock.manifest import MANIFEST_NAME, read_manifest
    from wlock.lock.outdated import behind_words
    from wlock.lock.outdated import outdated as find

    project = settings.project()
    manifest, lock = read_manifest(project / MANIFEST_NAME), read_lock(settings.lock_path())
    client = HubClient(settings.endpoint, settings.token, timeout=timeout,
                       budget=settings.rate_budget(), note=None if settings.json else info)
    pins = find(manifest, lock, client, jobs)
    moved = [p for p in pins if p.moved]
    if settings.json:
        emit({"ok": not moved, "exit_code": ExitCode.CHECK_FAILED if moved else 0,
              "entries": [p.as_json() for p in pins]})
    else:
        width = max((len(p.id) for p in pins), default=2)
        for p in pins:
            if p.moved:
                when = f"  {p.head_date[:10]}" if p.head_date else ""
                title = f"  {p.head_title}" if p.head_title else ""
                click.echo(f"{p.id:{width}s}  {p.ref:10s}  {p.locked[:7]} -> {p.head[:7]}"
                           f"  {behind_words(p)}{when}{title}")
            else:
                click.echo(f"{p.id:{width}s}  {p.ref:10s}  {p.locked[:7]}  up to date")
        if moved:
            info(f"{len(moved)} of {len(pins)} moved: `wlock lock --upgrade-package ID` moves "
                 "one, `wlock lock --upgrade` all.")
    if moved:
        raise SystemExit(ExitCode.CHECK_FAILED)
