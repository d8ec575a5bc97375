"""`wlock check`: verify the bytes in the cache against the lock, offline."""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import TYPE_CHECKING

import click

from wlock.cli.options import Settings, common_options, lock_option
from wlock.cli.output import emit, info, warn
from wlock.errors import ExitCode, UsageError
from wlock.units import count, human_size

if TYPE_CHECKING:
    from wlock.cache.loadcheck import EntryLoad
    from wlock.models import Lock


@click.command()
@click.option("--jobs", "-j", type=click.IntRange(1, 256), default=None,
              help="Files hashed at once (default: one per core).")
@click.option("--load", "load", is_flag=True,
              help="Also load every entry offline with its own library, at its locked commit.")
@click.option("--python", "python", metavar="PATH", default=None,
              help="The interpreter --load uses (default: $VIRTUAL_ENV's, else the "
                   "project's .venv, else wlock's own).")
@click.option("--skip-missing-libraries", "skip_missing", is_flag=True,
              help="With --load: an entry whose library the interpreter lacks is skipped, "
                   "not failed (a machine without the ML stack).")
@lock_option
@common_options
def check(jobs: int | None, load: bool, python: str | None, skip_missing: bool,
          settings: Settings) -> None:
    """Re-hash every locked file in the cache and compare it with weights.lock.

    Reports each missing file, wrong link, wrong size and wrong bytes, with its repo and path;
    exits 1 if there is any, 0 when the cache holds exactly the locked bytes. A branch ref
    that another project sharing the cache moved is a note, not a failure. Makes no network
    request. `wlock sync --verify` repairs what it finds.

    With --load, each entry is then loaded offline from the cache as code loads it, through
    its library's own entry point, by repo id at its locked commit, in a process of its own,
    so the library asks for what it needs: transformers' AutoConfig, the tokenizer and
    processor its pipeline() would load, and the model's from_pretrained (on transformers
    5 every tensor's shape is checked by transformers on the meta device, no weight byte
    read); a PEFT adapter by AutoPeftModel (or on weights.toml's `base`), and every other
    adapter of the repo; GGUF files and each split part by llama.cpp's reader; datasets by
    config and split as locked (the Arrow tables go to a temporary folder);
    sentence-transformers and diffusers load on CPU. One line per entry: loaded, or failed
    with the library's own error and the file it wanted. A load that asked for a file the
    lock leaves out fails too. An entry whose library is not installed for that Python
    fails, naming the install, unless --skip-missing-libraries. Exits 1 when any load
    fails.

    \b
    Examples:
      wlock check
      wlock check --load                  # in CI, after `wlock sync`
      wlock check --load --python .venv/bin/python
      wlock check --load --skip-missing-libraries   # no ML stack on this runner
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
    if not settings.json:
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
    if skip_missing and not load:
        raise UsageError("--skip-missing-libraries is a flag of --load",
                         hint="Run `wlock check --load --skip-missing-libraries`.")
    loads = _load(lock, settings, python, skip_missing) if load else ()
    if settings.json:
        emit({
            "ok": report.ok and all(e.status != "failed" for e in loads),
            "cache_dir": report.cache_dir, "repos": report.repos,
            "files": report.files, "bytes_hashed": report.bytes_hashed,
            "seconds": round(report.seconds, 3),
            "problems": [asdict(p) for p in report.problems],
            "notes": [asdict(p) for p in report.notes],
            **({"loads": [asdict(e) for e in loads]} if load else {}),
        })
    if not report.ok or any(e.status == "failed" for e in loads):
        raise SystemExit(ExitCode.CHECK_FAILED)


def _load(lock: Lock, settings: Settings, python: str | None,
          skip_missing: bool) -> tuple[EntryLoad, ...]:
    from wlock.cache.loadcheck import load_entries, project_python

    if python is None:
        python = project_python(settings.lock_path().parent)
    elif not os.access(python, os.X_OK) or os.path.isdir(python):
        raise UsageError(f"--python {python}: not an executable file",
                         hint="Pass the interpreter that has the ML libraries, "
                              "e.g. --python .venv/bin/python.")
    if not settings.json:
        info(f"Loading {count(len(lock.repos), 'entry', 'entries')} offline with {python} ...")
    loads = load_entries(lock, settings.cache_dir, python,
                         on_entry=None if settings.json else _say,
                         skip_missing=skip_missing)
    if not settings.json:
        tally = {s: sum(e.status == s for e in loads) for s in ("loaded", "failed", "skipped")}
        info(f"Loads: {tally['loaded']} loaded, {tally['failed']} failed, "
             f"{tally['skipped']} skipped.")
    return loads


def _say(e: EntryLoad) -> None:
    name = f"{e.kind} {e.repo_id}@{e.revision[:7]} ({e.library or 'no library'})"
    if e.status == "loaded":
        click.echo(f"loaded   {name}: {', '.join(e.did)}")
    elif e.status == "skipped":
        click.echo(f"skipped  {name}: {e.reason}")
    else:
        lines = (e.error or "").splitlines() or ["(no message)"]
        shown = "\n           ".join(line[:300] for line in lines[:6])
        click.echo(f"FAILED   {name}: {shown}", err=False)
        if e.wanted:
            click.echo(f"           it wanted {e.wanted}, which the cache does not have: "
                       f"lock it (`wlock tree {e.repo_id} --why` says why it was left out) "
                       "and run `wlock sync`.")
