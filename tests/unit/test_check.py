"""check_cache over batches: each blob hashed once, whatever batch its users fall in, and a
wrong blob reported for every file that uses it, the last batch included."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from wlock.cache import check
from wlock.cache.check import check_cache
from wlock.cache.layout import RepoPaths, link_target
from wlock.models import Lock, LockedFile, LockedRepo

REVISION = "c" * 40


def git_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def make_cache(cache: Path, files: dict[str, bytes], wrong: dict[str, bytes]) -> Lock:
    """A cache holding `files`; the blob of a path in `wrong` holds those bytes instead."""
    locked = tuple(LockedFile(path=p, size=len(d), git_sha1=git_sha1(d))
                   for p, d in sorted(files.items()))
    repo = LockedRepo(kind="model", id="acme/batches", requested=REVISION, revision=REVISION,
                      files=locked)
    paths = RepoPaths.of(cache, repo)
    paths.blobs.mkdir(parents=True)
    for path, data in wrong.items():  # a blob is one file, whatever paths use it
        paths.blob(git_sha1(files[path])).write_bytes(data)
    for f in locked:
        if not paths.blob(f.etag).exists():
            paths.blob(f.etag).write_bytes(files[f.path])
        link = paths.link(REVISION, f.path)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(link_target(f.path, f.etag))
    return Lock(manifest_digest="blake3:" + "0" * 64, repos=(repo,))


@pytest.mark.parametrize("batch", [1, 2, 3, 4096])
def test_each_blob_is_hashed_once_and_judged_for_all_its_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch: int
) -> None:
    monkeypatch.setattr(check, "BATCH", batch)
    shared, bad, other = b"shared bytes\n", b"good bytes!\n", b"other\n"
    lock = make_cache(tmp_path / "cache", {
        "a/1.json": shared, "b/2.json": bad, "c/3.json": shared, "d/4.json": other,
        "e/5.json": bad, "f/6.json": shared, "z/last.json": bad,
    }, wrong={"b/2.json": b"evil bytes!\n"})
    report = check_cache(lock, tmp_path / "cache", jobs=2)
    assert sorted((p.kind, p.path) for p in report.problems) == [
        ("wrong-hash", "b/2.json"), ("wrong-hash", "e/5.json"), ("wrong-hash", "z/last.json")]
    assert report.files == 7
    assert report.bytes_hashed == len(shared) + len(bad) + len(other)  # each blob once


def test_the_report_says_how_long_the_check_took(tmp_path: Path) -> None:
    import time

    lock = make_cache(tmp_path / "cache", {"a.json": b"a\n", "b.json": b"b\n"}, wrong={})
    started = time.monotonic()
    report = check_cache(lock, tmp_path / "cache", jobs=1)
    assert 0 <= report.seconds <= time.monotonic() - started


def test_very_many_tiny_files_are_hashed_in_processes_with_the_same_verdicts(
        tmp_path: Path) -> None:
    """Past PROCESSES_FROM tiny files a submission is hashed in worker processes: every
    digest is still the file's, in its place, and a file that cannot be read still comes
    back as its OSError for the caller to judge."""
    from wlock.hashing import PROCESSES_FROM, HashPool, hash_file

    items: list[tuple[str | Path, str, int]] = []
    for n in range(PROCESSES_FROM + 100):
        path = tmp_path / f"{n:05d}.json"
        path.write_bytes(b'{"n": %d}\n' % n)
        items.append((path, "git-sha1" if n % 2 else "sha256", path.stat().st_size))
    items.append((tmp_path / "gone.json", "sha256", 10))
    seen: list[int] = []
    with HashPool(2, seen.append) as pool:
        digests = pool.submit(items)()
        assert pool._processes is not None  # the process path, not the threads
    for (path, kind, _), digest in zip(items[:-1], digests[:-1], strict=True):
        assert digest == hash_file(path, kind)
    assert isinstance(digests[-1], FileNotFoundError)
    assert sum(seen) == sum(size for _, _, size in items)


@pytest.mark.parametrize("size", [1024 * 1024, 16 * 2**20, 2 * 16 * 2**20 + 12345])
def test_a_large_file_hashes_whole_across_its_windows(tmp_path: Path, size: int) -> None:
    """hash_file maps a large file a window (CHUNK) at a time: the digest is the whole
    file's at a window's size, across windows, and with a piece of one at the end."""
    from wlock.hashing import hash_file

    data = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    path = tmp_path / "big.safetensors"
    path.write_bytes(data)
    assert hash_file(path, "sha256") == hashlib.sha256(data).hexdigest()
    blob = hashlib.sha1(b"blob %d\0" % size + data).hexdigest()
    assert hash_file(path, "git-sha1") == blob


def test_hashing_a_large_file_keeps_it_out_of_the_resident_size(tmp_path: Path) -> None:
    """The pages of a hashed file are mapped a window at a time and unmapped after it: the
    process's peak resident size grows by about a window, not by the file (a whole file
    mapped at once shows all of it: 256 MiB here)."""
    import subprocess
    import sys

    path = tmp_path / "big.safetensors"
    with open(path, "wb") as f:
        for _ in range(16):
            f.write(os.urandom(16 * 2**20))
    script = ("import resource, sys; from wlock.hashing import hash_file\n"
              "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
              "hash_file(sys.argv[1], 'sha256')\n"
              "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)")
    done = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True,
                          text=True, check=True)
    grown_kib = int(done.stdout)
    assert grown_kib < 64 * 1024, f"the peak resident size grew by {grown_kib} KiB"
