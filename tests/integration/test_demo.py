"""`wlock demo` as a new user runs it: lock, sync and check on the example Hub, the lock it
prints the bytes of weights.lock.example, and, with the ML stack installed, the example's
real tiny model loaded offline at its locked commit completing the example dataset's
prompts (fixtures/make_tiny_lm.py wrote both); without it, the command that adds it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT


def test_the_demo_ends_with_the_model_answering_offline() -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("datasets")
    done = subprocess.run([sys.executable, "-m", "wlock", "demo"], capture_output=True,
                          text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    lock, _, answer = done.stdout.rpartition("acme/tiny-lm @ ")
    assert lock.endswith((ROOT / "weights.lock.example").read_text() + "\n")  # then the answer
    assert answer.splitlines()[1:] == [
        "  'wlock pins' -> 'every byte of the weights you load'",
        "  'the lock' -> 'travels with your code'",
        "  'every run' -> 'records the commits it used'",
    ], answer
    assert "offline" in answer.splitlines()[0]


def test_without_the_ml_stack_the_demo_says_how_to_add_it(tmp_path: Path) -> None:
    """A Python where transformers, torch and datasets cannot be found (a sitecustomize
    hides them from importlib, as an environment without them would), with HF_HUB_OFFLINE=1
    as CI jobs often set it: the demo's Hub is its own, on loopback (it exited 5, issue 59)."""
    (tmp_path / "sitecustomize.py").write_text(
        "import importlib.util as u\n_find = u.find_spec\n"
        "u.find_spec = lambda name, *a: None if name in ('transformers', 'torch', 'datasets')"
        " else _find(name, *a)\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join(
        [str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])}
    done = subprocess.run([sys.executable, "-m", "wlock", "demo"], capture_output=True,
                          text=True, timeout=600, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "uv tool install wlock --with transformers --with torch --with datasets" in \
        done.stderr.replace("\n", " ")
    assert "acme/tiny-lm @" not in done.stdout
