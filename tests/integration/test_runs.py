"""A run's life-cycle: `wlock record` and `wlock run --record` (what a run used, as JSON lines),
`wlock lock --from-record` (the lock a run used, rebuilt byte for byte), and `wlock status`
(where the data lives: a normal folder, a tmpfs, a partial repo)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import Hub, run_wlock, tmpfs, write_project
from wlock.cache.status import NEARLY_FULL
from wlock.lock.lockfile import read_lock

FIELDS = {"schema", "run_id", "time", "host", "lock", "lock_digest", "manifest_digest",
          "uv_lock_digest", "git_commit", "git_dirty", "cache_dir", "event", "kind", "id",
          "requested", "revision", "purl", "files", "bytes", "snapshot", "file_list"}


def synced(hub: Hub, folder: Path, cache: Path) -> Path:
    project = write_project(folder, '[[model]]\nid = "acme/tiny-bert"\n\n'
                            '[[dataset]]\nid = "acme/tiny-squad"\nref = "v1.0"\n')
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    done = run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache), cwd=project)
    assert done.code == 0, done.stderr
    return project


def lines(log: Path) -> list[dict]:
    text = log.read_text()
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]  # one object per line


def test_record_writes_one_line_per_entry_with_every_field(hub: Hub, tmp_path: Path) -> None:
    project = synced(hub, tmp_path / "project", tmp_path / "cache")
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q",
                    "--allow-empty", "-m", "x"], cwd=project, check=True)
    (project / "uv.lock").write_text("version = 1\n")
    log = tmp_path / "runs" / "weights.jsonl"
    done = run_wlock("record", "--log", str(log), "--cache-dir", str(tmp_path / "cache"),
                     cwd=project)
    assert done.code == 0, done.stderr
    records = lines(log)
    lock = read_lock(project / "weights.lock")
    assert len(records) == len(lock.repos)
    assert len({r["run_id"] for r in records}) == 1
    for record in records:
        assert set(record) >= FIELDS, FIELDS - set(record)
        repo = lock.find(record["kind"], record["id"])
        assert repo is not None and record["revision"] == repo.revision
        assert record["files"] == len(repo.files) and record["bytes"] == repo.size
        assert re.fullmatch(r"[0-9a-f]{40}", record["git_commit"])
        assert record["git_dirty"] is False  # weights.toml and the lock are untracked
        assert record["uv_lock_digest"].startswith("sha256:")
        assert Path(record["snapshot"]).is_dir()
    model = next(r for r in records if r["kind"] == "model")
    assert model["purl"] == f"pkg:huggingface/acme/tiny-bert@{model['revision']}"
    dataset = next(r for r in records if r["kind"] == "dataset")
    assert dataset["purl"] == (f"pkg:huggingface/acme/tiny-squad@{dataset['revision']}"
                               "?repository_url=https://huggingface.co/datasets")
    assert dataset["requested"] == "v1.0"


def test_run_record_appends_the_exit_status_and_rebuilds_the_lock(
    hub: Hub, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    project = synced(hub, tmp_path / "project", cache)
    log = tmp_path / "runs.jsonl"
    seen = tmp_path / "seen-before-start"
    # CMD sees the record already written (it copies the log), then fails with 3.
    code = (f"import shutil, sys; shutil.copy({str(log)!r}, {str(seen)!r}); sys.exit(3)")
    done = run_wlock("run", "--record", str(log), "--cache-dir", str(cache), "--",
                     sys.executable, "-c", code, cwd=project)
    assert done.code == 3, done.stderr
    before = lines(seen)
    assert before and all(r["event"] == "entry" for r in before)
    after = lines(log)
    assert after[:-1] == before
    assert after[-1]["event"] == "exit" and after[-1]["exit_code"] == 3
    assert after[-1]["run_id"] == before[0]["run_id"]

    original = (project / "weights.lock").read_bytes()
    # Another run later with another lock: the log then holds two runs.
    assert run_wlock("record", "--log", str(log), "--cache-dir", str(cache),
                     cwd=project).code == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    rebuilt = run_wlock("lock", "--from-record", str(log), "--run", before[0]["run_id"],
                        "--json", cwd=elsewhere)
    assert rebuilt.code == 0, rebuilt.stderr
    assert (elsewhere / "weights.lock").read_bytes() == original
    assert json.loads(rebuilt.stdout)["run_id"] == before[0]["run_id"]
    # And it is a lock that syncs, without weights.toml.
    fresh = tmp_path / "fresh-cache"
    done = run_wlock("sync", "--frozen", "--endpoint", hub.endpoint, "--cache-dir", str(fresh),
                     cwd=elsewhere)
    assert done.code == 0, done.stderr


def test_an_edited_record_does_not_rebuild_a_lock(hub: Hub, tmp_path: Path) -> None:
    project = synced(hub, tmp_path / "project", tmp_path / "cache")
    log = tmp_path / "runs.jsonl"
    assert run_wlock("record", "--log", str(log), "--cache-dir", str(tmp_path / "cache"),
                     cwd=project).code == 0
    records = lines(log)
    records[0]["file_list"][0]["size"] += 1
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    done = run_wlock("lock", "--from-record", str(log), "-o", str(tmp_path / "x.lock"))
    assert done.code == 4
    assert "not the one recorded" in done.stderr and not (tmp_path / "x.lock").exists()


def test_status_of_a_folder_a_partial_repo_and_a_tmpfs(hub: Hub, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    project = synced(hub, tmp_path / "project", cache)
    done = run_wlock("status", "--json", "--cache-dir", str(cache), cwd=project)
    assert done.code == 0, done.stderr
    report = json.loads(done.stdout)
    assert {r["state"] for r in report["repos"]} == {"complete"}
    assert report["filesystem"]["volatile"] is False and report["filesystem"]["type"] != "?"
    assert report["filesystem"]["free_bytes"] > 0
    # The test's own disk may really be nearly full (a shared CI machine): that one warning is
    # then right, and any other is not.
    usage = shutil.disk_usage(cache)
    expected = ["nearly full"] if usage.free < NEARLY_FULL * usage.total else []
    kinds = ["nearly full" if "is nearly full" in w else w for w in report["warnings"]]
    assert kinds == expected

    model = read_lock(project / "weights.lock").find("model", "acme/tiny-bert")
    assert model is not None
    biggest = max(model.files, key=lambda f: f.size)
    (cache / "models--acme--tiny-bert" / "blobs" / biggest.etag).unlink()
    report = json.loads(run_wlock("status", "--json", "--cache-dir", str(cache),
                                  cwd=project).stdout)
    state = {r["id"]: r for r in report["repos"]}["acme/tiny-bert"]
    assert state["state"] == "partial"
    assert state["bytes_present"] == model.size - biggest.size
    assert state["files_present"] == len(model.files) - 1

    with tmpfs(tmp_path / "shm", "64m") as shm:
        moved = shm / "hf"
        shutil.copytree(cache, moved, symlinks=True)
        done = run_wlock("status", "--cache-dir", str(moved), cwd=project)
        assert done.code == 0, done.stderr
        assert "tmpfs" in done.stdout and "volatile: lost at reboot" in done.stdout
        assert "gone at reboot" in done.stderr  # the warning
        report = json.loads(run_wlock("status", "--json", "--cache-dir", str(moved),
                                      cwd=project).stdout)
        assert report["filesystem"]["volatile"] is True
        assert report["filesystem"]["mount_point"] == str(shm)


def test_status_says_whether_the_archive_holds_each_revision(hub: Hub, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    project = synced(hub, tmp_path / "project", cache)
    archive = tmp_path / "nas"
    report = json.loads(run_wlock("status", "--json", "--archive", str(archive),
                                  "--cache-dir", str(cache), cwd=project).stdout)
    assert [r["archived"] for r in report["repos"]] == [False, False]
    assert run_wlock("archive", "--to", str(archive), "--cache-dir", str(cache),
                     cwd=project).code == 0
    report = json.loads(run_wlock("status", "--json", "--archive", str(archive),
                                  "--cache-dir", str(cache), cwd=project).stdout)
    assert [r["archived"] for r in report["repos"]] == [True, True]


def test_pins_you_can_see_and_use_in_a_shell(hub: Hub, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    project = synced(hub, tmp_path / "project", cache)
    lock = read_lock(project / "weights.lock")
    model = lock.find("model", "acme/tiny-bert")
    assert model is not None
    # Case-insensitive, as the Hub; one line, the full commit, for $(...).
    done = run_wlock("revision", "ACME/Tiny-Bert", cwd=project)
    assert (done.code, done.stdout) == (0, model.revision + "\n")
    done = run_wlock("path", "acme/tiny-bert", "--cache-dir", str(cache), cwd=project)
    assert done.code == 0 and Path(done.stdout.strip()) == (
        cache / "models--acme--tiny-bert" / "snapshots" / model.revision)
    assert run_wlock("path", "acme/tiny-bert", "--cache-dir", str(tmp_path / "empty"),
                     cwd=project).code == 1
    missing = run_wlock("revision", "acme/nope", cwd=project)
    assert missing.code == 1 and "acme/nope" in missing.stderr

    listed = json.loads(run_wlock("list", "--json", "--cache-dir", str(cache),
                                  cwd=project).stdout)
    assert [(r["kind"], r["id"], r["revision"], r["cache"]) for r in listed["repos"]] == [
        (r.kind, r.id, r.revision, "complete") for r in lock.repos]
    text = run_wlock("list", "--cache-dir", str(tmp_path / "empty"), cwd=project).stdout
    assert model.revision in text and "missing" in text
