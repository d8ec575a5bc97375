"""The one JSON contract: with --json, every command prints exactly one JSON document on
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
from typing import Any

import click

SCHEMA = 1


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
