"""The README's quickstart, run as written: every `wlock` line of its shell blocks and its
Python snippet, against the emulator standing in for the Hub (HF_ENDPOINT), the repos it
names served there (a tiny sentence-transformers model and a dataset with a train split,
written by the libraries themselves). A README whose commands fail is a broken product."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests.conftest import Hub, default_signals, needs, run_wlock
from tests.integration.test_datasets_real import parquet, rows
from tests.integration.test_load_gate import sentence_model

ROOT = Path(__file__).resolve().parents[2]
pytestmark = needs("sentence_transformers")


def section(name: str) -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index(f"## {name}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def commands(text: str) -> list[list[str]]:
    """Every `wlock ...` line of the section's shell blocks, its comment left out."""
    out = []
    for block in blocks(text, "sh"):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            if words and words[0] == "wlock":
                out.append(words[1:])
    return out


def test_the_quickstart_runs_as_written(hub: Hub, tmp_path: Path) -> None:
    folder = sentence_model(tmp_path / "minilm", tmp_path)
    files = {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*")
             if p.is_file()}
    hub.builder.commit("model", "sentence-transformers/all-MiniLM-L6-v2", files)
    hub.builder.configure("model", "sentence-transformers/all-MiniLM-L6-v2",
                          extra={"library_name": "sentence-transformers"})
    hub.builder.commit("dataset", "stanfordnlp/imdb", {
        "README.md": b"---\nlicense: other\n---\n# imdb\n",
        "plain_text/train-00000-of-00001.parquet": parquet(rows("plain_text", "train")),
        "plain_text/test-00000-of-00001.parquet": parquet(rows("plain_text", "test"))})
    project = tmp_path / "project"
    project.mkdir()
    env = {"HF_ENDPOINT": hub.endpoint, "HF_HOME": str(tmp_path / "hf")}
    quickstart, ci = section("Quickstart").split("In CI, three gates")
    ran = commands(quickstart)
    assert [c[0] for c in ran] == ["init", "add", "add", "sync", "check", "check"], ran
    for args in ran:
        done = run_wlock(*args, cwd=project, env=env)
        assert done.code == 0, (args, done.stderr)
    [snippet] = blocks(quickstart, "python")
    (project / "load.py").write_text(snippet + "print(type(model).__name__)\n")
    loaded = subprocess.run([sys.executable, "load.py"], cwd=project, capture_output=True,
                            text=True, timeout=300, preexec_fn=default_signals, env={
                                **os.environ, **env, "HF_HUB_OFFLINE": "1"})
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    assert loaded.stdout.strip().endswith("Model"), loaded.stdout
    gates = commands(ci)
    assert [c[:2] for c in gates] == [["lock", "--check"], ["lock", "--check"], ["lint"]]
    for args in gates:
        done = run_wlock(*args, cwd=project, env=env)
        assert done.code == 0, (args, done.stderr + done.stdout)


def test_every_readme_block_names_real_commands() -> None:
    """Every `wlock` line anywhere in the README names a command that exists, with options
    it takes (parsed by click, not run)."""
    from click.testing import CliRunner

    from wlock.cli import cli

    text = (ROOT / "README.md").read_text()
    for args in commands(text):
        if args and args[0] in ("demo",):
            continue
        result = CliRunner().invoke(cli, [*args, "--help"])
        assert result.exit_code == 0, (args, result.output)
