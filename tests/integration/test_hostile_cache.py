"""A pull request may edit weights.lock, and a cache may already hold links planted by
someone else: neither may make wlock write or read outside the cache (issue 7)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Hub, random_weights, run_wlock, write_project
from tests.integration.test_promises import _a_dead_pid
from tests.integration.test_sync import synced_tiny_bert
from wlock.atomic import HOST, MACHINE
from wlock.cache.check import check_cache
from wlock.cache.layout import link_target
from wlock.lock.lockfile import read_lock

pytestmark = pytest.mark.newest_only(
    "wlock's own reading of its lock and of the cache's folders (os calls, tomllib): no "
    "library the stacks differ in is asked")

MANIFEST = '[[model]]\nid = "acme/tiny-bert"\n'


def tree_digest(root: Path) -> str:
    """Every name, link target and byte under `root`: any write there changes it."""
    digest = hashlib.sha256()
    for dirpath, dirnames, names in sorted(os.walk(root)):
        dirnames.sort()
        for name in sorted([*names, *dirnames]):
            path = Path(dirpath, name)
            digest.update(str(path.relative_to(root)).encode())
            if path.is_symlink():
                digest.update(os.readlink(path).encode())
            elif path.is_file():
                digest.update(path.read_bytes())
    return digest.hexdigest()


@pytest.fixture
def sentinel(tmp_path: Path) -> Path:
    """A tree outside the cache with a secret in it, that nothing may read or change."""
    root = tmp_path / "outside"
    (root / "x").mkdir(parents=True)
    (root / "x" / "secret").write_text("TOPSECRET")
    return root


def locked_project(hub: Hub, root: Path) -> Path:
    project = write_project(root / "p", MANIFEST)
    result = run_wlock("lock", "--endpoint", hub.endpoint, cwd=project)
    assert result.code == 0, result.stderr
    return project


@pytest.mark.parametrize("requested", ["../../../../outside/x/secret", "/OUTSIDE/x/secret",
                                       "refs/../../x", "main\\u0000"])
def test_a_lock_whose_ref_points_outside_the_cache_is_refused_everywhere(
    hub: Hub, tmp_path: Path, sentinel: Path, requested: str
) -> None:
    project = locked_project(hub, tmp_path)
    cache = tmp_path / "cache"
    lock_file = project / "weights.lock"
    hostile = requested.replace("/OUTSIDE", str(sentinel))
    lock_file.write_text(lock_file.read_text().replace('requested = "main"',
                                                       f'requested = "{hostile}"'))
    before = tree_digest(sentinel)
    requests = hub.process.stats()["requests"]
    for argv in (["sync", "--locked", "--endpoint", hub.endpoint, "--cache-dir", str(cache)],
                 ["sync", "--frozen", "--endpoint", hub.endpoint, "--cache-dir", str(cache)],
                 ["check", "--cache-dir", str(cache)],
                 ["lock", "--check"],
                 ["lock", "--endpoint", hub.endpoint]):
        result = run_wlock(*argv, cwd=project)
        assert result.code == 4, (argv, result.stderr)
        assert result.stderr.startswith(f"error: {lock_file}:7: `model.requested`: "), result.stderr
        assert "TOPSECRET" not in result.stdout + result.stderr
    assert tree_digest(sentinel) == before
    assert not cache.exists()
    assert hub.process.stats()["requests"] == requests


def test_a_lock_for_another_ref_is_stale_not_up_to_date(hub: Hub, tmp_path: Path) -> None:
    project = locked_project(hub, tmp_path)
    lock_file = project / "weights.lock"
    lock_file.write_text(lock_file.read_text().replace('requested = "main"',
                                                       'requested = "v1.0"'))
    result = run_wlock("lock", "--check", cwd=project)
    assert result.code == 3
    assert "acme/tiny-bert follows 'main', locked for 'v1.0'" in result.stderr
    assert run_wlock("sync", "--locked", "--cache-dir", str(tmp_path / "c"),
                     cwd=project).code == 3


@pytest.mark.parametrize("planted", ["snapshots/{rev}/onnx", "snapshots/{rev}", "refs",
                                     "blobs", "snapshots"])
def test_a_link_planted_in_the_cache_is_never_written_through(
    hub: Hub, tmp_path: Path, sentinel: Path, planted: str
) -> None:
    project = locked_project(hub, tmp_path)
    cache = tmp_path / "cache"
    revision = read_lock(project / "weights.lock").repos[0].revision
    link = cache / "models--acme--tiny-bert" / planted.format(rev=revision)
    link.parent.mkdir(parents=True)
    link.symlink_to(sentinel / "x")
    before = tree_digest(sentinel)

    result = run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                       cwd=project)
    assert result.code == 6, result.stderr
    assert f"error: {link} is a symbolic link where the cache needs a folder of its own" \
        in result.stderr
    assert f"hint: Remove {link}" in result.stderr
    assert tree_digest(sentinel) == before

    checked = run_wlock("check", "--cache-dir", str(cache), cwd=project)
    # With `refs` refused, every file is in place and only the ref is missing: a note.
    assert checked.code == (0 if planted == "refs" else 1)
    assert "TOPSECRET" not in checked.stdout + checked.stderr
    assert tree_digest(sentinel) == before

    link.unlink()  # what the hint says: then the same sync completes the cache
    assert run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                     cwd=project).code == 0
    assert run_wlock("check", "--cache-dir", str(cache), cwd=project).code == 0


@pytest.mark.parametrize("where", ["snapshots", "snapshots/{rev}"])
def test_a_file_where_the_cache_needs_a_folder_is_named_as_a_file(
    hub: Hub, tmp_path: Path, where: str
) -> None:
    """A stray file (a mistaken copy, a truncated tar) named like one of a repo's folders:
    sync stops with exit 6 naming it as a file, check names it too, and once it is removed
    the same sync completes."""
    project = locked_project(hub, tmp_path)
    cache = tmp_path / "cache"
    revision = read_lock(project / "weights.lock").repos[0].revision
    stray = cache / "models--acme--tiny-bert" / where.format(rev=revision)
    stray.parent.mkdir(parents=True)
    stray.write_text("not a folder")

    result = run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                       cwd=project)
    assert result.code == 6, result.stderr
    assert f"error: {stray} is a file where the cache needs a folder of its own" \
        in result.stderr
    checked = run_wlock("check", "--cache-dir", str(cache), cwd=project)
    assert checked.code == 1
    assert f"{stray} is a file, where the cache needs a folder" in checked.stdout, \
        checked.stdout

    stray.unlink()
    assert run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                     cwd=project).code == 0
    assert run_wlock("check", "--cache-dir", str(cache), cwd=project).code == 0


def test_a_folder_where_a_ref_belongs_is_named_and_left_alone(hub: Hub, tmp_path: Path) -> None:
    """`refs/main` is a folder (with something in it): sync stops with exit 6 naming it and
    saying what to do, and leaves the folder as it was."""
    project = locked_project(hub, tmp_path)
    cache = tmp_path / "cache"
    ref = cache / "models--acme--tiny-bert" / "refs" / "main"
    (ref / "keep").mkdir(parents=True)
    result = run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                       cwd=project)
    assert result.code == 6, result.stderr
    assert f"error: {ref} is a folder where the cache needs a ref file" in result.stderr
    assert f"hint: Remove {ref} (the cache keeps a ref file there)" in result.stderr
    assert (ref / "keep").is_dir()


@pytest.mark.parametrize("planted", ["link to a secret", "link to a commit", "fifo",
                                     "refs/ a link out of the cache"])
def test_a_ref_that_is_a_link_is_neither_read_nor_followed(
    hub: Hub, tmp_path: Path, sentinel: Path, planted: str
) -> None:
    """A ref that is a link is not followed, even to a file that holds the very commit (a
    ref's content is printed; only a plain file inside the cache is a ref); a FIFO is not
    waited on."""
    project = locked_project(hub, tmp_path)
    cache = tmp_path / "cache"
    assert run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                     cwd=project).code == 0
    ref = cache / "models--acme--tiny-bert" / "refs" / "main"
    revision = ref.read_text()
    ref.unlink()
    if planted == "link to a secret":
        ref.symlink_to(sentinel / "x" / "secret")
    elif planted == "link to a commit":
        (sentinel / "x" / "main").write_text(revision)
        ref.symlink_to(sentinel / "x" / "main")
    elif planted == "fifo":
        os.mkfifo(ref)  # a reader that waited for a writer would never return
    else:
        (sentinel / "x" / "main").write_text(revision)
        ref.parent.rmdir()
        ref.parent.symlink_to(sentinel / "x")
    before = tree_digest(sentinel)
    checked = run_wlock("check", "--cache-dir", str(cache), cwd=project)
    assert checked.code == 0
    # What is there is said, and no other project is blamed (it was "points at no commit
    # there (another project's sync?)").
    what = {"fifo": f"{ref} holds no commit",
            "refs/ a link out of the cache": f"{ref.parent} is a symbolic link, where the "
            "cache needs a folder"}.get(
        planted, f"{ref} is a symbolic link, which wlock does not read through")
    assert (f"note: acme/tiny-bert: refs/main does not point at this lock's {revision[:7]}: "
            f"{what}; `wlock sync` writes it") in checked.stderr, checked.stderr
    assert "another project" not in checked.stderr
    assert "TOPSECRET" not in checked.stdout + checked.stderr
    synced = run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                       cwd=project)
    if planted == "refs/ a link out of the cache":
        assert synced.code == 6 and f"{ref.parent} is a symbolic link" in synced.stderr
        assert tree_digest(sentinel) == before
        return
    assert synced.code == 0
    assert not ref.is_symlink() and ref.is_file()  # replaced, its target untouched
    assert ref.read_text() == revision
    assert tree_digest(sentinel) == before


@pytest.mark.parametrize("other", ["a blob that sorts before", "a blob that sorts after"])
def test_a_snapshot_link_to_another_blob_is_repointed_by_sync(
    hub: Hub, tmp_path: Path, other: str
) -> None:
    """A link of the locked snapshot that points at another file's blob (a hand edit, a
    tool that linked by name) is wrong whatever the two names: check says so, sync fixes
    it."""
    from wlock.cache.layout import link_target

    project, cache, repo, _ = synced_tiny_bert(hub, tmp_path)
    top = sorted((f for f in repo.files if "/" not in f.path), key=lambda f: f.etag)
    victim = top[len(top) // 2]
    stranger = top[0] if other.endswith("before") else top[-1]
    link = cache / "models--acme--tiny-bert" / "snapshots" / repo.revision / victim.path
    link.unlink()
    link.symlink_to(link_target(victim.path, stranger.etag))
    checked = run_wlock("check", "--cache-dir", str(cache), cwd=project)
    assert checked.code == 1 and victim.path in checked.stdout
    relinked = run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                         "--json", cwd=project)
    assert relinked.code == 0, relinked.stderr
    report = json.loads(relinked.stdout)  # a link to make, nothing to fetch
    assert (report["fetched_files"], report["fetched_bytes"]) == (0, 0), report
    assert os.readlink(link) == link_target(victim.path, victim.etag)
    assert run_wlock("check", "--cache-dir", str(cache), cwd=project).code == 0


def test_a_blob_that_links_out_of_the_cache_is_unsafe_and_never_read(
    hub: Hub, tmp_path: Path, sentinel: Path
) -> None:
    """A blob replaced by a link to a file outside the cache (of the same size, so that only
    where it points gives it away): check names it unsafe without hashing it; sync replaces
    the link with the real bytes; the file outside is untouched."""
    project, cache, repo, _ = synced_tiny_bert(hub, tmp_path)
    victim = next(f for f in repo.files if f.path == "config.json")
    outside = sentinel / "x" / "same-size"
    outside.write_bytes(b"S" * victim.size)
    blob = cache / "models--acme--tiny-bert" / "blobs" / victim.etag
    blob.unlink()
    blob.symlink_to(outside)
    before = tree_digest(sentinel)
    checked = run_wlock("check", "--cache-dir", str(cache), cwd=project)
    assert checked.code == 1
    assert ("not a file of the cache: model acme/tiny-bert: config.json: expected a file in "
            "the cache, found a "
            "link out of the cache") in checked.stdout, checked.stdout
    assert run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                     cwd=project).code == 0
    assert blob.is_file() and not blob.is_symlink()
    assert run_wlock("check", "--cache-dir", str(cache), cwd=project).code == 0
    assert tree_digest(sentinel) == before


def test_a_blob_that_links_to_a_file_inside_the_cache_is_checked_by_its_bytes(
    hub: Hub, tmp_path: Path
) -> None:
    """A blob that is a link to a file elsewhere in the cache (a shared store, as in
    huggingface_hub 2.x): check follows it, hashes what it reaches and passes; with other
    bytes there, it reports wrong bytes, not an unsafe link."""
    project, cache, repo, _ = synced_tiny_bert(hub, tmp_path)
    config = next(f for f in repo.files if f.path == "config.json")
    blob = cache / "models--acme--tiny-bert" / "blobs" / config.etag
    store = cache / "store" / config.etag
    store.parent.mkdir()
    os.rename(blob, store)
    blob.symlink_to(os.path.relpath(store, blob.parent))
    checked = run_wlock("check", "--cache-dir", str(cache), cwd=project)
    assert checked.code == 0, checked.stdout
    os.chmod(store, 0o644)
    store.write_bytes(b"S" * config.size)
    checked = run_wlock("check", "--cache-dir", str(cache), cwd=project)
    assert checked.code == 1
    assert checked.stdout.startswith("wrong bytes: model acme/tiny-bert: config.json: "), \
        checked.stdout


def test_check_never_reads_blobs_through_a_blobs_folder_that_leaves_the_cache(
    hub: Hub, tmp_path: Path
) -> None:
    """blobs/ replaced by a link to a folder outside the cache that holds the right bytes:
    check reads nothing there, and says each file is not in the cache."""
    project, cache, repo, paths = synced_tiny_bert(hub, tmp_path)
    outside = tmp_path / "outside-blobs"
    paths.blobs.rename(outside)
    paths.blobs.symlink_to(outside)
    checked = run_wlock("check", "--cache-dir", str(cache), cwd=project)
    assert checked.code == 1, checked.stdout
    refused = sorted(line.split(": ")[2] for line in checked.stdout.splitlines()
                     if "a link out of the cache" in line)
    assert refused == sorted(f.path for f in repo.files), checked.stdout


def test_cleaning_never_follows_a_link_out_of_the_cache(hub: Hub, tmp_path: Path) -> None:
    """A sync removes the leftovers of dead syncs from blobs/; a link planted there to a
    folder outside is not walked, so a file out there named like a dead sync's leftover
    stays. A link named like a leftover is itself removed, never what it points at."""
    project, cache, _, paths = synced_tiny_bert(hub, tmp_path)
    blobs = paths.blobs
    outside = tmp_path / "outside"
    outside.mkdir()
    dead = _a_dead_pid()
    name = f".{'0' * 40}.{HOST}.{MACHINE}-{dead}.00000000.wlock-incomplete"
    (outside / name).write_bytes(b"not the cache's")
    (blobs / name).write_bytes(b"a dead sync's leftover")
    (blobs / "elsewhere").symlink_to(outside)
    posing = blobs / f".{'1' * 40}.{HOST}.{MACHINE}-{dead}.00000000.wlock-incomplete"
    posing.symlink_to(outside)
    done = run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                     cwd=project)
    assert done.code == 0, done.stderr
    assert not (blobs / name).exists()  # the cache's own leftover is removed
    assert not posing.is_symlink()  # the link, not the folder it names
    assert (outside / name).read_bytes() == b"not the cache's"


def test_check_reports_every_blob_whose_bytes_changed(hub: Hub, tmp_path: Path) -> None:
    """Every blob overwritten with other bytes of the same size: check names each one (files
    are told apart by device and inode, so that hard links are hashed once; two different
    files are never taken for one)."""
    project, cache, repo, _ = synced_tiny_bert(hub, tmp_path)
    blobs = cache / "models--acme--tiny-bert" / "blobs"
    changed = sorted(f.path for f in repo.files if f.size)
    for f in repo.files:
        if f.size:
            blob = blobs / f.etag
            os.chmod(blob, 0o644)
            blob.write_bytes(os.urandom(f.size))
    checked = run_wlock("check", "--cache-dir", str(cache), cwd=project)
    assert checked.code == 1
    named = sorted(line.split(": ")[2] for line in checked.stdout.splitlines()
                   if line.startswith("wrong bytes: "))
    assert named == changed, checked.stdout


@pytest.mark.parametrize("numbers", [
    lambda n: (0xFFBF, 1 + n),  # one device, inode numbers that differ in their low bits only
    lambda n: (1 + n, 7),  # one inode number on several devices
    lambda n: (0xFFFF, 64 * (1 + n)),  # inode numbers on the bits of the device * 64
    lambda n: (3, n) if n % 2 else (2, 2**63 + n + 1),  # inode numbers of all 64 bits
], ids=["one-device", "many-devices", "overlapping", "64-bit"])
def test_check_never_takes_two_files_for_one(
    hub: Hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    numbers: Callable[[int], tuple[int, int]],
) -> None:
    """Check hashes each (device, inode) once: two blobs whose numbers it confused would share
    one verdict, and a corrupt blob would pass for the good one. The numbers a filesystem
    hands out cannot be chosen, so os.lstat reports chosen ones for the blobs (the files and
    their bytes stay real): numbers that a key mixing device and inode loosely would merge."""
    project, cache, _, paths = synced_tiny_bert(hub, tmp_path)
    lock = read_lock(project / "weights.lock")
    blobs = paths.blobs
    sized = [f for f in lock.repos[0].files if f.size]
    assert len(sized) >= 3
    corrupt = sized[1]
    blob = blobs / corrupt.etag
    os.chmod(blob, 0o644)
    blob.write_bytes(os.urandom(corrupt.size))
    chosen = {str(blobs / f.etag): numbers(n) for n, f in enumerate(lock.repos[0].files)}
    real_lstat = os.lstat

    def lstat(path: str | os.PathLike[str], **kwargs: Any) -> os.stat_result:
        st = real_lstat(path, **kwargs)
        if str(path) not in chosen:
            return st
        fields = list(st[:10])
        fields[2], fields[1] = chosen[str(path)]  # st_dev, st_ino
        return os.stat_result(fields)

    monkeypatch.setattr(os, "lstat", lstat)
    report = check_cache(lock, cache)
    assert [(p.kind, p.path) for p in report.problems] == [("wrong-hash", corrupt.path)]
    assert report.bytes_hashed == sum(f.size for f in sized)  # each blob hashed, once


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_check_hashes_regular_files_only(hub: Hub, tmp_path: Path, kind: str) -> None:
    project = write_project(tmp_path / "p", MANIFEST)
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    cache = tmp_path / "cache"
    assert run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                     cwd=project).code == 0
    repo = read_lock(project / "weights.lock").repos[0]
    empty = next(f for f in repo.files if f.size == 0)
    blob = cache / "models--acme--tiny-bert" / "blobs" / empty.etag
    blob.unlink()
    if kind == "fifo":
        os.mkfifo(blob)
    else:
        blob.symlink_to("/dev/zero")
    # A reader of the FIFO or of /dev/zero would never return; run_wlock's timeout is 120 s.
    checked = run_wlock("check", "--cache-dir", str(cache), cwd=project)
    assert checked.code == 1
    assert (f"not a file of the cache: model acme/tiny-bert: {empty.path}: expected a regular "
            "file, found a FIFO, device or folder") in checked.stdout
    # sync replaces it with a real (empty) file, and check then passes.
    assert run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                     cwd=project).code == 0
    assert blob.is_file() and not blob.is_symlink()
    assert run_wlock("check", "--cache-dir", str(cache), cwd=project).code == 0


@pytest.mark.parametrize("size", [1, 165])
def test_sync_replaces_a_fifo_where_a_downloaded_blob_belongs(
    hub: Hub, tmp_path: Path, size: int
) -> None:
    """A FIFO planted under a blob's name is no blob, whatever the size the lock gives the
    file (a FIFO's size is 0, a folder's 4096: none is ever taken for the file's). Before
    downloading, sync asks whether another writer published the blob: it opens what is
    there without blocking, instead of hanging on a reader that never comes."""
    repo_id = hub.unique_id("fifo")
    hub.builder.commit("model", repo_id, {"file.bin": random_weights(size), "config.json": b"{}"})
    project = write_project(tmp_path / "p", f'[[model]]\nid = "{repo_id}"\n')
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    cache = tmp_path / "cache"
    assert run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                     cwd=project).code == 0
    repo = read_lock(project / "weights.lock").repos[0]
    f = next(f for f in repo.files if f.path == "file.bin")
    blob = cache / f"models--{repo_id.replace('/', '--')}" / "blobs" / f.etag
    blob.unlink()
    os.mkfifo(blob)
    synced = run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                       cwd=project, timeout=30)
    assert synced.code == 0, synced.stderr
    assert blob.is_file() and not blob.is_symlink() and blob.stat().st_size == size
    assert run_wlock("check", "--cache-dir", str(cache), cwd=project).code == 0


def test_a_folder_where_a_blob_belongs_fails_that_file_alone_with_exit_6(
    hub: Hub, tmp_path: Path
) -> None:
    """A folder with something in it under a blob's name: the downloaded bytes cannot take
    its place. That file fails with a LocalError (exit 6, one line, no traceback) after the
    other files were fetched, and check names it."""
    repo_id = hub.unique_id("folder-blob")
    hub.builder.commit("model", repo_id, {"file.bin": random_weights(5000), "config.json": b"{}",
                                          "a.txt": b"abc"})
    project = write_project(tmp_path / "p", f'[[model]]\nid = "{repo_id}"\n')
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    cache = tmp_path / "cache"
    repo = read_lock(project / "weights.lock").repos[0]
    blobs = cache / f"models--{repo_id.replace('/', '--')}" / "blobs"
    [folder] = [f for f in repo.files if f.path == "file.bin"]
    (blobs / folder.etag / "inside").mkdir(parents=True)

    synced = run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                       cwd=project)
    assert synced.code == 6, synced.stderr
    blob = blobs / folder.etag
    assert synced.stderr.startswith(
        f"error: {blob} is a folder where the cache needs a blob file"), synced.stderr
    assert f"hint: Remove {blob} " in synced.stderr and "Traceback" not in synced.stderr
    # Refused before fetching: no temp file left beside it, and the folder is untouched.
    assert sorted(p.name for p in blobs.iterdir() if p.name.startswith(".")) == []
    assert [p.name for p in blob.iterdir()] == ["inside"]
    for f in repo.files:
        if f.path != folder.path:
            assert (blobs / f.etag).is_file(), f.path
    checked = run_wlock("check", "--cache-dir", str(cache), cwd=project)
    assert checked.code == 1 and "file.bin" in checked.stdout


def test_a_blob_lock_that_cannot_be_opened_only_costs_the_lock(
    hub: Hub, tmp_path: Path
) -> None:
    """huggingface_hub's `.locks/<repo>/<etag>.lock` cannot be opened (here a folder stands
    there; on a shared cache it is another user's read-only `.locks`): the lock only saves
    a second download, so sync fetches that file without it, and the cache checks clean."""
    project = locked_project(hub, tmp_path)
    cache = tmp_path / "cache"
    repo = read_lock(project / "weights.lock").repos[0]
    f = max(repo.files, key=lambda f: f.size)
    (cache / ".locks" / "models--acme--tiny-bert" / f"{f.etag}.lock").mkdir(parents=True)
    synced = run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                       cwd=project)
    assert synced.code == 0, synced.stderr
    assert run_wlock("check", "--cache-dir", str(cache), cwd=project).code == 0


def test_a_copied_file_where_a_snapshot_link_belongs_becomes_the_link(
    hub: Hub, tmp_path: Path
) -> None:
    """huggingface_hub copies a file into the snapshot where it cannot make links (and so
    does a user who `cp`s one in): a sync puts the link to the blob in its place, and check
    then passes. The copy is replaced whole, never written through."""
    project, cache, repo, paths = synced_tiny_bert(hub, tmp_path)
    f = next(f for f in repo.files if f.size)
    link = paths.snapshot(repo.revision) / f.path
    blob_bytes = (paths.blobs / f.etag).read_bytes()
    link.unlink()
    link.write_bytes(blob_bytes)
    # A cache made without links holds such copies: check judges them by their bytes.
    checked = run_wlock("check", "--cache-dir", str(cache), cwd=project)
    assert checked.code == 0, checked.stdout + checked.stderr
    done = run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                     cwd=project)
    assert done.code == 0, done.stderr
    assert link.is_symlink() and os.readlink(link) == link_target(f.path, f.etag)
    assert (paths.blobs / f.etag).read_bytes() == blob_bytes
    assert run_wlock("check", "--cache-dir", str(cache), cwd=project).code == 0
