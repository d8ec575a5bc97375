"""`wlock checkpoints`: keep the best and the final checkpoint of a run, archived."""

from __future__ import annotations

from pathlib import Path

import click

from wlock.cli.options import Settings, archive_option, archive_url, common_options
from wlock.cli.output import emit, info, warn
from wlock.errors import UsageError
from wlock.units import count, human_size


@click.group()
def checkpoints() -> None:
    """Keep the checkpoints of a training run that matter, and free the rest.

    Reads the transformers Trainer's layout (checkpoint-N/ with trainer_state.json),
    PyTorch Lightning's *.ckpt names (epoch=3-step=400-val_loss=0.25.ckpt), or, for any
    trainer, wlock-checkpoints.jsonl in the run folder: one line per checkpoint,
    {"path": "ckpt/step-400", "step": 400, "metrics": {"eval_loss": 0.25}}.

    \b
    Examples:
      wlock checkpoints keep out/run-7 --dry-run
      wlock checkpoints keep out/run-7 --archive s3://ml-weights/checkpoints
      wlock checkpoints restore out/run-7 checkpoint-1200
    """


def _run_name(run: Path, name: str | None) -> str:
    return name or run.resolve().name


@checkpoints.command()
@click.argument("run", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--metric", metavar="NAME",
              help="The eval metric that chooses the best (default: the Trainer's "
              "best_model_checkpoint, else eval_loss).")
@click.option("--mode", type=click.Choice(["min", "max"]),
              help="Whether lower or higher is better (default: min for a loss or error).")
@click.option("--settle", type=click.FloatRange(0), default=10, show_default=True,
              metavar="MINUTES", help="A checkpoint changed this recently is left alone.")
@click.option("--name", metavar="RUN", help="The run's name in the archive (default: the "
              "folder's name).")
@click.option("--no-archive", is_flag=True,
              help="Delete the others without archiving the kept ones (not recommended).")
@click.option("--dry-run", is_flag=True, help="Print the plan and the bytes it frees.")
@archive_option
@common_options
def keep(run: Path, metric: str | None, mode: str | None, settle: float, name: str | None,
         no_archive: bool, dry_run: bool, archive_flag: str | None, settings: Settings) -> None:
    """Keep RUN's best-by-eval and final checkpoints, archive and verify both, then delete
    the other checkpoints from the working tier.

    Nothing is deleted unless both kept checkpoints are in the archive, verified; nor while
    a process has files open in RUN (the training is alive); nor any checkpoint changed in
    the last --settle minutes. A run without evaluation keeps its final checkpoint only.

    \b
    Examples:
      wlock checkpoints keep out/run-7 --dry-run
      wlock checkpoints keep out/run-7 --metric eval_accuracy --mode max --archive s3://b/ckpt
      wlock checkpoints restore out/run-7 checkpoint-1200
    """
    from wlock.archive.checkpoints import (
        archive_checkpoint,
        delete_checkpoints,
        open_pids,
        plan_retention,
        verify_archived,
    )

    plan = plan_retention(run, metric=metric, mode=mode, settle=settle * 60)
    plan.alive = open_pids(run)
    url = None if no_archive else archive_url(settings, archive_flag)
    if not dry_run and url is None and not no_archive:
        raise UsageError("no archive to keep the checkpoints in",
                         hint="Pass --archive URL (or set $WLOCK_ARCHIVE, or [tool.wlock."
                         "archive] in weights.toml); --no-archive deletes without a copy.")
    if not dry_run and plan.alive:
        raise UsageError(f"the run in {run} is alive: process {', '.join(map(str, plan.alive))} "
                         "has files open there; nothing was deleted",
                         hint="Run this once training has ended (--dry-run shows the plan).")
    deleted: list[tuple[str, int]] = []
    manifests = []
    if not dry_run and not plan.waiting:
        if url is not None and plan.keep:
            from wlock.archive.store import open_archive

            store = open_archive(url)
            there = store.listing("blobs")  # once for both: shared files upload once
            for c in plan.keep:
                reason = "+".join(r for r, k in (("best", plan.best), ("final", plan.final))
                                  if k is c)
                manifests.append(archive_checkpoint(store, _run_name(run, name), c, reason,
                                                    plan, there))
            # Only once both copies are verified in the archive is anything deleted.
            verify_archived(store, manifests)
        deleted = delete_checkpoints(plan)
    # Figures: the plan's for a dry run; what left the disk, measured before each deletion,
    # for a real one. The two agree when nothing changed in between.
    freed = plan.bytes_to_free if dry_run else sum(size for _, size in deleted)
    waiting = _waiting(plan, settle) if plan.waiting else None
    if settings.json:
        emit({
            "run": str(run), "dry_run": dry_run, "archive": url, "metric": plan.metric,
            "mode": plan.mode, "why_best": plan.why_best,
            "best": plan.best.name if plan.best else None,
            "final": plan.final.name if plan.final else None,
            "delete": [c.name for c in plan.delete],
            "deleted": [n for n, _ in deleted],
            "deleted_bytes": dict(deleted),
            "in_progress": [c.name for c in plan.in_progress], "alive": plan.alive,
            "settle_minutes": settle, "waiting": waiting,
            "bytes_freed": freed, "archived": [m["checkpoint"] for m in manifests],
        })
        return
    click.echo(f"best:  {plan.best.name if plan.best else '-'}  ({plan.why_best})")
    click.echo(f"final: {plan.final.name if plan.final else '-'}")
    for c in plan.in_progress:
        click.echo(f"  left alone: {c.name} changed {_ago(plan, c)} ago, within --settle "
                   f"{settle:g} min")
    if dry_run:
        for c in plan.delete:
            click.echo(f"  would delete {c.name} ({human_size(c.size)})")
    for checkpoint, size in deleted:
        click.echo(f"  deleted {checkpoint} ({human_size(size)})")
    if waiting:
        warn(waiting, label="note")
    if plan.alive:
        warn(f"process {', '.join(map(str, plan.alive))} has files open in {run}: "
             "the run is alive; keep would delete nothing now.", label="note")
    if manifests:
        info(f"Archived {count(len(manifests), 'checkpoint')} to {url}, verified.")
    what = len(plan.delete) if dry_run else len(deleted)
    info(f"{'Would free' if dry_run else 'Freed'} {human_size(freed)} "
         f"({count(what, 'checkpoint')}).")


def _waiting(plan: object, settle: float) -> str:
    from wlock.archive.checkpoints import RetentionPlan

    assert isinstance(plan, RetentionPlan)
    roles = ", ".join(f"{'best' if c is plan.best else 'final'} {c.name}"
                      + (" (also final)" if c is plan.best and c is plan.final else "")
                      for c in plan.waiting)
    return (f"nothing is archived or deleted yet: the {roles} changed within --settle "
            f"{settle:g} min (it may still be being written). Run again once it has "
            "settled, or pass --settle 0 if the run has ended.")


def _ago(plan: object, checkpoint: object) -> str:
    import time

    from wlock.archive.checkpoints import Checkpoint

    assert isinstance(checkpoint, Checkpoint)
    seconds = max(0.0, time.time() - checkpoint.changed)
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"


@checkpoints.command()
@click.argument("run", type=click.Path(file_okay=False, path_type=Path))
@click.argument("checkpoint")
@click.option("--name", metavar="RUN", help="The run's name in the archive (default: the "
              "folder's name).")
@archive_option
@common_options
def restore(run: Path, checkpoint: str, name: str | None, archive_flag: str | None,
            settings: Settings) -> None:
    """Bring a kept CHECKPOINT of RUN back from the archive, every file verified."""
    from wlock.archive.checkpoints import restore_checkpoint
    from wlock.archive.store import open_archive

    url = archive_url(settings, archive_flag)
    if url is None:
        raise UsageError("no archive to restore from",
                         hint="Pass --archive URL (or set $WLOCK_ARCHIVE).")
    run.mkdir(parents=True, exist_ok=True)
    total = restore_checkpoint(open_archive(url), run, _run_name(run, name), checkpoint)
    if settings.json:
        emit({"run": str(run), "checkpoint": checkpoint, "bytes": total})
    else:
        info(f"Restored {checkpoint} into {run} ({human_size(total)}), verified.")
