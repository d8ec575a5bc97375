"""`wlock completion SHELL`: tab completion for subcommands, flags and locked ids."""

from __future__ import annotations

import click
from click.shell_completion import CompletionItem

SHELLS = ("bash", "zsh", "fish")


def locked_ids(ctx: click.Context, param: click.Parameter, incomplete: str
               ) -> list[CompletionItem]:
    """The ids in the nearest weights.lock (or $WLOCK_LOCK) that start with what was typed,
    compared as the Hub compares ids. Never fails: no lock, no suggestions."""
    try:
        from wlock.api import find_lock
        from wlock.lock.lockfile import read_lock

        lock = read_lock(find_lock())
    except Exception:  # noqa: BLE001 - completion must never print a traceback
        return []
    typed = incomplete.lower()
    return [CompletionItem(r.id, help=f"{r.kind} @ {r.revision[:7]}")
            for r in lock.repos if r.id.lower().startswith(typed)]


@click.command()
@click.argument("shell", type=click.Choice(SHELLS))
def completion(shell: str) -> None:
    """Print the completion script for SHELL: subcommands, flags, and the ids of the
    nearest weights.lock for commands that take one.

    \b
    Examples (install it for each shell):
      bash:  echo 'eval "$(wlock completion bash)"' >> ~/.bashrc
      zsh:   echo 'eval "$(wlock completion zsh)"' >> ~/.zshrc
      fish:  wlock completion fish > ~/.config/fish/completions/wlock.fish
    """
    from click.shell_completion import get_completion_class

    from wlock.cli import cli

    complete = get_completion_class(shell)
    assert complete is not None  # click ships all three
    click.echo(complete(cli, {}, "wlock", "_WLOCK_COMPLETE").source())
