"""`wlock check`: verify the bytes in the cache against the lock, offline."""

from __future__ import annotations

from dataclasses import asdict

import click

from wlock.cli.options import Settings, common_options, lock_option
from wlock.cli.output import emit, info, warn
from wlock.errors import ExitCode
from wlock.units import count, human_size


@click.command()
@click.option("--jobs", "-j", type=click.IntRange(1, 256), default=None,
              help="Files hashed at once (default: one per core).")
@lock_option
@common_options
def check(jobs: int | None, settings: Settings) -> None:
    """Re-hash every locked file in the cache and compare it with weights.lock.

    Reports each missing file, wrong link, wrong size and wrong bytes, with its repo and path;
    exits 1 if there is any, 0 when the cache holds exactly the locked bytes. A branch ref
    that another project sharing the cache moved is a note, not a failure. Makes no network
    request. `wlock sync --verify` repairs what it finds.

    \b
    Examples:
      wlock check
      wlock check --json > report.json
      HF_HOME=/nvme/hf wlock check
    """
    from wlock.cache.check import check_cache
    from wlock.cli.progress import make_progress
    from wlock.lock.lockfile import read_lock

    lock = read_lock(settings.lock_path())
    total = sum(r.size for r in lock.repos)
    progress = make_progress("Checking", total, quiet=settings.json)
    try:
        report = check_cache(lock, settings.cache_dir, jobs=jobs,
                             on_hashed=lambda n: progress.advance("", n))
    finally:
        progress.close()
    if settings.json:
        emit({
            "ok": report.ok, "cache_dir": report.cache_dir, "repos": report.repos,
            "files": report.files, "bytes_hashed": report.bytes_hashed,
            "seconds": round(report.seconds, 3),
            "problems": [asdict(p) for p in report.problems],
            "notes": [asdict(p) for p in report.notes],
        })
    else:
        for problem in report.problems:
            click.echo(problem.render())
        for note in report.notes:
            if len(note.actual) == 40:
                warn(f"{note.repo_id}: the shared {note.path} points at {note.actual[:7]}, "
                     f"not this lock's {note.expected[:7]} (another project's sync?); "
                     "`wlock run` loads this lock's commit regardless.", label="note")
            else:  # not another commit: nothing to blame on a neighbour
                warn(f"{note.repo_id}: {note.path} does not point at this lock's "
                     f"{note.expected[:7]}: {note.actual}; `wlock sync` writes it, and "
                     "`wlock run` loads this lock's commit regardless.", label="note")
        summary = (f"{count(report.repos, 'repo')}, {count(report.files, 'file')}, "
                   f"{human_size(report.bytes_hashed)} hashed in {report.seconds:.2f}s")
        if report.ok:
            info(f"OK: the cache at {report.cache_dir} matches weights.lock ({summary}).")
        else:
            info(f"{count(len(report.problems), 'problem')} in {report.cache_dir} ({summary}). "
                 "Run `wlock sync --verify` to repair.")
    if not report.ok:
        raise SystemExit(ExitCode.CHECK_FAILED)
