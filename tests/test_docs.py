"""The documentation: the README short enough to read in five minutes, every file it links
to there; the MkDocs site builds with --strict (a broken link or a missing page fails), and
its command reference, written from the click commands, has a page for every command
(tests/test_site.py opens them in a browser)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

from wlock.cli import cli

pytestmark = pytest.mark.newest_only("the documentation site: MkDocs, a dev tool, not a floor")

ROOT = Path(__file__).resolve().parents[1]


def test_the_readme_is_short_and_its_links_resolve() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) < 250
    for target in re.findall(r"\]\(((?!https?://)[^)#]+)\)", text):
        assert (ROOT / target).exists(), target


def test_the_site_builds_strictly_with_every_command_in_its_reference(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    index = json.loads((tmp_path / "site" / "search" / "search_index.json").read_text())
    pages = {doc["location"].split("/")[2] for doc in index["docs"]
             if doc["location"].startswith("reference/commands/")}
    commands = set(cli.list_commands(click.Context(cli)))
    assert commands <= pages, sorted(commands - pages)
    sync = (tmp_path / "site" / "reference" / "commands" / "sync" / "index.html").read_text()
    assert "--rate-limit-wait" in sync and "--engine" in sync  # the options too
    check = (tmp_path / "site" / "reference" / "commands" / "check" / "index.html").read_text()
    assert "--load" in check
