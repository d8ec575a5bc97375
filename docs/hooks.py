"""MkDocs hook: every command of wlock's command line loaded before the reference page is
rendered. The group imports a command's module only when it is asked for (a fast start);
mkdocs-click reads the group's loaded commands, so they are asked for here, once."""

from __future__ import annotations

from typing import Any


def on_startup(**_: Any) -> None:
    import click

    from wlock.cli import cli

    ctx = click.Context(cli)
    for name in cli.list_commands(ctx):
        cli.get_command(ctx, name)
