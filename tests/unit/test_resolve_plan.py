"""The resolver's decisions, with the Hub replaced by a table of snapshots (a parameter of
plan_lock, not a mock of our code); the real Hub path is in tests/integration."""

from __future__ import annotations

from pathlib import Path

import pytest

from wlock.errors import InvalidFileError, UsageError
from wlock.lock.hub import RemoteSnapshot
from wlock.lock.manifest import read_manifest
from wlock.lock.resolve import diff_locks, merge_locks, plan_lock, select_files
from wlock.models import LockedFile, ManifestEntry

C1, C2 = "1" * 40, "2" * 40
FILES = (
    LockedFile(path="config.json", size=1, git_sha1="a" * 40),
    LockedFile(path="model.safetensors", size=2, sha256="b" * 64),
    LockedFile(path="onnx/model.onnx", size=3, sha256="c" * 64),
)



def plan(*args, **kwargs):  # type: ignore[no-untyped-def]
    """plan_lock with a reader of configs that name no remote code: a model's `all` loader
    reads its configs' auto_map (issue 47)."""
    kwargs.setdefault("read_file", lambda *a: b"{}")
    return plan_lock(*args, **kwargs)


def test_select_files_follows_snapshot_download_globs() -> None:
    kept, unmatched = select_files(FILES, ("*.json", "onnx/"), ())
    assert [f.path for f in kept] == ["config.json", "onnx/model.onnx"]
    assert unmatched == ()
    kept, unmatched = select_files(FILES, (), ("*.onnx", "*.bin"))
    assert [f.path for f in kept] == ["config.json", "model.safetensors"]
    assert unmatched == ("*.bin",)


def test_include_adds_back_what_a_loader_left_out_and_exclude_removes() -> None:
    """With a loader's choice (`listed`: the whole repo), `include` adds a left-out file back,
    as `wlock tree --why` advises; `exclude` still removes (issue 37)."""
    chosen = FILES[:2]  # what transformers took: not the ONNX export
    kept, unmatched = select_files(chosen, ("onnx/",), (), listed=FILES)
    assert [f.path for f in kept] == ["config.json", "model.safetensors", "onnx/model.onnx"]
    assert unmatched == ()
    kept, _ = select_files(chosen, ("onnx/model.onnx",), ("*.json",), listed=FILES)
    assert [f.path for f in kept] == ["model.safetensors", "onnx/model.onnx"]
    _, unmatched = select_files(chosen, ("*.gguf",), (), listed=FILES)
    assert unmatched == ("*.gguf",)


def test_a_loaders_entry_with_include_locks_the_file_and_stays_fresh(tmp_path: Path) -> None:
    m = manifest(tmp_path, '[[model]]\nid = "acme/a"\nloader = "transformers"\n'
                 'include = ["onnx/"]\n')
    hub = FakeHub()
    first = plan(m, None, hub, read_file=lambda *a: b"{}").lock
    assert [f.path for f in first.repos[0].files] == [
        "config.json", "model.safetensors", "onnx/model.onnx"]
    hub.calls.clear()
    again = plan(m, first, hub, read_file=lambda *a: b"{}")
    assert hub.calls == [] and again.lock == first  # not re-resolved at every lock


def test_a_lock_reads_each_small_file_once(tmp_path: Path) -> None:
    """A pickle index is read by the loader's rule (its shards) and by the judgement's list
    of shards: downloaded once for both."""
    import json

    from wlock.models import PickleScan

    index = json.dumps({"weight_map": {"a": "pytorch_model-1.bin"}}).encode()
    files = (LockedFile(path="config.json", size=2, git_sha1="a" * 40),
             LockedFile(path="pytorch_model.bin.index.json", size=len(index), git_sha1="d" * 40),
             LockedFile(path="pytorch_model-1.bin", size=5, sha256="e" * 64))
    reads: list[str] = []

    def read(kind: str, repo_id: str, revision: str, path: str) -> bytes:
        reads.append(path)
        return index if path.endswith(".index.json") else b"{}"

    def snapshot(entry: ManifestEntry, revision: str) -> RemoteSnapshot:
        return RemoteSnapshot(kind=entry.kind, hub_id=entry.id, revision=C1, files=files)

    m = manifest(tmp_path, '[[model]]\nid = "acme/a"\nloader = "transformers"\n')
    plan(m, None, snapshot, read_file=read,
              scan_pickle=lambda kind, repo_id, revision, f: PickleScan(f.path, (), False))
    assert reads.count("pytorch_model.bin.index.json") == 1, reads
    assert reads.count("config.json") == 1, reads


class FakeHub:
    def __init__(self) -> None:
        self.heads = {"acme/a": C1, "acme/b": C1}
        self.calls: list[str] = []

    def __call__(self, entry: ManifestEntry, revision: str) -> RemoteSnapshot:
        self.calls.append(entry.id)
        commit = revision if len(revision) == 40 else self.heads[entry.id]
        return RemoteSnapshot(kind=entry.kind, hub_id=entry.id, revision=commit, files=FILES)


def manifest(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "weights.toml"
    path.write_text(text, encoding="utf-8")
    return read_manifest(path)


def test_pins_are_kept_until_asked_to_move(tmp_path: Path) -> None:
    m = manifest(tmp_path, '[[model]]\nid = "acme/a"\n[[model]]\nid = "acme/b"\n')
    hub = FakeHub()
    first = plan(m, None, hub).lock
    assert hub.calls == ["acme/a", "acme/b"]
    hub.heads = {"acme/a": C2, "acme/b": C2}
    hub.calls.clear()
    again = plan(m, first, hub)
    assert hub.calls == [] and again.lock == first and again.changes == ()
    one = plan(m, first, hub, upgrade_packages=["acme/b"])
    assert hub.calls == ["acme/b"]
    assert [c.render() for c in one.changes] == ["acme/b  main  1111111 -> 2222222"]
    every = plan(m, first, hub, upgrade=True)
    assert {r.revision for r in every.lock.repos} == {C2}


def test_changed_entry_is_re_resolved_and_removed_one_reported(tmp_path: Path) -> None:
    hub = FakeHub()
    first = plan(manifest(tmp_path, '[[model]]\nid = "acme/a"\n[[model]]\nid = "acme/b"\n'),
                      None, hub).lock
    hub.calls.clear()
    hub.heads["acme/a"] = C2  # the branch moved on the Hub since the lock was made
    m2 = manifest(tmp_path, '[[model]]\nid = "acme/a"\ninclude = ["*.json"]\n')
    result = plan(m2, first, hub)
    assert hub.calls == ["acme/a"]
    assert [f.path for f in result.lock.repos[0].files] == ["config.json"]
    # Only the globs changed: the files are re-selected at the locked commit, the pin stays.
    assert result.lock.repos[0].revision == C1
    # A changed ref does move it.
    m3 = manifest(tmp_path, '[[model]]\nid = "acme/a"\nref = "v2"\ninclude = ["*.json"]\n')
    assert plan(m3, result.lock, hub).lock.repos[0].revision == C2
    assert [c.render() for c in result.changes] == [
        "acme/a  main  1111111 (kept; files re-selected)", "acme/b  main  1111111 -> (removed)"]


def test_glob_matching_nothing_names_the_line(tmp_path: Path) -> None:
    m = manifest(tmp_path, '[[model]]\nid = "acme/a"\nref = "main"\nexclude = ["*.gguf"]\n')
    with pytest.raises(InvalidFileError) as excinfo:
        plan(m, None, FakeHub())
    assert str(excinfo.value) == (
        f"{tmp_path}/weights.toml:4: `model.exclude`: '*.gguf' matches no file of acme/a at 1111111"
    )


def test_of_several_globs_matching_nothing_the_first_in_the_manifest_is_named(
    tmp_path: Path,
) -> None:
    m = manifest(tmp_path, '[[model]]\nid = "acme/a"\ninclude = ["*.json", "*.bin"]\n'
                 'exclude = ["*.gguf"]\n')
    with pytest.raises(InvalidFileError) as excinfo:
        plan(m, None, FakeHub())
    assert str(excinfo.value) == (
        f"{tmp_path}/weights.toml:3: `model.include`: '*.bin' matches no file of acme/a at 1111111"
    )


def test_upgrade_package_must_be_in_the_manifest(tmp_path: Path) -> None:
    m = manifest(tmp_path, '[[model]]\nid = "acme/a"\n')
    with pytest.raises(UsageError, match="--upgrade-package acme/zzz: not in"):
        plan(m, None, FakeHub(), upgrade_packages=["acme/zzz"])


def test_diff_of_identical_locks_is_empty(tmp_path: Path) -> None:
    lock = plan(manifest(tmp_path, '[[model]]\nid = "acme/a"\n'), None, FakeHub()).lock
    assert diff_locks(lock, lock) == ()
    assert [c.render() for c in diff_locks(None, lock)] == ["acme/a  main  (new) -> 1111111"]


@pytest.mark.parametrize("other", ['["*.json"]', '["onnx/", "*.json"]', '["onnx/model.onnx"]'])
def test_a_merge_keeps_only_the_side_locked_as_weights_toml_asks(
    tmp_path: Path, other: str
) -> None:
    """Each side of a conflicted lock chose its files by its own `include`; after the merge
    weights.toml says `include = ["onnx/"]`: only the side locked that way is kept, however
    the other side's globs sort against it."""
    hub = FakeHub()
    theirs = plan(manifest(tmp_path, '[[model]]\nid = "acme/a"\ninclude = ["onnx/"]\n'),
                       None, hub).lock
    hub.heads = {"acme/a": C2, "acme/b": C2}
    ours = plan(manifest(tmp_path, f'[[model]]\nid = "acme/a"\ninclude = {other}\n'),
                     None, hub).lock
    merged = manifest(tmp_path, '[[model]]\nid = "acme/a"\ninclude = ["onnx/"]\n')
    lock, notes = merge_locks(merged, ours, theirs)
    assert lock.repos == theirs.repos
    assert notes == ("acme/a: kept 1111111 (only theirs locks it as weights.toml asks)",)


def test_a_merge_resolves_an_entry_neither_side_locks(tmp_path: Path) -> None:
    """Each branch added its own model; weights.toml, merged, asks for both and for a third
    neither side locked: the two are kept, the third is left out of the merged lock, with a
    note, for the lock that follows to resolve."""
    hub = FakeHub()
    ours = plan(manifest(tmp_path, '[[model]]\nid = "acme/a"\n'), None, hub).lock
    theirs = plan(manifest(tmp_path, '[[model]]\nid = "acme/b"\n'), None, hub).lock
    merged = manifest(tmp_path, '[[model]]\nid = "acme/a"\n\n[[model]]\nid = "acme/b"\n\n'
                      '[[model]]\nid = "acme/c"\n')
    lock, notes = merge_locks(merged, ours, theirs)
    assert [r.id for r in lock.repos] == ["acme/a", "acme/b"]
    assert notes == ("acme/a: kept 1111111 (only ours locks it as weights.toml asks)",
                     "acme/b: kept 1111111 (only theirs locks it as weights.toml asks)",
                     "acme/c: neither side locks it as weights.toml asks; resolving it")


@pytest.mark.parametrize(("before", "after"), [('["*.json"]', '["*.json", "onnx/"]'),
                                               ('["*.json", "onnx/"]', '["*.json"]')])
def test_files_added_or_removed_at_the_same_commit_are_a_change(
    tmp_path: Path, before: str, after: str
) -> None:
    """An entry's include widened or narrowed, its commit unchanged: the lock's files
    differ, and `wlock lock` lists the entry among its changes."""
    hub = FakeHub()
    old = plan(manifest(tmp_path, f'[[model]]\nid = "acme/a"\ninclude = {before}\n'),
                    None, hub).lock
    new = plan(manifest(tmp_path, f'[[model]]\nid = "acme/a"\ninclude = {after}\n'),
                    old, hub).lock
    assert old.repos[0].revision == new.repos[0].revision
    assert [c.id for c in diff_locks(old, new)] == ["acme/a"]


@pytest.mark.parametrize(("first", "then"), [(C1, C2), (C2, C1)], ids=["forward", "back"])
def test_a_pin_that_moved_is_a_change_whichever_way_the_commits_sort(
    tmp_path: Path, first: str, then: str
) -> None:
    """`wlock lock --upgrade` moved the branch's pin (the same files): listed, whether the
    new commit's hex sorts after the old one's or before (a rollback, a force-push)."""
    hub = FakeHub()
    hub.heads = {"acme/a": first}
    m = manifest(tmp_path, '[[model]]\nid = "acme/a"\n')
    old = plan(m, None, hub).lock
    hub.heads = {"acme/a": then}
    new = plan(m, old, hub, upgrade=True).lock
    assert [(c.id, c.old, c.new) for c in diff_locks(old, new)] == [("acme/a", first, then)]
