"""Every wait ends when the user asks (issue 59): Ctrl-C and SIGTERM end a command that is
waiting out the Hub's rate limit within seconds, exit 130 / 143, no temp file left, the
cache as it was; the wait is one line in the log with progress bars off."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import Hub, default_signals, run_wlock, write_project


def started(args: list[str], cwd: Path, env: dict[str, str] | None = None
            ) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "wlock", *args], cwd=cwd, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=default_signals,
        env={**os.environ, **(env or {})})


def waiting(hub: Hub, kind: str, proc: subprocess.Popen[str]) -> None:
    """Until the Hub has refused `proc` a request of `kind` with its budget spent."""
    deadline = time.monotonic() + 60
    while not any(e["status"] == 429 for e in hub.process.stats()["log"]):
        assert time.monotonic() < deadline and proc.poll() is None, proc.stderr and \
            proc.stderr.read()
        time.sleep(0.05)
    time.sleep(1.0)  # now in its wait


def repo(hub: Hub, files: int) -> str:
    repo_id = hub.unique_id("waits")
    hub.builder.commit("model", repo_id, {f"f/{n:03d}.json": b'{"n": %d}' % n
                                          for n in range(files)})
    return repo_id


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("command", ["lock", "sync", "add", "outdated", "check-remote"])
def test_a_signal_ends_a_rate_limit_wait_at_once(hub: Hub, tmp_path: Path, command: str,
                                                 signame: str) -> None:
    """A 60 s reset: the command ends within 3 s of the signal (it lived out the whole wait,
    printing `resuming in 60 s` after "Aborted.", and a worker's plain sleep kept the
    process alive). Seen failing with the rate budget's plain time.sleep."""
    repo_id = repo(hub, 12)
    entries = [repo_id, repo(hub, 2)] if command == "outdated" else [repo_id]  # 2 requests
    project = write_project(tmp_path / "p", "" if command == "add" else "".join(
        f'[[model]]\nid = "{e}"\nloader = "all"\n\n' for e in entries))
    if command in ("sync", "outdated", "check-remote"):
        assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    kind = "resolvers" if command == "sync" else "api"
    hub.process.faults(rate_limits={kind: {"q": 1, "w": 60}})
    hub.process.reset_stats()
    cache = tmp_path / "cache"
    args = {"add": ["add", repo_id, "--loader", "all"], "outdated": ["outdated"],
            "check-remote": ["lock", "--check", "--remote"]}.get(
        command, [command, "--cache-dir", str(cache)])
    proc = started([*args, "--endpoint", hub.endpoint], project,
                   env={"HF_HUB_DISABLE_PROGRESS_BARS": "1"})
    try:
        waiting(hub, kind, proc)
        stopped = time.monotonic()
        os.killpg(proc.pid, getattr(signal, signame))
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - stopped
    finally:
        if proc.poll() is None:
            proc.kill()
        hub.process.faults()
    assert proc.returncode == (130 if signame == "SIGINT" else 143), err
    assert "Traceback" not in err, err
    # 0.01-0.02 s on this machine (issue 59 asks 3 s); the bound is relational, so a loaded
    # CI machine cannot break it: well before the 60 s reset the bug waited out.
    assert took < 30, (took, err)
    assert f"rate limited by the Hub ({kind}): resuming in" in err, err  # said, bars off
    assert err.count("resuming in") == 1, err  # not again after the signal
    if command == "add":
        assert (project / "weights.toml").read_text() == ""  # left as it was
    assert not list(cache.rglob("*.wlock-incomplete")) if cache.exists() else True
