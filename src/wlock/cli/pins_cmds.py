"""Pins you can see and use: `wlock list`, `wlock revision ID`, `wlock path ID`."""

from __future__ import annotations

import click

from wlock.cli.completion_cmd import locked_ids
from wlock.cli.options import Settings, common_options, lock_option
from wlock.cli.output import emit
from wlock.units import human_size


@click.command(name="list")
@lock_option
@common_options
def list_(settings: Settings) -> None:
    """List the locked entries: kind, id, ref, commit, files, bytes, and whether the cache
    holds them (complete, partial, missing). Offline; `stat` only.

    \b
    Examples:
      wlock list
      wlock list --json | jq -r '.repos[] | "\\(.id) \\(.revision)"'
    """
    from wlock.cache.status import cache_status
    from wlock.lock.lockfile import read_lock

    lock = read_lock(settings.lock_path())
    states = {(r.kind, r.id): r for r in cache_status(lock, settings.cache_dir).repos}
    if settings.json:
        emit({"lock": str(settings.lock_path()), "repos": [
            {"kind": r.kind, "id": r.id, "requested": r.requested, "revision": r.revision,
             "files": len(r.files), "bytes": r.size, "cache": states[r.key].state,
             "path": states[r.key].path} for r in lock.repos]})
        return
    width = max((len(r.id) for r in lock.repos), default=2)
    for r in lock.repos:
        click.echo(f"{r.kind:7s}  {r.id:{width}s}  {r.requested:12s}  {r.revision}  "
                   f"{len(r.files):5d} files  {human_size(r.size):>9s}  {states[r.key].state}")


@click.command()
@click.argument("repo_id", metavar="ID", shell_complete=locked_ids)
@click.option("--dataset", is_flag=True, help="ID is a dataset (when both are locked).")
@lock_option
@common_options
def revision(repo_id: str, dataset: bool, settings: Settings) -> None:
    """Print the 40-hex commit weights.lock pins ID to (ids compare as the Hub compares
    them, without regard to case).

    \b
    Examples:
      python train.py --revision "$(wlock revision org/model)"
    """
    from wlock.api import locked

    repo = locked(repo_id, kind="dataset" if dataset else None, lock=settings.lock_path())
    if settings.json:
        emit({"kind": repo.kind, "id": repo.id, "revision": repo.revision})
    else:
        click.echo(repo.revision)


@click.command()
@click.argument("repo_id", metavar="ID", shell_complete=locked_ids)
@click.option("--dataset", is_flag=True, help="ID is a dataset (when both are locked).")
@lock_option
@common_options
def path(repo_id: str, dataset: bool, settings: Settings) -> None:
    """Print the cache folder of the commit weights.lock pins ID to: for tools that take a
    folder. Exit 1 when the cache does not hold it (run `wlock sync`).

    \b
    Examples:
      vllm serve "$(wlock path org/model)"
      ls "$(wlock path acme/gsm-mini --dataset)"
    """
    from wlock.api import NotSyncedError, snapshot_path
    from wlock.errors import CheckFailedError

    try:
        folder = snapshot_path(repo_id, kind="dataset" if dataset else None,
                               lock=settings.lock_path(), cache_dir=settings.cache_dir)
    except NotSyncedError as e:
        raise CheckFailedError(e.message, hint=e.hint) from None
    if settings.json:
        emit({"id": repo_id, "path": str(folder)})
    else:
        click.echo(folder)
