"""Every figure a command reports is what it did (issue 28): `gc`, `export`, `archive` and
`status` each compared, through --json, with the filesystem before and after; and a dry
run reports the same figures as the real run of the same plan."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.conftest import Hub, run_wlock, write_project
from wlock.lock.lockfile import read_lock


def disk_bytes(folder: Path) -> int:
    """Bytes of the regular files under `folder` (links not followed, not counted)."""
    return sum(p.lstat().st_size for p in folder.rglob("*")
               if p.is_file() and not p.is_symlink())


def wl(*args: str, cwd: Path) -> dict:
    result = run_wlock(*args, "--json", cwd=cwd)
    assert result.code == 0, result.stderr
    return json.loads(result.stdout)


def synced(hub: Hub, tmp_path: Path) -> tuple[Path, Path, Path]:
    """A cache holding two projects' locks; returns the first project, the second, the cache."""
    cache = tmp_path / "cache"
    one = write_project(tmp_path / "one", '[[model]]\nid = "acme/tiny-bert"\n')
    two = write_project(tmp_path / "two", '[[dataset]]\nid = "acme/tiny-squad"\nref = "v1.0"\n')
    for project in (one, two):
        assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
        assert run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                         cwd=project).code == 0
    return one, two, cache


def test_gc_reports_the_bytes_that_left_the_disk(hub: Hub, tmp_path: Path) -> None:
    one, _, cache = synced(hub, tmp_path)
    planned = wl("gc", "--dry-run", "--cache-dir", str(cache), cwd=one)
    before = disk_bytes(cache)
    done = wl("gc", "--cache-dir", str(cache), cwd=one)
    gone = before - disk_bytes(cache)
    assert gone > 50_000  # the dataset's parquet files
    assert done["freed_bytes"] == planned["freed_bytes"] == gone
    assert [r["id"] for r in done["removed"]] == ["acme/tiny-squad"]


def test_export_reports_the_bytes_it_wrote(hub: Hub, tmp_path: Path) -> None:
    one, _, cache = synced(hub, tmp_path)
    dest = tmp_path / "exported"
    done = wl("export", "acme/tiny-bert", str(dest), "--copy", "--cache-dir", str(cache),
              cwd=one)
    repo = read_lock(one / "weights.lock").repos[0]
    assert done["written_bytes"] == disk_bytes(dest) == repo.size
    assert done["written_files"] == len(repo.files)
    again = wl("export", "acme/tiny-bert", str(dest), "--copy", "--cache-dir", str(cache),
               cwd=one)
    assert (again["written_files"], again["written_bytes"]) == (0, 0)
    assert again["unchanged_files"] == len(repo.files)


def test_archive_reports_the_bytes_it_stored(hub: Hub, tmp_path: Path) -> None:
    one, _, cache = synced(hub, tmp_path)
    archive = tmp_path / "nas"
    planned = wl("archive", "--to", str(archive), "--dry-run", "--cache-dir", str(cache),
                 cwd=one)
    done = wl("archive", "--to", str(archive), "--cache-dir", str(cache), cwd=one)
    stored = disk_bytes(archive / "blobs")
    assert done["uploaded_bytes"] == planned["bytes_to_upload"] == stored > 0
    assert done["uploaded_files"] == planned["files_to_upload"] == len(
        list((archive / "blobs").iterdir()))
    again = wl("archive", "--to", str(archive), "--cache-dir", str(cache), cwd=one)
    assert (again["uploaded_files"], again["uploaded_bytes"]) == (0, 0)


def test_status_reports_the_bytes_that_are_there(hub: Hub, tmp_path: Path) -> None:
    one, _, cache = synced(hub, tmp_path)
    repo = read_lock(one / "weights.lock").repos[0]
    big = max(repo.files, key=lambda f: f.size)
    blob = next(cache.glob(f"models--*/blobs/{big.etag}"))
    os.unlink(blob)  # a partial repo
    report = wl("status", "--cache-dir", str(cache), cwd=one)
    entry = next(r for r in report["repos"] if r["id"] == "acme/tiny-bert")
    blobs = {p.name: p.stat().st_size for p in blob.parent.iterdir()}
    present = sum(f.size for f in repo.files if blobs.get(f.etag) == f.size)
    assert entry["bytes_present"] == present == repo.size - big.size
    assert entry["bytes"] == repo.size
