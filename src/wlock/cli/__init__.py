"""The command line: each command reads options, calls one library function, renders the
result and maps it to an exit code. No policy lives here.

The one error boundary is `main`: expected failures (WlockError) print a message and a hint
and exit with their code; anything else is a bug and shows a traceback. `--debug` (or
WLOCK_DEBUG=1) shows the traceback for expected failures too.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import itertools
import os
import re
import sys

import click

from wlock import __version__
from wlock.cli import output
from wlock.cli.output import emit_error
from wlock.errors import ExitCode, WlockError, redact

# Where each command lives, imported when it is the one that runs (or when `wlock --help`
# lists them all): a command line pays for its own command only. Importing all 22 cost
# `wlock sync` 30-40 ms before its first request.
_COMMANDS = {
    "init": "manifest_cmds:init", "add": "manifest_cmds:add", "remove": "manifest_cmds:remove",
    "lock": "lock_cmd:lock", "sync": "sync_cmd:sync", "check": "check_cmd:check",
    "list": "pins_cmds:list_", "revision": "pins_cmds:revision", "path": "pins_cmds:path",
    "status": "status_cmd:status", "archive": "archive_cmd:archive",
    "export": "export_cmd:export", "gc": "gc_cmd:gc", "record": "record_cmd:record",
    "checkpoints": "checkpoints_cmd:checkpoints", "lint": "lint_cmd:lint", "run": "run_cmd:run",
    "serve": "serve_cmd:serve", "completion": "completion_cmd:completion",
    "tree": "tree_cmd:tree", "audit": "audit_cmd:audit", "sbom": "sbom_cmd:sbom",
    "outdated": "outdated_cmd:outdated",
}


class _Commands(click.Group):
    """The group that imports a command's module when the command is asked for (click's
    documented pattern for lazily loaded subcommands)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *_COMMANDS})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.commands and name in _COMMANDS:
            module, attr = _COMMANDS[name].split(":")
            self.add_command(getattr(importlib.import_module(f"wlock.cli.{module}"), attr),
                             name)
        return super().get_command(ctx, name)


@click.group(
    cls=_Commands,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog="""\b
Start a project:
  wlock init && wlock add sentence-transformers/all-MiniLM-L6-v2
  wlock lock            # pin every entry to a commit, every file to a hash
  wlock sync            # exactly the locked files, into $HF_HOME/hub, verified
  wlock check           # re-hash the cache against the lock, offline
\b
Try it on the bundled example Hub, offline:
  wlock demo

Exit codes: 0 ok, 1 check failed, 2 usage, 3 lock out of date, 4 invalid file,
5 Hub error, 6 local problem (space, permissions), 7 refused by the policy.""",
)
@click.version_option(__version__, "-V", "--version", prog_name="wlock")
@click.option("-q", "--quiet", count=True,
              help="Say less: -q only warnings and errors, -qq only errors. Data asked for "
              "(--json, `wlock revision`) still goes to stdout.")
@click.option("-v", "--verbose", count=True,
              help="Say more: -v a line per file and huggingface_hub's info logs, -vv its "
              "debug logs (requests, the token redacted).")
@click.option("--debug", is_flag=True, help="Show tracebacks for expected errors too.")
@click.option("--no-progress", is_flag=True,
              help="No progress bars or lines (as HF_HUB_DISABLE_PROGRESS_BARS=1).")
@click.option("--color", type=click.Choice(["auto", "always", "never"]), default="auto",
              show_default=True, help="Colour errors and warnings (auto: on a terminal, "
              "unless NO_COLOR is set).")
def cli(quiet: int, verbose: int, debug: bool, no_progress: bool, color: str) -> None:
    """wlock: lock Hugging Face model weights to exact commits and bytes."""
    if debug:
        os.environ["WLOCK_DEBUG"] = "1"
    if no_progress:
        from wlock.cli import progress

        progress.DISABLED = True
    output.LEVEL.color = color
    output.set_verbosity(quiet, verbose)


@cli.command()
def demo() -> None:
    """Run lock, sync and check against the bundled example Hub on 127.0.0.1, then load its
    tiny model offline at the locked commit (with transformers, torch and datasets).

    \b
    Examples:
      wlock demo
      HF_HUB_OFFLINE=1 wlock demo     # it runs its own Hub: no network either way
    """
    from wlock.cli.demo import run_demo

    run_demo()


# The group's own options, which uv-like habits write anywhere on the line (`wlock sync -q`).
_GLOBAL_FLAGS = frozenset({"--quiet", "--verbose", "--debug", "--no-progress"})
_GLOBAL_SHORT = re.compile(r"-[qv]+\Z")


def _hoisted(args: list[str]) -> list[str]:
    """`args` with the group's options that follow the command moved before it, as uv takes
    global options anywhere: `wlock sync -q` is `wlock -q sync`. Left where they are: what
    follows `--`, an option the command has itself, and anything after the first argument of
    a command that passes the rest of the line on (`wlock run python x.py -v`)."""
    at, i = None, 0
    while i < len(args):
        if args[i] == "--":
            return args
        if not args[i].startswith("-"):
            at = i
            break
        i += 2 if args[i] == "--color" else 1
    if at is None:
        return args
    command = cli.get_command(click.Context(cli), args[at])
    if command is None:
        return args
    commands = [command, *(getattr(command, "commands", {}) or {}).values()]
    own = {o for c in commands for p in c.params for o in (*p.opts, *p.secondary_opts)}
    passes_on = any(isinstance(p, click.Argument) and p.nargs == -1
                    for c in commands for p in c.params)
    front, rest, j = args[:at], [args[at]], at + 1
    if "--json" in front:
        # `wlock --json sync` as `wlock sync --json`: every command that reports takes it
        # (issue 61), so it goes where the command (or a group's subcommand) reads it.
        target: click.Command | None = command
        after = at + 1
        if isinstance(command, click.Group) and at + 1 < len(args):
            target, after = command.get_command(click.Context(command), args[at + 1]), at + 2
        if target is not None and any("--json" in p.opts for p in target.params):
            front = [word for word in front if word != "--json"]
            return _hoisted(front + args[at:after] + ["--json"] + args[after:])
    positional = False
    while j < len(args):
        word = args[j]
        if word == "--":
            rest += args[j:]
            break
        global_flag = word in _GLOBAL_FLAGS or bool(_GLOBAL_SHORT.match(word))
        color = word == "--color" or word.startswith("--color=")
        if (global_flag or color) and not (passes_on and positional) and \
                word.split("=")[0] not in own and not (
                    _GLOBAL_SHORT.match(word) and {f"-{c}" for c in word[1:]} & own):
            take = 2 if word == "--color" else 1
            front += args[j:j + take]
            j += take
            continue
        positional |= not word.startswith("-")
        rest.append(word)
        j += 1
    return front + rest


def main(argv: list[str] | None = None) -> None:
    # At the process's end, after its atexit functions, Python collects the garbage of
    # everything it imported and built, only to free what the system frees anyway: 70-100 ms
    # of a `wlock sync` of 1,000 small files. Frozen objects are skipped by those
    # collections; what is not in a cycle is still released as before. Registered at the
    # start of a command, so that every exit path has it and what the command registers
    # runs before it (atexit runs the last registered first).
    atexit.register(gc.freeze)
    # Ctrl-C and SIGTERM wake every wait in every thread before they interrupt the main
    # thread (issue 59): a worker asleep in a rate-limit wait no longer holds the exit.
    from wlock.cancel import Terminated, install

    install()
    args = _hoisted(sys.argv[1:] if argv is None else argv)
    own = args[: args.index("--")] if "--" in args else args
    # `--format json` asks for the same one document as `--json`, errors included.
    as_json = "--json" in own or "--format=json" in own or any(
        pair == ("--format", "json") for pair in itertools.pairwise(own))
    try:
        cli.main(args=args, prog_name="wlock", standalone_mode=False)
    except click.exceptions.Abort as e:
        click.echo("Aborted.", err=True)
        # click chains the signal's exception (`from e`) since 8.1.4, and leaves it as the
        # context before.
        sys.exit(143 if isinstance(e.__cause__ or e.__context__, Terminated) else 130)
    except click.ClickException as e:
        e.show()
        code = ExitCode.USAGE if isinstance(e, click.UsageError) else e.exit_code
        if as_json:
            emit_error(_command(args), "usage", int(code), e.format_message(), None)
        sys.exit(code)
    except WlockError as e:
        if os.environ.get("WLOCK_DEBUG"):
            import traceback

            traceback.print_exc()
        output.error(redact(e.message), redact(e.hint) if e.hint else None)
        if as_json:
            emit_error(_command(args), e.kind, int(e.exit_code), redact(e.message),
                       redact(e.hint) if e.hint else None)
        sys.exit(int(e.exit_code))
    except KeyboardInterrupt as e:
        click.echo("Interrupted.", err=True)
        sys.exit(143 if isinstance(e, Terminated) else 130)
    sys.exit(0)


def _command(args: list[str]) -> str:
    """The command a command line runs ("sync", "checkpoints keep"), for its error document:
    the first word that names one (an option's value, as in `--color never`, does not)."""
    words = args[: args.index("--")] if "--" in args else args
    context = click.Context(cli)
    for i, word in enumerate(words):
        command = cli.get_command(context, word)  # loads it, if it is one not loaded yet
        if command is None:
            continue
        if isinstance(command, click.Group):
            sub = next((w for w in words[i + 1:] if w in command.commands), None)
            return f"{word} {sub}" if sub else word
        return word
    return ""
