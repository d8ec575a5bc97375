"""MkDocs hook: the command reference, one page per command, written from the commands
themselves (mkdocs-click reads their click objects, so a page and `wlock COMMAND --help`
cannot disagree), and the list of them on the reference's index page. A command added to the
command line gets its page without anyone writing one."""

from __future__ import annotations

import html as html_text
import re
from typing import Any

# Where the generated pages go, and the marker the index page replaces with their list.
FOLDER = "reference/commands"
MARKER = "<!-- the commands' pages -->"
GLOBAL = "<!-- the group's options -->"


def _commands() -> dict[str, tuple[str, str, str]]:
    """Each command: (module, attribute, its help's first line)."""
    import click

    from wlock.cli import _COMMANDS, cli

    ctx = click.Context(cli)
    out = {}
    for name in cli.list_commands(ctx):
        command = cli.get_command(ctx, name)  # the group loads a command when asked
        assert command is not None, name
        module, attr = _COMMANDS.get(name, f":{command.callback.__name__}").split(":")
        out[name] = (f"wlock.cli.{module}" if module else "wlock.cli", attr,
                     command.get_short_help_str(limit=120))
    return out


def on_config(config: Any) -> Any:
    """Each command's page in the navigation, under Reference."""
    pages = [{f"wlock {name}": f"{FOLDER}/{name}.md"} for name in _commands()]
    for section in config["nav"] or ():
        if isinstance(section, dict) and "Reference" in section:
            section["Reference"].append({"Each command": pages})
    return config


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for name, (module, attr, _) in _commands().items():
        files.append(File.generated(config, f"{FOLDER}/{name}.md", content=(
            f"# wlock {name}\n\n"
            "Written from the command itself (its `--help`). Exit codes: see "
            "[Commands and exit codes](../commands.md).\n\n"
            f"::: mkdocs-click\n    :module: {module}\n    :command: {attr}\n"
            f"    :prog_name: wlock {name}\n    :depth: 1\n    :style: table\n")))
    return files


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if MARKER in markdown:
        rows = [f"| [`wlock {name}`](commands/{name}.md) | {short} |"
                for name, (_, _, short) in _commands().items()]
        markdown = markdown.replace(
            MARKER, "| command | what it does |\n|---|---|\n" + "\n".join(rows))
    if GLOBAL in markdown:
        import click

        from wlock.cli import cli

        rows = []
        for param in cli.params:
            if isinstance(param, click.Option) and not param.hidden:
                record = param.get_help_record(click.Context(cli))
                if record:
                    rows.append(f"| `{record[0]}` | {record[1]} |")
        markdown = markdown.replace(GLOBAL, "| option | what it does |\n|---|---|\n"
                                    + "\n".join(rows))
    return markdown


# A help's `\b` block as mkdocs-click leaves it: one paragraph whose first line names it
# ("Examples:") and whose other lines are the commands, indented: they ran together into
# one line of text on the page.
_BLOCK = re.compile(r"(<p>|\n)([^<\n]*:)\n((?:  [^\n]*(?:\n|(?=</p>)))+)</p>")


def on_page_content(html: str, page: Any, **_: Any) -> str:
    """On each command's page, its help's examples as code, one command a line, as
    `--help` shows them; and no default shown as click's internal `Sentinel.UNSET` (an
    option without a default)."""
    if not page.file.src_uri.startswith(FOLDER):
        return html

    def as_code(m: re.Match[str]) -> str:
        lines = "\n".join(line[2:] for line in m[3].rstrip("\n").split("\n"))
        # A block that follows other text in its paragraph ends that paragraph first.
        return (("</p>\n" if m[1] == "\n" else "") + f"<p>{m[2]}</p>\n<div class=\"highlight\">"
                f"<pre><code>{html_text.escape(html_text.unescape(lines), quote=False)}"
                "</code></pre></div>")

    html = _BLOCK.sub(as_code, html)
    return html.replace("<code>Sentinel.UNSET</code>", "")
