"""The upgrade report's own promises, on locks made in memory (issue 61: three of them had
no test that would notice them broken)."""

from __future__ import annotations

from wlock.lock.report import render_markdown, render_text, upgrade_report
from wlock.models import Lock, LockedFile, LockedRepo, PickleScan

OLD, NEW = "a" * 40, "b" * 40


def locks(before: list[LockedFile], after: list[LockedFile],
          pickles: tuple[tuple[PickleScan, ...], tuple[PickleScan, ...]] = ((), ())
          ) -> tuple[Lock, Lock]:
    def lock(revision: str, files: list[LockedFile], scans: tuple[PickleScan, ...]) -> Lock:
        return Lock(manifest_digest="blake3:00", repos=(LockedRepo(
            kind="model", id="acme/m", requested="main", revision=revision, files=tuple(files),
            pickles=scans),))
    return lock(OLD, before, pickles[0]), lock(NEW, after, pickles[1])


def test_a_swapped_import_is_flagged_though_the_count_is_the_same() -> None:
    weights = LockedFile("model.bin", 10, sha256="1" * 64)
    old, new = locks([weights], [LockedFile("model.bin", 10, sha256="2" * 64)], (
        (PickleScan("model.bin", ("torch._utils._rebuild_tensor_v2",), True),),
        (PickleScan("model.bin", ("os.system",), True),)))
    [report] = upgrade_report(old, new)
    assert ("pickle", "model.bin: imports changed (now also os.system; no longer "
            "torch._utils._rebuild_tensor_v2)") in report.flags, report.flags


def test_this_upgrades_bytes_count_a_blob_once_however_many_paths_hold_it() -> None:
    """Two new paths with the same bytes: one blob in the cache, downloaded once."""
    kept = LockedFile("config.json", 5, git_sha1="c" * 40)
    twice = [LockedFile("a/model.safetensors", 1000, sha256="d" * 64),
             LockedFile("b/model.safetensors", 1000, sha256="d" * 64)]
    old, new = locks([kept], [kept, *twice])
    [report] = upgrade_report(old, new)
    assert report.upgrade_bytes == 1000
    assert report.fresh_bytes == 2005  # a fresh machine: every path's bytes, as listed


def test_a_change_that_keeps_the_size_says_the_hashes() -> None:
    """`config.json 816 B -> 816 B` said nothing: the hashes say that the bytes differ."""
    old, new = locks([LockedFile("config.json", 816, git_sha1="e0a4fc6" + "0" * 33)],
                     [LockedFile("config.json", 816, git_sha1="1b2c3d4" + "0" * 33)])
    reports = upgrade_report(old, new)
    assert "~ config.json (816 B, other bytes: e0a4fc6 -> 1b2c3d4)" in render_text(reports)
    assert "| changed | `config.json` | 816 B, other bytes: e0a4fc6 → 1b2c3d4 |" in \
        render_markdown(reports)
    [entry] = [r.as_json() for r in reports]
    assert entry["changed"][0]["old_hash"].startswith("e0a4fc6")
