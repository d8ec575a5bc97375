"""The JSON contract: with --json every command prints exactly one JSON document on stdout,
on success and on each error exit, with the schema version, the command, `ok` and the exit
code; and a dry run has the same fields as the real run."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import pytest

from tests.conftest import Hub, Result, run_wlock, write_project

# The error kinds of each exit code: a script may branch on either, so they must agree,
# also when several failures of different kinds are reported as one.
KINDS = {1: {"check failed"}, 2: {"usage"}, 3: {"stale lock"}, 4: {"invalid file"},
         5: {"hub", "archive"}, 6: {"local"}}


def document(done: Result, command: str) -> dict:
    doc = json.loads(done.stdout)  # the whole of stdout: exactly one document
    assert isinstance(doc, dict)
    assert doc["schema"] == 1 and doc["command"] == command, doc
    assert doc["exit_code"] == done.code, (doc, done.stderr)
    assert doc["ok"] is (done.code == 0)
    if not doc["ok"] and "error" in doc:
        assert doc["error"]["message"] and doc["error"]["exit_code"] == done.code
        assert doc["error"]["kind"] in KINDS[done.code], doc
    return doc


@pytest.fixture
def project(hub: Hub, tmp_path: Path) -> Path:
    folder = write_project(tmp_path / "project", '[[model]]\nid = "acme/tiny-bert"\n')
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=folder).code == 0
    return folder


def wl(project: Path, *args: str) -> Result:
    return run_wlock(*args, "--json", "--cache-dir", str(project.parent / "cache"), cwd=project)


def test_every_command_prints_one_document_on_success(hub: Hub, project: Path,
                                                      tmp_path: Path) -> None:
    ep = ("--endpoint", hub.endpoint)
    dry = document(wl(project, "sync", "--dry-run", *ep), "sync")
    real = document(wl(project, "sync", *ep), "sync")
    noop = document(wl(project, "sync", *ep), "sync")
    assert set(dry) == set(real) == set(noop)
    assert (dry["dry_run"], real["dry_run"]) == (True, False)
    assert all(len(r["revision"]) == 40 for r in real["repos"])

    document(wl(project, "lock", "--dry-run", *ep), "lock")
    document(wl(project, "lock", "--check"), "lock")
    document(wl(project, "check"), "check")
    document(wl(project, "list"), "list")
    assert len(document(wl(project, "revision", "acme/tiny-bert"), "revision")["revision"]) == 40
    document(wl(project, "path", "acme/tiny-bert"), "path")
    document(wl(project, "status"), "status")
    document(wl(project, "outdated", *ep), "outdated")
    archive = str(tmp_path / "nas")
    a_dry = document(wl(project, "archive", "--to", archive, "--dry-run"), "archive")
    a_real = document(wl(project, "archive", "--to", archive), "archive")
    assert set(a_dry) == set(a_real)
    document(wl(project, "export", "acme/tiny-bert", str(tmp_path / "out")), "export")
    g_dry = document(wl(project, "gc", "--dry-run"), "gc")
    assert set(g_dry) == set(document(wl(project, "gc"), "gc"))
    document(wl(project, "record", "--log", str(tmp_path / "runs.jsonl")), "record")
    (project / "train.py").write_text("from transformers import AutoModel\n"
                                      "AutoModel.from_pretrained('acme/tiny-bert')\n")
    lint = run_wlock("lint", "--json", cwd=project)
    assert document(lint, "lint")["findings"][0]["code"] == "WL101"
    run = tmp_path / "run"
    (run / "checkpoint-1").mkdir(parents=True)
    old = time.time() - 3600
    os.utime(run / "checkpoint-1", (old, old))
    document(wl(project, "checkpoints", "keep", str(run), "--dry-run"), "checkpoints keep")
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    document(run_wlock("init", "--json", cwd=fresh), "init")
    added = document(run_wlock("add", "acme/tiny-squad", "--dataset", "--json", "--endpoint",
                                 hub.endpoint, cwd=fresh), "add")
    assert len(added["revision"]) == 40
    document(run_wlock("remove", "acme/tiny-squad", "--dataset", "--json", cwd=fresh),
             "remove")


def test_every_error_exit_prints_one_document(hub: Hub, project: Path, tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    cases = [
        (wl(project, "sync", "--endpoint", dead, "--timeout", "1"), "sync", 5),
        (wl(project, "check"), "check", 1),  # nothing synced
        (wl(project, "sync", "--jobs", "0"), "sync", 2),
        (wl(project, "revision", "acme/not-locked"), "revision", 1),
        (wl(project, "export", "acme/tiny-bert", str(tmp_path / "o")), "export", 1),
        (wl(project, "archive", "--to", str(tmp_path / "nas")), "archive", 1),
        (wl(project, "checkpoints", "keep", str(tmp_path / "nowhere")), "checkpoints keep", 2),
    ]
    (project / "weights.toml").write_text('[[model]]\nid = "acme/tiny-squad"\n')
    cases.append((wl(project, "lock", "--check"), "lock", 3))
    (project / "weights.lock").write_text("not = [valid\n")
    cases.append((wl(project, "sync"), "sync", 4))
    for done, command, code in cases:
        assert done.code == code, (command, done.code, done.stderr)
        doc = document(done, command)
        assert doc["ok"] is False

