"""What a command says, and how loud.

Words go to stderr, at the level `-q`/`-v` chose (uv's habits):

    -qq   errors only
    -q    warnings and errors: no summaries, no progress
          (default) summaries, warnings, errors and progress
    -v    also a line per file, and huggingface_hub's info logging
    -vv   also huggingface_hub's debug logging (its requests, the token redacted)

Data a command was asked for (`wlock revision`, `wlock list`, a --json document) goes to
stdout whatever the level.

The one JSON contract: with --json, every command prints exactly one JSON document on
stdout, success or failure, and nothing else there (words go to stderr).

    {"schema": 1, "ok": true, "command": "sync", ...the command's fields...}
    {"schema": 1, "ok": false, "command": "sync", "exit_code": 5,
     "error": {"kind", "exit_code", "message", "hint"}}

`schema` changes only when a field changes meaning or goes away; fields are added freely.
Commits are always the full 40 hex digits. A command's dry run has the same fields as its
real run (`dry_run` says which).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import click

SCHEMA = 1

class _Level:
    verbosity = 0  # -q -1, -qq -2, -v 1, -vv 2
    color = "auto"  # --color


LEVEL = _Level()  # set once by the `wlock` group's options


def set_verbosity(quiet: int, verbose: int) -> None:
    LEVEL.verbosity = verbose - quiet
    if verbose:
        import logging

        from huggingface_hub.utils import logging as hf_logging

        hf_logging.set_verbosity(logging.DEBUG if verbose > 1 else logging.INFO)


def verbosity() -> int:
    return LEVEL.verbosity


def info(message: str) -> None:
    """A summary or a next step: hidden by -q."""
    if verbosity() >= 0:
        click.echo(message, err=True)


def warn(message: str, *, label: str = "warning") -> None:
    """Something the user should know (`label`: "warning" or "note"): hidden by -qq."""
    if verbosity() >= -1:
        on = color_on()
        color = "yellow" if label == "warning" else "cyan"
        click.echo(f"{paint(label + ':', color, on)} {message}", err=True, color=on)


def error(message: str, hint: str | None) -> None:
    """A failure: always shown, whatever -q says."""
    on = color_on()
    click.echo(f"{paint('error:', 'red', on)} {message}", err=True, color=on)
    if hint:
        click.echo(f"{paint('hint:', 'cyan', on)} {hint}", err=True, color=on)


def color_on() -> bool:
    """Colour where asked (--color always), or on a terminal without NO_COLOR."""
    mode = LEVEL.color
    return mode == "always" or (mode == "auto" and not os.environ.get("NO_COLOR")
                                and sys.stderr.isatty())


def paint(word: str, fg: str, on: bool) -> str:
    return click.style(word, fg=fg, bold=True) if on else word


def command_name() -> str:
    ctx = click.get_current_context(silent=True)
    return ctx.command_path.removeprefix("wlock ").strip() if ctx else ""


def emit(doc: dict[str, Any]) -> None:
    """Print a command's result document (`ok` true unless the document says otherwise; a
    document that is not ok is a failed check: exit 1)."""
    full = {"schema": SCHEMA, "ok": True, "command": command_name(), **doc}
    full.setdefault("exit_code", 0 if full["ok"] else 1)
    click.echo(json.dumps(full, indent=2))


def emit_error(command: str, kind: str, code: int, message: str, hint: str | None) -> None:
    click.echo(json.dumps({"schema": SCHEMA, "ok": False, "command": command,
                           "exit_code": code, "error": {"kind": kind, "exit_code": code,
                                                        "message": message, "hint": hint}},
                          indent=2))
