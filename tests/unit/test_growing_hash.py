"""GrowingHash: the digest of a file written in ranges, in any order, by another writer,
hashed as the ranges land (what a large download's thread does while hf_transfer writes)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from wlock import hashing
from wlock.hashing import GrowingHash

MiB = 1024 * 1024


def _write_range(path: Path, data: bytes, index: int, size: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, data[index * size:(index + 1) * size], index * size)
    finally:
        os.close(fd)


def _holes_known(folder: Path) -> bool:
    """Whether this filesystem tells where a sparse file's holes are."""
    probe = folder / "sparse-probe"
    with open(probe, "wb") as f:
        f.seek(8 * MiB)
        f.write(b"x")
    fd = os.open(probe, os.O_RDONLY)
    try:
        return os.lseek(fd, 0, os.SEEK_HOLE) == 0
    finally:
        os.close(fd)
        probe.unlink()


@pytest.mark.parametrize("kind", ["sha256", "git-sha1"])
def test_ranges_out_of_order_hash_to_the_whole_file(tmp_path: Path, kind: str) -> None:
    if not _holes_known(tmp_path):
        pytest.skip("this filesystem does not report holes")
    data = os.urandom(5 * 4 * MiB + 12345)
    path = tmp_path / "blob.incomplete"
    growing = GrowingHash(path, kind, len(data))
    growing.advance()  # no file yet
    assert growing.hashed == 0
    # Range 1 lands before range 0: nothing can be hashed until range 0 is there.
    _write_range(path, data, 1, 4 * MiB)
    growing.advance()
    assert growing.hashed == 0, "hashed past a hole: the zeros of range 0 went in"
    _write_range(path, data, 0, 4 * MiB)
    growing.advance()
    assert growing.hashed == 8 * MiB, "ranges 0 and 1 are there, in one piece"
    for index in (3, 5, 2, 4):
        _write_range(path, data, index, 4 * MiB)
        growing.advance()
    assert growing.hashed == len(data), "the whole file was hashed as it landed"
    expected = (hashlib.sha256(data).hexdigest() if kind == "sha256" else
                hashlib.sha1(b"blob %d\x00" % len(data) + data).hexdigest())
    assert growing.finish() == expected


def test_finish_reads_what_advance_did_not_reach(tmp_path: Path) -> None:
    data = os.urandom(3 * MiB)
    path = tmp_path / "blob"
    path.write_bytes(data)
    assert GrowingHash(path, "sha256", len(data)).finish() == hashlib.sha256(data).hexdigest()


def test_a_file_that_grows_by_uneven_pieces_is_hashed_from_where_it_stopped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A mapping starts on a page boundary: after a piece that ended mid-page, the next
    one is hashed from that byte, not from the page's start (also where a piece takes
    several mappings)."""
    monkeypatch.setattr(hashing, "GROWING_WINDOW", MiB)
    data = os.urandom(3 * 1_000_003 + 5 * MiB)
    path = tmp_path / "blob"
    growing = GrowingHash(path, "sha256", len(data))
    with open(path, "wb") as out:
        for piece in (1_000_003, 1_000_003, 1_000_003, 5 * MiB):
            out.write(data[out.tell():out.tell() + piece])
            out.flush()
            growing.advance()
    assert growing.hashed == len(data)
    assert growing.finish() == hashlib.sha256(data).hexdigest()


def test_a_range_that_changes_after_it_was_hashed_makes_the_claim_wrong(tmp_path: Path) -> None:
    """Why the caller compares finish() with the lock and hashes the file again on a
    mismatch: bytes read before their final write (zeros where a filesystem hides its
    holes) give a digest that is not the file's."""
    data = os.urandom(2 * MiB)
    path = tmp_path / "blob"
    path.write_bytes(bytes(len(data)))  # zeros, as a filesystem without holes shows them
    growing = GrowingHash(path, "sha256", len(data))
    growing.advance()
    path.write_bytes(data)
    assert growing.finish() != hashlib.sha256(data).hexdigest()


def test_a_file_gone_before_it_finished_is_not_followed(tmp_path: Path) -> None:
    assert GrowingHash(tmp_path / "never", "sha256", 10).finish() is None
