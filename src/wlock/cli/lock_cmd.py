"""`wlock lock`: resolve weights.toml into weights.lock."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from wlock.cli.options import Settings, common_options, offline_option
from wlock.cli.output import emit, info, warn
from wlock.units import count, human_size

if TYPE_CHECKING:
    from wlock.cache.estimate import Estimate
    from wlock.models import Lock


@click.command()
@click.option("--check", is_flag=True,
              help="Exit 3 if weights.lock does not match weights.toml; no network request.")
@click.option("--rescan", is_flag=True,
              help="With --check: judge every locked file again from the Hub's bytes (HTTP "
              "ranges, never the tensors), against the policy and the lock's records.")
@click.option("--remote", is_flag=True,
              help="With --check: compare every file line of weights.lock with what the Hub "
              "attests at its pinned commit (files added, removed, or with another size or "
              "hash: exit 3). Online; for CI.")
@click.option("--dry-run", is_flag=True, help="Show what would change; write nothing.")
@click.option("--upgrade", "-U", is_flag=True, help="Move every pin to its ref's current commit.")
@click.option("--upgrade-package", "-P", multiple=True, metavar="ID",
              help="Move only this entry's pin (repeatable).")
@click.option("--format", "report_format", type=click.Choice(["text", "markdown"]),
              default="text", show_default=True,
              help="The upgrade report's form (for pins that move): markdown for a pull "
              "request's body. --json carries it too.")
@click.option("--jobs", "-j", type=click.IntRange(1, 128), default=16, show_default=True,
              help="Repos resolved at once.")
@click.option("--timeout", type=click.FloatRange(0.1, 3600), default=30, show_default=True,
              metavar="SECONDS",
              help="Give up on a Hub request that answers nothing for this long (tried twice).")
@click.option("--from-record", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              metavar="LOG", help="Rebuild the lock a recorded run used (from `wlock record` "
              "or `run --record`), without the Hub; weights.toml is not read.")
@click.option("--run", "run_id", metavar="RUN_ID",
              help="With --from-record: which run of the log (default: the last).")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="With --from-record: where to write it (default: weights.lock in the "
              "project, or here).")
@offline_option
@common_options
def lock(
    check: bool, rescan: bool, remote: bool, dry_run: bool, upgrade: bool,
    upgrade_package: tuple[str, ...], report_format: str, jobs: int, timeout: float,
    from_record: Path | None, run_id: str | None, output: Path | None,
    settings: Settings,
) -> None:
    """Pin every entry of weights.toml to a commit, and every file to its size and hash.

    Existing pins are kept while their entry is unchanged; no weights are downloaded. A
    weights.lock with git merge-conflict markers is resolved: every pin both sides agree on
    (or only one side has) is kept, and each choice is printed.

    \b
    Examples:
      wlock lock                          # pin new and changed entries
      wlock lock --check                  # in CI: is weights.lock up to date?
      wlock lock --check --remote         # ... and is every file line the Hub's?
      wlock lock --check --rescan         # ... and are its records the Hub's bytes?
      wlock lock --upgrade-package acme/tiny-bert --dry-run
      wlock lock --upgrade --dry-run --format markdown > body.md   # for a pull request
      wlock lock --upgrade                # move every pin to its ref's newest commit
      HF_HUB_OFFLINE=1 wlock lock         # no request: fine while weights.toml is unchanged
      wlock lock --from-record runs.jsonl # the lock the last recorded run used
    """
    if from_record is not None:
        _from_record(from_record, run_id, output, settings)
        return
    if run_id is not None or output is not None:
        raise click.UsageError("--run and --output need --from-record")
    from wlock.lock.resolve import lock_project

    if check and dry_run:
        raise click.UsageError("--check and --dry-run cannot be used together")
    if rescan and not check:
        raise click.UsageError("--rescan needs --check (a plain `wlock lock` judges what it "
                               "resolves anew)")
    if remote and not check:
        raise click.UsageError("--remote needs --check (a plain `wlock lock` lists every "
                               "file it writes from the Hub)")
    from wlock.errors import LockStaleError
    from wlock.policy import enforcer, read_policy

    project = settings.project()
    started = time.monotonic()
    before = _lock_before(project)
    try:
        result = lock_project(
            project, endpoint=settings.endpoint, token=settings.token, check=check,
            dry_run=dry_run, upgrade=upgrade, upgrade_packages=upgrade_package, jobs=jobs,
            timeout=timeout, offline=settings.offline,
            accept=enforcer(project / "weights.toml", "weights.lock was left as it was."),
            scan_limits=read_policy(project / "weights.toml").limits,
            budget=settings.rate_budget(), note=None if settings.json else info,
        )
    except LockStaleError:
        if remote and before is not None:
            # A line deleted by hand: the Hub names the file (the offline check only that
            # the entry was edited).
            _remote(before, project, jobs, timeout, settings)
        raise
    if remote:
        _remote(result.lock, project, jobs, timeout, settings)
    if rescan:
        _rescan(result.lock, project, jobs, timeout, settings)
    elapsed = time.monotonic() - started
    for note in result.notes:
        info(f"merge: {note}")
    for line in result.selected:
        info(line)
    for old, new in result.renamed:
        warn(f"{old} was renamed to {new} on the Hub; consider updating weights.toml")
    from wlock.lock.report import render_markdown, render_text, upgrade_report

    report = upgrade_report(before, result.lock) if not check else []
    planned = None
    if dry_run and result.changes and not settings.offline:
        planned = _estimate(result.lock, settings, timeout)
        for r in report:  # chunk-exact where Xet allows: what sync would fetch here
            r.cache_bytes = planned.by_repo.get((r.kind, r.id), 0)
    if report_format == "markdown" and settings.json:
        raise click.UsageError("--format markdown and --json: choose one")
    if settings.json:
        emit({
            "report": [r.as_json() for r in report],
            "lock": str(project / "weights.lock"),
            "written": result.written,
            "merge": list(result.notes),
            "selected": list(result.selected),
            "changes": [
                {"kind": c.kind, "id": c.id, "requested": c.requested, "old": c.old, "new": c.new}
                for c in result.changes
            ],
            "repos": len(result.lock.repos),
            "files": sum(len(r.files) for r in result.lock.repos),
            "bytes": sum(r.size for r in result.lock.repos),
        })
        return
    if report_format == "markdown":
        click.echo(render_markdown(report), nl=False)
    else:
        # A pin that moves (or whose files are re-selected) gets the reviewer's report; a
        # new or removed entry, its one line.
        reviewed = {(r.kind, r.id) for r in report}
        for change in result.changes:
            if (change.kind, change.id) not in reviewed:
                click.echo(change.render())
        if report:
            click.echo(render_text(report))
    repos = count(len(result.lock.repos), "repo")
    files = count(sum(len(r.files) for r in result.lock.repos), "file")
    size = human_size(sum(r.size for r in result.lock.repos))
    if check:
        info(f"weights.lock is up to date ({repos}, {files}, {size}).")
    elif dry_run:
        what = count(len(result.changes), "change") if result.changes else "no changes"
        info(f"Would write weights.lock: {what}. (--dry-run: nothing written)")
        if planned is not None:
            info(_download_line(planned, settings))
    else:
        verb = "Wrote" if result.written else "Unchanged:"
        info(f"{verb} weights.lock: {repos}, {files}, {size} in {elapsed:.2f}s.")


def _lock_before(project: Path) -> Lock | None:
    """The lock on disk before this one is made (None: none, or one that does not parse:
    the report then treats every entry as new)."""
    from wlock.errors import WlockError
    from wlock.lock.lockfile import read_lock

    try:
        return read_lock(project / "weights.lock")
    except (WlockError, OSError):
        return None


def _remote(lock: object, project: Path, jobs: int, timeout: float, settings: Settings
            ) -> None:
    """`--check --remote`: weights.lock's every file line against the Hub, or exit 3 naming
    each difference."""
    from wlock.errors import LockStaleError
    from wlock.lock.manifest import read_manifest
    from wlock.lock.resolve import verify_remote
    from wlock.models import Lock

    assert isinstance(lock, Lock)
    findings = verify_remote(read_manifest(project / "weights.toml"), lock,
                             endpoint=settings.endpoint, token=settings.token, jobs=jobs,
                             timeout=timeout, budget=settings.rate_budget())
    if findings:
        raise LockStaleError(
            f"weights.lock disagrees with what {settings.endpoint} attests "
            f"({count(len(findings), 'difference')}):\n"
            + "\n".join(f"  {line}" for line in findings),
            hint="A lock is generated, never edited: restore weights.lock from version "
            "control, or write the entries again with `wlock lock --upgrade-package ID`.")
    info(f"weights.lock is the Hub's truth: {count(len(lock.repos), 'repo')}, "
         f"{count(sum(len(r.files) for r in lock.repos), 'file')} at their pinned commits.")


def _estimate(lock: object, settings: Settings, timeout: float) -> Estimate:
    """What `wlock sync` of the new lock would download into this cache: chunk-level
    upgrades planned from the reconstructions (wlock.cache.upgrade), nothing fetched."""
    from wlock.cache.estimate import estimate
    from wlock.cli.sync_cmd import _token

    return estimate(lock, settings.cache_dir, settings.endpoint, _token(settings), timeout)


def _download_line(e: Estimate, settings: Settings) -> str:
    if not e.files:
        return f"A sync would download nothing: every file is in {settings.cache_dir}."
    line = (f"A sync would download {human_size(e.download)} "
            f"({count(e.files, 'file')}, {human_size(e.size)}")
    if e.upgraded:
        line += (f"; {count(e.upgraded, 'file')} upgraded from its cached revision, only "
                 "the changed chunks fetched")
    return line + f") into {settings.cache_dir}."


def _rescan(lock: object, project: Path, jobs: int, timeout: float, settings: Settings
            ) -> None:
    """The lock's records against the Hub's bytes now: PolicyError (exit 7) naming each file
    the policy refuses or whose record differs."""
    from wlock.lock.resolve import rescan_lock
    from wlock.models import Lock
    from wlock.policy import judge_rescan, read_policy, refusal

    assert isinstance(lock, Lock)
    policy = read_policy(project / "weights.toml")
    now = rescan_lock(lock, endpoint=settings.endpoint, token=settings.token,
                      scan_limits=policy.limits, jobs=jobs, timeout=timeout,
                      budget=settings.rate_budget())
    if violations := judge_rescan(lock, now, policy):
        raise refusal(violations, policy, "weights.lock was left as it was.")
    info(f"weights.lock's records are the Hub's bytes: "
         f"{count(sum(len(r.pickles) for r in now.repos), 'pickle')} judged again.")


def _from_record(log: Path, run_id: str | None, output: Path | None, settings: Settings,
                 ) -> None:
    from wlock.lock.lockfile import LOCK_NAME, write_lock
    from wlock.lock.record import lock_from_record

    lock, run = lock_from_record(log, run_id)
    if output is not None:
        target = output.resolve()
    elif settings.project_flag is not None:
        target = settings.project_flag.resolve() / LOCK_NAME
    else:
        target = Path.cwd() / LOCK_NAME
    written = write_lock(target, lock)
    if settings.json:
        emit({"lock": str(target), "written": written, "run_id": run["run_id"],
              "recorded": run.get("time"), "host": run.get("host"),
              "lock_digest": run.get("lock_digest"), "repos": len(lock.repos)})
        return
    info(f"{'Wrote' if written else 'Unchanged:'} {target}: the lock of run "
         f"{run['run_id']} ({run.get('time')} on {run.get('host')}), "
         f"{count(len(lock.repos), 'repo')}, digest {run.get('lock_digest')} as recorded. "
         "`wlock sync --frozen` fetches it.")
