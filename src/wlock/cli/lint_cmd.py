"""`wlock lint`: fail CI when code loads from the Hub without the pinned revision."""

from __future__ import annotations

from pathlib import Path

import click

from wlock.cli.output import info
from wlock.units import count


@click.command()
@click.argument("paths", nargs=-1, type=click.Path(exists=True, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["text", "json", "github", "sarif"]),
              default="text", show_default=True, help="How to report findings.")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON document on stdout (wlock's contract), as --format json.")
@click.option("--fix", is_flag=True,
              help="Write the locked commit where it is missing or wrong (never invents one).")
@click.option("--fail-on-dynamic", is_flag=True,
              help="Fail on repo ids or revisions the linter cannot see (WL200) too.")
@click.option("--python", "python", metavar="PATH", default=None,
              help="The interpreter the code runs with, whose grammar reads a file the one "
                   "running wlock cannot (default: $VIRTUAL_ENV's, else the project's .venv).")
@click.option("--project", type=click.Path(file_okay=False, path_type=Path),
              help="Project folder whose weights.lock the pins must match "
              "(default: nearest folder upward with weights.toml).")
def lint(paths: tuple[Path, ...], fmt: str, as_json: bool, fix: bool, fail_on_dynamic: bool,
         python: str | None, project: Path | None) -> None:
    """Report every Hub download in PATHs (default: the project) without a pinned revision.

    Checks .py files and the code cells of .ipynb notebooks. A load is pinned when its
    revision is a 40-hex commit (a literal or a module-level constant) or
    wlock.revision("org/name"); with a weights.lock, the repo must be in it and the commit
    must be the locked one. Suppress a line with `# wlock: ignore[WL101]`; configure in
    [tool.wlock.lint] (weights.toml or pyproject.toml).

    \b
    Codes:
      WL001  file cannot be read or parsed: its loads are unseen
      WL101  load without a pinned revision             (fixable)
      WL102  revision is a branch, tag or variant       (fixable)
      WL103  revision differs from weights.lock         (fixable)
      WL104  repo is not in weights.lock
      WL105  trust_remote_code without code_revision    (fixable)
      WL106  pipeline(task) without model=
      WL107  peft adapter whose base model is not locked
      WL108  load_dataset of a config or split the lock does not hold
      WL200  repo id or revision not a literal          (warning; --fail-on-dynamic)

    \b
    Examples:
      wlock lint                          # the project, against its weights.lock
      wlock lint src notebooks --fix
      wlock lint --format github          # annotations in a GitHub Actions log
      wlock lint --format sarif > wlock.sarif
    """
    from dataclasses import replace

    from wlock.cli.options import default_project
    from wlock.errors import ExitCode
    from wlock.lint.checker import lint_paths
    from wlock.lint.config import load_settings
    from wlock.lint.fixer import fix_findings
    from wlock.lint.report import render
    from wlock.lock.lockfile import LOCK_NAME, read_lock

    # One JSON document whichever flag asks for it: --format json is --json.
    as_json = as_json or fmt == "json"
    folder = project.resolve() if project else default_project()
    lock = read_lock(folder / LOCK_NAME) if folder and (folder / LOCK_NAME).exists() else None
    settings, _ = load_settings(folder or _pyproject_folder())
    if fail_on_dynamic:
        settings = replace(settings, fail_on_dynamic=True)
    # Paths in every format are relative to the repository (else the project): GitHub's
    # annotations and SARIF resolve them there, wherever the command was run from.
    root = _repository_root(folder or Path.cwd())
    # A changed weights.toml or weights.lock (pre-commit passes it as a file name) can make
    # any pin in the project stale (WL103): then the whole project is linted.
    lock_files = {p for p in paths if p.name in ("weights.toml", "weights.lock")}
    code_paths = [p for p in paths if p not in lock_files]
    targets = code_paths or [folder or Path.cwd()]
    if lock_files:
        targets = [folder or Path.cwd()]
    from wlock.cache.loadcheck import project_python

    python = python or project_python(folder or Path.cwd())
    report = lint_paths(targets, lock, settings, root=root, python=python)
    if fix:
        applied, changed = fix_findings(report.findings, root)
        info(f"Fixed {count(applied, 'finding')} in {count(changed, 'file')}.")
        if applied:
            from wlock.cache.loadcheck import project_python

    python = python or project_python(folder or Path.cwd())
    report = lint_paths(targets, lock, settings, root=root, python=python)
    if as_json:
        from wlock.cli.output import emit
        from wlock.lint.report import as_dict

        emit(as_dict(report) | {"ok": not report.failed})
    else:
        click.echo(render(report, fmt), nl=False)
    if fmt == "text" and not as_json:
        errors = sum(f.severity == "error" for f in report.findings)
        warnings = len(report.findings) - errors
        against = "weights.lock" if lock else "no weights.lock (pins not compared)"
        info(f"{count(report.files, 'file')}, {count(report.sites, 'Hub load')} checked against "
             f"{against}: {count(errors, 'error')}, {count(warnings, 'warning')} in "
             f"{report.seconds:.2f}s.")
    if report.failed:
        raise SystemExit(ExitCode.CHECK_FAILED)


def _pyproject_folder() -> Path | None:
    here = Path.cwd().resolve()
    return next((p for p in (here, *here.parents) if (p / "pyproject.toml").is_file()), None)


def _repository_root(start: Path) -> Path:
    """The nearest folder upward holding `.git` (a folder, or a file in a worktree), else
    `start`."""
    start = start.resolve()
    return next((p for p in (start, *start.parents) if (p / ".git").exists()), start)
