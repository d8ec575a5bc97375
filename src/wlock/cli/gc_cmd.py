"""`wlock gc`: free the cache of the revisions no kept lock uses."""

from __future__ import annotations

import time
from pathlib import Path

import click

from wlock.cli.options import Settings, common_options, lock_option
from wlock.cli.output import emit, info, warn
from wlock.errors import UsageError
from wlock.units import count, human_size


@click.command()
@click.option("--keep-lock", "keep_locks", multiple=True, metavar="FILE",
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Another project's weights.lock whose revisions stay; repeatable (many "
              "projects share one cache).")
@click.option("--keep-newer", type=click.FloatRange(0), metavar="DAYS",
              help="Also keep any revision used (its snapshot changed) in the last DAYS days.")
@click.option("--no-project", is_flag=True,
              help="Keep only what --keep-lock names, not this project's lock.")
@click.option("--dry-run", is_flag=True, help="Print what would be removed; change nothing.")
@lock_option
@common_options
def gc(keep_locks: tuple[Path, ...], keep_newer: float | None, no_project: bool,
       dry_run: bool, settings: Settings) -> None:
    """Remove from the cache every revision that no kept lock pins.

    Kept: the revisions of this project's lock and of every --keep-lock (and, with
    --keep-newer, recently used ones). Removal goes through huggingface_hub's own cache
    deletion plan, so a blob that a kept revision links to is never removed; a commit shared
    by a fork of a kept repo is kept too. Prints each revision removed and the bytes freed.

    \b
    Examples:
      wlock gc --dry-run
      wlock gc --keep-lock ../other-project/weights.lock
      HF_HOME=/shared/hf wlock gc --no-project --keep-lock a/weights.lock --keep-lock b/weights.lock
    """
    from wlock.cache.gc import execute_gc, plan_gc
    from wlock.lock.lockfile import read_lock

    paths = list(keep_locks) if no_project else [settings.lock_path(), *keep_locks]
    if not paths:
        raise UsageError("--no-project without --keep-lock would remove every revision",
                         hint="Name the locks to keep with --keep-lock FILE.")
    locks = [read_lock(p) for p in paths]
    plan = plan_gc(settings.cache_dir, locks, keep_newer_days=keep_newer)
    freed = plan.freed_bytes if dry_run else execute_gc(plan)
    if settings.json:
        emit({
            "cache_dir": plan.cache_dir, "dry_run": dry_run,
            "kept_locks": [str(p) for p in paths], "kept_revisions": plan.kept,
            "removed": [{"kind": r.kind, "id": r.id, "revision": r.revision,
                         "refs": list(r.refs), "files": r.files} for r in plan.remove],
            "freed_bytes": freed, "shared_commits_kept": plan.shared,
            "warnings": plan.warnings,
        })
        return
    verb = "would remove" if dry_run else "removed"
    for r in plan.remove:
        refs = f" ({', '.join(r.refs)})" if r.refs else ""
        age = (time.time() - r.last_used) / 86400
        click.echo(f"  {verb} {r.kind} {r.id}@{r.revision[:7]}{refs}: {r.files} files, "
                   f"last used {age:.0f} days ago")
    for line in plan.shared:
        click.echo(f"  kept {line}: a kept revision of another repo has the same commit")
    for warning in plan.warnings:
        warn(warning)
    info(f"{'Would free' if dry_run else 'Freed'} {human_size(freed)} in "
         f"{plan.cache_dir}: {count(len(plan.remove), 'revision')} {verb}, {plan.kept} kept "
         f"(used by {count(len(paths), 'lock')}).")
