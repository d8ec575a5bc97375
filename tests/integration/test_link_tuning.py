"""The rule that finds the link (issue 27), against the emulator's shaped link: it grows the
connections where single streams are capped, keeps today's where more streams do not help
(loopback), and backs off when the server answers 429; `sync -v` and `--json` say what it
measured and chose."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import Hub, run_wlock, write_project
from wlock.cache.transfer import FetchJob, Transfer

SIZE = 12 * 2**20


@pytest.fixture(scope="module")
def big(_hub_session: Hub) -> str:
    repo_id = _hub_session.unique_id("link")
    _hub_session.builder.commit("model", repo_id, {"model.safetensors": os.urandom(SIZE),
                                                   "config.json": b"{}"})
    return repo_id


def tune(hub: Hub, repo_id: str, tmp_path: Path, files: int = 4, connections: int = 64):  # type: ignore[no-untyped-def]
    job = FetchJob(kind="model", repo_id=repo_id, revision="main", path="model.safetensors",
                   size=SIZE, etag="0" * 64, hash_kind="sha256", temp=tmp_path / "t")
    with Transfer(hub.endpoint, None, jobs=files, connections=connections) as transfer:
        return transfer.tune(job, files)


def test_a_link_that_caps_each_stream_gets_the_ceiling(
        hub: Hub, big: str, tmp_path: Path) -> None:
    hub.process.faults(link={"mb_per_s": 10, "delay_ms": 20, "listener": "cdn"})
    chosen = tune(hub, big, tmp_path)
    assert chosen.four_streams > 2.5 * chosen.one_stream
    assert chosen.per_file == 16 and "the link per stream" in chosen.limit
    assert tune(hub, big, tmp_path, files=1, connections=32).per_file == 32


def test_loopback_keeps_todays_connections(hub: Hub, big: str, tmp_path: Path) -> None:
    chosen = tune(hub, big, tmp_path)
    assert chosen.per_file == 2, chosen  # 8 shared by 4 files, as before
    assert "do not help" in chosen.limit


def test_a_server_answering_429_gets_fewer(hub: Hub, big: str, tmp_path: Path) -> None:
    hub.process.faults({"action": "status", "status": 429, "listener": "cdn",
                        "retry_after": 1})
    chosen = tune(hub, big, tmp_path)
    assert chosen.per_file == 1 and "backed off" in chosen.limit


def test_sync_reports_the_link_it_found(hub: Hub, big: str, tmp_path: Path) -> None:
    project = write_project(tmp_path / "p", f'[[model]]\nid = "{big}"\n')
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    hub.process.faults(link={"mb_per_s": 10, "delay_ms": 20, "listener": "cdn"})
    probe = {"WLOCK_PROBE_FROM": "1"}  # a sync of 12 MiB probes too (by default: 256 MiB)
    done = run_wlock("-v", "--no-progress", "sync", "--json", "--endpoint", hub.endpoint,
                     "--cache-dir", str(tmp_path / "cache"), cwd=project, env=probe)
    assert done.code == 0, done.stderr
    link = json.loads(done.stdout)["link"]
    assert link["connections_per_file"] == 64 and link["files_at_once"] == 1
    assert link["four_streams_bytes_per_s"] > 2.5 * link["one_stream_bytes_per_s"]
    assert run_wlock("check", "--cache-dir", str(tmp_path / "cache"), cwd=project).code == 0
    said = run_wlock("-v", "--no-progress", "sync", "--endpoint", hub.endpoint,
                     "--cache-dir", str(tmp_path / "cache2"), cwd=project, env=probe)
    assert said.code == 0, said.stderr
    assert "64 connections per large file (1 at once): the limit is the link per stream" \
        in said.stderr, said.stderr
    # Below the line (a sync of 12 MiB), no probe and no bytes read twice.
    quiet = run_wlock("--no-progress", "sync", "--json", "--endpoint", hub.endpoint,
                      "--cache-dir", str(tmp_path / "cache3"), cwd=project)
    assert quiet.code == 0 and json.loads(quiet.stdout)["link"] is None
