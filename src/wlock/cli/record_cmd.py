"""`wlock record`: append what a run uses (each locked entry, exactly) to a run log."""

from __future__ import annotations

import json
from pathlib import Path

import click

from wlock.cli.options import Settings, common_options, lock_option
from wlock.cli.output import emit, info

DEFAULT_LOG = "wlock-runs.jsonl"


@click.command()
@click.option("--log", type=click.Path(path_type=Path), metavar="FILE",
              help=f"The run log to append to (default: {DEFAULT_LOG} beside the lock; - for "
              "stdout).")
@lock_option
@common_options
def record(log: Path | None, settings: Settings) -> None:
    """Append one JSON line per locked entry to a run log: what this run uses, exactly.

    Each line: id, kind, requested ref, commit, a package URL
    (pkg:huggingface/org/name@commit), files and bytes with the full file list, the digest
    of weights.lock and of uv.lock, the project's git commit and whether its tree is dirty,
    the cache path, host and time, and a run_id shared by the run's lines.
    `wlock run --record FILE -- CMD` records and runs, then appends CMD's exit status;
    `wlock lock --from-record FILE` rebuilds the lock a run used.

    \b
    Examples:
      wlock record --log runs/weights.jsonl
      wlock record --log - | jq .purl
    """
    from wlock.cli.run_cmd import record_lines
    from wlock.lock.lockfile import read_lock
    from wlock.lock.record import append_records

    lock_path = settings.lock_path()
    lines = record_lines(read_lock(lock_path), lock_path, settings)
    if str(log) == "-":
        for line in lines:
            click.echo(json.dumps(line, separators=(",", ":"), ensure_ascii=False))
        return
    target = log or lock_path.parent / DEFAULT_LOG
    append_records(target, lines)
    if settings.json:
        emit({"log": str(target), "run_id": lines[0]["run_id"] if lines
                               else None, "entries": len(lines)})
    else:
        info(f"Recorded {len(lines)} entries (run {lines[0]['run_id'] if lines else '-'}) "
             f"in {target}.")
