"""The command line's habits: shell completion of subcommands, flags and locked ids;
--no-progress; colour only where asked or on a terminal, never with NO_COLOR."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import Hub, run_wlock, write_project
from wlock.cli.progress import BIG_FILE

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "weights.lock.example"


def complete(words: str, cwd: Path) -> list[str]:
    """What bash completion offers after `words` (the last word being typed)."""
    parts = words.split(" ")
    env = {**os.environ, "_WLOCK_COMPLETE": "bash_complete", "COMP_WORDS": words,
           "COMP_CWORD": str(len(parts) - 1)}
    done = subprocess.run([sys.executable, "-m", "wlock"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [line.split(",", 1)[1] for line in done.stdout.splitlines() if "," in line]


def test_completion_offers_subcommands_flags_and_locked_ids(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "weights.lock").write_bytes(LOCK.read_bytes())
    assert {"sync", "status"} <= set(complete("wlock s", project))
    assert "--dry-run" in complete("wlock sync --d", project)
    assert complete("wlock revision acme/t", project) == ["acme/tiny-bert", "acme/tiny-squad"]
    assert complete("wlock path ACME/TINY-B", project) == ["acme/tiny-bert"]
    bare = tmp_path / "no-lock"
    bare.mkdir()
    assert complete("wlock revision acme/", bare) == []  # no lock: no suggestion, no crash


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts(shell: str) -> None:
    done = run_wlock("completion", shell)
    assert done.code == 0 and "_WLOCK_COMPLETE" in done.stdout


def test_errors_in_colour_only_when_asked(tmp_path: Path) -> None:
    plain = run_wlock("check", "--lock", str(tmp_path / "none.lock"))
    assert plain.code == 4 and plain.stderr.startswith("error: ")  # a pipe: no colour
    always = run_wlock("--color", "always", "check", "--lock", str(tmp_path / "none.lock"))
    assert "\x1b[" in always.stderr and "error:" in always.stderr
    never = run_wlock("--color", "never", "check", "--lock", str(tmp_path / "none.lock"))
    assert "\x1b[" not in never.stderr


def test_no_progress_silences_progress(hub: Hub, tmp_path: Path) -> None:
    repo_id = hub.unique_id("quiet")
    hub.builder.commit("model", repo_id, {"big.bin": os.urandom(BIG_FILE + 1)})
    project = write_project(tmp_path / "p", f'[[model]]\nid = "{repo_id}"\n')
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    env = {"HF_HUB_DISABLE_PROGRESS_BARS": ""}
    loud = run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(tmp_path / "a"),
                     cwd=project, env=env)
    quiet = run_wlock("--no-progress", "sync", "--endpoint", hub.endpoint, "--cache-dir",
                      str(tmp_path / "b"), cwd=project, env=env)
    assert loud.code == quiet.code == 0
    assert "big.bin (" in loud.stderr and "big.bin" not in quiet.stderr
    assert "Synced 1 repos" in quiet.stderr  # the summary stays
