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
    # This environment's own pip (wlock is not on PyPI: `uv tool install wlock` would not
    # resolve); .ci/run runs the hints of a uv tool and a pipx install.
    assert f"beside wlock: `{sys.executable} -m pip install transformers torch datasets`" in \
        done.stderr.replace("\n", " ")
    assert "acme/tiny-lm @" not in done.stdout


@pytest.mark.parametrize(("receipt", "expected"), [
    ('[tool]\nrequirements = [{ name = "wlock", path = "/w/wlock-0.1.0-py3-none-any.whl" }]\n',
     "uv tool install --force /w/wlock-0.1.0-py3-none-any.whl --with transformers --with torch"),
    ('[tool]\nrequirements = [{ name = "wlock", git = "https://example.org/wlock" }]\n',
     "uv tool install --force git+https://example.org/wlock --with transformers --with torch"),
    (None, "pipx inject wlock transformers torch"),
])
def test_the_install_hint_follows_where_wlock_was_installed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, receipt: str | None, expected: str
) -> None:
    """A uv tool's receipt names its source (a wheel, a git URL); a pipx venv has its
    metadata file: each gets the command that adds the libraries to that environment."""
    from wlock.cli.demo import install_hint

    prefix = tmp_path / "wlock"
    prefix.mkdir()
    if receipt is None:
        (prefix / "pipx_metadata.json").write_text("{}")
    else:
        (prefix / "uv-receipt.toml").write_text(receipt)
    monkeypatch.setattr(sys, "prefix", str(prefix))
    assert install_hint(("transformers", "torch")) == expected
