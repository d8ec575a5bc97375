"""The Hub's API failing as the lock's client meets it: no answer, a Retry-After, through
`lock` and `add` and the client itself. huggingface_hub's client decides what these see
(0.34 over requests, 2.x over httpx2), so they run on both stacks; the download path's faults
are test_faults.py's and test_promises.py's, run on the newest."""

from __future__ import annotations

import time
from pathlib import Path

from tests.conftest import Hub, run_wlock, write_project
from wlock.lock.hub import HubClient

TIMEOUT = 2.0


def test_an_api_that_never_answers_ends_lock_with_exit_5(hub: Hub, tmp_path: Path) -> None:
    project = write_project(tmp_path / "p", '[[model]]\nid = "acme/tiny-bert"\n')
    hub.process.faults({"action": "delay", "match": "^/api/models/", "delay_ms": 120_000})
    started = time.monotonic()
    result = run_wlock("lock", "--endpoint", hub.endpoint, "--timeout", str(TIMEOUT),
                       cwd=project)
    elapsed = time.monotonic() - started
    assert result.code == 5, result.stderr
    assert result.stderr.startswith(
        f"error: cannot reach {hub.endpoint} for model acme/tiny-bert: no answer within "
        f"{TIMEOUT:g}s, 2 times\n")
    assert "Traceback" not in result.stderr
    assert elapsed < 2 * TIMEOUT + 15, elapsed
    assert not (project / "weights.lock").exists()


def test_add_takes_a_timeout_and_leaves_weights_toml_as_it_was(
        hub: Hub, tmp_path: Path) -> None:
    """Issue 28: `wlock add` talks to the Hub (to check the entry, choose its loader and
    lock it) but took no --timeout."""
    project = write_project(tmp_path / "p", "")
    before = (project / "weights.toml").read_bytes()
    hub.process.faults({"action": "delay", "match": "^/api/models/", "delay_ms": 120_000})
    started = time.monotonic()
    result = run_wlock("add", "acme/tiny-bert", "--endpoint", hub.endpoint, "--timeout",
                       str(TIMEOUT), cwd=project)
    elapsed = time.monotonic() - started
    assert result.code == 5, result.stderr
    assert f"no answer within {TIMEOUT:g}s, 2 times" in result.stderr
    assert "weights.toml was left as it was" in result.stderr
    assert (project / "weights.toml").read_bytes() == before
    assert elapsed < 2 * TIMEOUT + 15, elapsed


def test_retry_after_is_what_the_api_client_waits(hub: Hub) -> None:
    waits: list[float] = []
    hub.process.faults({"action": "status", "status": 429, "retry_after": 7, "times": 1,
                        "match": "^/api/models/acme/tiny-bert"})
    snap = HubClient(hub.endpoint, sleep=waits.append).snapshot("model", "acme/tiny-bert",
                                                                "main")
    assert snap.files and waits == [7.0]
