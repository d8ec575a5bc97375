"""`wlock export` (a locked repo as plain files, into tmpfs, without the network) and `wlock
gc` (two projects' locks on one cache: only what neither uses goes), judged by hashing the
exported bytes, by huggingface_hub's own scan_cache_dir, and by `wlock check` for both."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from huggingface_hub import scan_cache_dir

from tests.conftest import Hub, random_weights, run_wlock, tmpfs, write_project
from tests.integration.test_archive import dead_endpoint, model, project, wlock
from wlock.lock.lockfile import read_lock
from wlock.models import LockedFile

__all__ = ["project"]  # the fixture: a locked, synced project with a 40 MiB model file


def digest(path: Path, f: LockedFile) -> str:
    data = path.read_bytes()
    if f.hash_kind == "sha256":
        return hashlib.sha256(data).hexdigest()
    return hashlib.sha1(b"blob %d\x00" % len(data) + data).hexdigest()


def assert_exported(dest: Path, project: Path) -> None:
    repo = model(project)
    for f in repo.files:
        path = dest / f.path
        assert not path.is_symlink() and path.is_file(), f.path
        assert digest(path, f) == f.etag, f.path


def test_export_into_tmpfs_without_the_network(hub: Hub, project: Path, tmp_path: Path) -> None:
    repo = model(project)
    with tmpfs(tmp_path / "shm", "128m") as shm:
        dest = shm / "model"
        hub.process.reset_stats()
        endpoint = dead_endpoint()  # the Hub, stopped: export never asks it anyway
        done = wlock(project, "export", repo.id.upper(), str(dest), "--endpoint", endpoint,
                     "--json")
        assert done.code == 0, done.stderr
        first = json.loads(done.stdout)
        assert first["written_files"] == len(repo.files)
        assert set(first["how"]) <= {"reflink", "copy"}  # another filesystem: no hard link
        assert_exported(dest, project)
        stamps = {f.path: os.stat(dest / f.path).st_mtime_ns for f in repo.files}

        (dest / "notes.txt").write_text("mine")
        again = wlock(project, "export", repo.id, str(dest), "--endpoint", endpoint, "--json")
        assert again.code == 0, again.stderr
        second = json.loads(again.stdout)
        assert second["written_files"] == 0 and second["unchanged_files"] == len(repo.files)
        assert second["extra"] == ["notes.txt"] and (dest / "notes.txt").exists()
        assert {f.path: os.stat(dest / f.path).st_mtime_ns for f in repo.files} == stamps

        # A file changed in DEST (same size, new time) is found and put back.
        vocab = dest / "nested" / "vocab.txt"
        vocab.write_bytes(b"x" * vocab.stat().st_size)
        fixed = json.loads(wlock(project, "export", repo.id, str(dest), "--delete",
                                 "--json").stdout)
        assert fixed["written_files"] == 1 and fixed["deleted"] == ["notes.txt"]
        assert not (dest / "notes.txt").exists()
        assert_exported(dest, project)
        assert hub.process.stats()["requests"] == {"hub": 0, "cdn": 0}


def test_export_on_the_caches_filesystem_hard_links(project: Path, tmp_path: Path) -> None:
    dest = tmp_path / "plain"
    done = wlock(project, "export", model(project).id, str(dest), "--json")
    assert done.code == 0, done.stderr
    assert json.loads(done.stdout)["how"] == {"link": len(model(project).files)}
    assert_exported(dest, project)
    copied = tmp_path / "copies"
    done = wlock(project, "export", model(project).id, str(copied), "--copy", "--json")
    assert "link" not in json.loads(done.stdout)["how"]
    assert_exported(copied, project)


def test_export_of_a_repo_not_in_the_cache_says_to_sync(project: Path, tmp_path: Path) -> None:
    done = wlock(project, "export", model(project).id, str(tmp_path / "out"), cache="empty")
    assert done.code == 1
    assert "wlock sync" in done.stderr and "model.safetensors" in done.stderr
    unknown = wlock(project, "export", "acme/not-locked", str(tmp_path / "out"))
    assert unknown.code != 0 and "acme/not-locked" in unknown.stderr


def test_gc_with_two_projects_removes_only_what_neither_uses(hub: Hub, tmp_path: Path) -> None:
    shared_bytes = random_weights(9 * 1024 * 1024)  # large: an LFS blob, shared by commits
    repo_id = hub.unique_id("gc")
    old = hub.builder.commit("model", repo_id, {"model.bin": random_weights(1_000_000),
                                                "shared.bin": shared_bytes})
    middle = hub.builder.commit("model", repo_id, {"model.bin": random_weights(1_000_000)})
    newest = hub.builder.commit("model", repo_id, {"config.json": b"{}\n"})
    gone_id = hub.unique_id("gc-unused")
    hub.builder.commit("model", gone_id, {"weights.bin": random_weights(2_000_000)})
    cache = tmp_path / "shared-hf"

    def project(name: str, manifest: str) -> Path:
        folder = write_project(tmp_path / name, manifest)
        assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=folder).code == 0
        done = run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                         cwd=folder)
        assert done.code == 0, done.stderr
        return folder

    one = project("one", f'[[model]]\nid = "{repo_id}"\n\n'
                  '[[dataset]]\nid = "acme/tiny-squad"\nref = "v1.0"\n')  # newest
    two = project("two", f'[[model]]\nid = "{repo_id}"\nref = "{middle}"\n')
    # Synced once by projects whose locks are gone: the oldest commit and another repo.
    project("gone", f'[[model]]\nid = "{repo_id}"\nref = "{old}"\n\n'
            f'[[model]]\nid = "{gone_id}"\n')
    assert {r.revision for r in read_lock(one / "weights.lock").repos} >= {newest}

    dry = run_wlock("gc", "--keep-lock", str(two / "weights.lock"), "--dry-run", "--json",
                    "--cache-dir", str(cache), cwd=one)
    assert dry.code == 0, dry.stderr
    planned = json.loads(dry.stdout)
    assert {(r["id"], r["revision"]) for r in planned["removed"]} == {
        (repo_id, old), (gone_id, read_lock(tmp_path / "gone" / "weights.lock").repos[1].revision)}
    assert scan_cache_dir(cache).size_on_disk > 0 and len(
        [rev for r in scan_cache_dir(cache).repos for rev in r.revisions]) == 5

    done = run_wlock("gc", "--keep-lock", str(two / "weights.lock"), "--json",
                     "--cache-dir", str(cache), cwd=one)
    assert done.code == 0, done.stderr
    report = json.loads(done.stdout)
    # What only the removed revisions used: the old model.bin and the other repo's blobs.
    kept = {f.etag for p in (one, two) for r in read_lock(p / "weights.lock").repos
            for f in r.files}
    only_gone = {f.etag: f.size for r in read_lock(tmp_path / "gone" / "weights.lock").repos
                 for f in r.files if f.etag not in kept}
    # ... and the other repo's ref (refs/main: 40 bytes), which left the disk with it; the
    # dry run said the same.
    assert report["freed_bytes"] == sum(only_gone.values()) + 40 == planned["freed_bytes"]
    scan = scan_cache_dir(cache)
    assert not scan.warnings
    left = {(r.repo_id, rev.commit_hash) for r in scan.repos for rev in r.revisions}
    assert (repo_id, old) not in left and gone_id not in {r for r, _ in left}
    assert {(repo_id, newest), (repo_id, middle)} <= left
    for folder in (one, two):  # the shared 9 MiB blob stayed for the middle commit
        check = run_wlock("check", "--cache-dir", str(cache), cwd=folder)
        assert check.code == 0, check.stdout + check.stderr
    again = json.loads(run_wlock("gc", "--keep-lock", str(two / "weights.lock"), "--json",
                                 "--cache-dir", str(cache), cwd=one).stdout)
    assert again["removed"] == [] and again["freed_bytes"] == 0


@pytest.mark.parametrize("flag", ["--no-project"])
def test_gc_refuses_to_keep_nothing(project: Path, flag: str) -> None:
    done = wlock(project, "gc", flag)
    assert done.code == 2 and "--keep-lock" in done.stderr


def test_gc_keeps_a_forks_commit_that_a_kept_repo_shares(project: Path, tmp_path: Path) -> None:
    """huggingface_hub's deletion plan removes a commit hash in every repo that has it; a
    fork's copy of a kept commit must not take the kept one with it."""
    import shutil

    cache = tmp_path / "cache"
    repo = model(project)
    folder = f"models--{repo.id.replace('/', '--')}"
    shutil.copytree(cache / folder, cache / "models--someone--fork", symlinks=True)
    done = wlock(project, "gc", "--json")
    assert done.code == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["removed"] == []
    assert report["shared_commits_kept"] == [f"model someone/fork@{repo.revision}"]
    assert wlock(project, "check").code == 0
