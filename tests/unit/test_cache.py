"""The cache's write primitives, on a real filesystem."""

from __future__ import annotations

from pathlib import Path

from wlock.cache import publish_blob


def test_a_published_blob_is_never_replaced(tmp_path: Path) -> None:
    """Readers on other nodes of a network filesystem see a replaced file vanish for a
    moment: a blob that exists stays, the late writer's copy is dropped."""
    blob = tmp_path / "blob"
    blob.write_bytes(b"first")
    inode = blob.stat().st_ino
    late = tmp_path / ".blob.tmp"
    late.write_bytes(b"first")
    assert publish_blob(late, blob) is False
    assert blob.stat().st_ino == inode and not late.exists()
    fresh = tmp_path / ".new.tmp"
    fresh.write_bytes(b"x")
    assert publish_blob(fresh, tmp_path / "new") is True
    assert (tmp_path / "new").read_bytes() == b"x" and not fresh.exists()
    wrong = tmp_path / ".fix.tmp"
    wrong.write_bytes(b"right")
    assert publish_blob(wrong, blob, replace=True) is True  # sync --verify's repair
    assert blob.read_bytes() == b"right"
