"""The cache's write primitives, on a real filesystem."""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from wlock.cache.layout import publish_blob
from wlock.cache.leases import Leases


@pytest.mark.parametrize("links", ["hard links", "no hard links"])
def test_a_published_blob_is_never_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, links: str
) -> None:
    """Readers on other nodes of a network filesystem see a replaced file vanish for a
    moment: a blob that exists stays, the late writer's copy is dropped. Some filesystems
    have symlinks and no hard links (s3fs, a FAT-backed share): link() fails there with
    EPERM, and the blob is renamed into place unless another writer published it meanwhile.
    No filesystem here lacks hard links, so link() is made to fail as theirs does; the
    renames and files are real."""

    def no_link(src: object, dst: object, **_: object) -> None:
        raise PermissionError(errno.EPERM, "Operation not permitted", str(src), None, str(dst))

    if links == "no hard links":
        monkeypatch.setattr(os, "link", no_link)
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


def _blob_held_by_another_writer(tmp_path: Path, size: int):  # type: ignore[no-untyped-def]
    """A locked file of `size` bytes in a cache under `tmp_path`, its blobs/ made and its
    download lock held by another writer: (the file, its repo's paths, the holder's fd)."""
    import fcntl

    from wlock.cache.layout import RepoPaths, blob_lock_path, make_folder
    from wlock.models import LockedFile, LockedRepo

    f = LockedFile(path="model.bin", size=size, sha256="ab" * 32)
    repo = LockedRepo(kind="model", id="acme/x", requested="main", revision="c" * 40,
                      files=(f,))
    paths = RepoPaths.of(tmp_path, repo)
    make_folder(paths, paths.blobs)
    lock = blob_lock_path(paths, f.etag)
    make_folder(paths, lock.parent)
    holder = os.open(lock, os.O_RDWR | os.O_CREAT)
    fcntl.flock(holder, fcntl.LOCK_EX)  # another node is downloading it
    return f, paths, holder


def _claim_on_a_thread(paths, f, stall: float, on_wait=None):  # type: ignore[no-untyped-def]
    """claim_blob for `f`, run on a thread of its own, started: (the thread, a list that
    gets what the claim yielded: True to download, False when another writer published)."""
    import threading

    from wlock.cache.layout import claim_blob

    outcome: list[bool] = []

    def claim() -> None:
        with claim_blob(paths, f, stall=stall, stop=threading.Event(),
                        on_wait=on_wait) as mine:
            outcome.append(mine)

    thread = threading.Thread(target=claim)
    thread.start()
    return thread, outcome


def test_a_waiter_sees_the_holders_progress_and_takes_its_published_blob(
    tmp_path: Path,
) -> None:
    f, paths, holder = _blob_held_by_another_writer(tmp_path, 3 * 4096)
    temp = paths.blobs / f".{f.etag}.other.m-1.0000.wlock-incomplete"
    seen: list[int] = []
    waiter, outcome = _claim_on_a_thread(paths, f, stall=30, on_wait=seen.append)
    for _ in range(3):  # the holder writes, a block at a time
        with open(temp, "ab") as out:
            out.write(os.urandom(4096))
        time.sleep(0.5)
    os.rename(temp, paths.blob(f.etag))
    os.close(holder)
    waiter.join(10)
    assert outcome == [False]  # published by the holder: nothing left to fetch
    assert seen == sorted(seen) and seen[-1] == f.size and len(seen) >= 2, seen


@pytest.mark.parametrize("off", ["off", "0", "FALSE"])
def test_with_wlock_flock_off_a_sync_never_waits_on_a_blob_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, off: str
) -> None:
    """`WLOCK_FLOCK=off` (a filesystem whose locks are local to each node, README): a
    download does not wait on the blob's lock, which another node's holder would not be
    seen to hold, but goes ahead at once, long before the holder would count as stalled."""
    monkeypatch.setenv("WLOCK_FLOCK", off)
    f, paths, holder = _blob_held_by_another_writer(tmp_path, 4096)
    claimer, outcome = _claim_on_a_thread(paths, f, stall=60)
    claimer.join(10)
    waited = claimer.is_alive()
    os.close(holder)  # lets a claimer that waits on the lock go, whatever happened
    claimer.join()
    assert not waited, "the download waited on the blob lock"
    assert outcome == [True]


def test_a_waiter_whose_blobs_folder_vanished_downloads_the_blob_itself(
    tmp_path: Path,
) -> None:
    """A gc on another node removed the repo's blobs/ while this sync waited on that node's
    download: no writer's progress can be read any more, which is no progress. After
    `stall` seconds the waiter downloads the blob itself rather than failing."""
    f, paths, holder = _blob_held_by_another_writer(tmp_path, 4096)
    shutil.rmtree(paths.blobs)
    waiter, outcome = _claim_on_a_thread(paths, f, stall=0.5)
    waiter.join(10)
    os.close(holder)
    assert outcome == [True]


def test_leases_renew_what_they_hold_and_forget_it_after(tmp_path: Path) -> None:
    """A live sync's temp file is touched while held, so another node's clean-up sees it
    alive; once released (nested holds too) it is forgotten, not renewed forever. Two
    mutations survived the suite here once: the renewer never started, and a count that
    never reached zero."""
    leases = Leases(period=0.05)
    temp = tmp_path / ".blob.wlock-incomplete"
    temp.write_bytes(b"x")
    old = time.time() - 1000
    os.utime(temp, (old, old))
    with leases.hold(temp):
        with leases.hold(temp):  # two files of one sync with the same blob
            pass
        assert leases.held() == [str(temp)]
        deadline = time.monotonic() + 10
        while temp.stat().st_mtime < old + 500:
            assert time.monotonic() < deadline, "the held temp file was never renewed"
            time.sleep(0.02)
    assert leases.held() == []


@pytest.mark.parametrize("lease", [2.0, 4.0])
def test_a_held_temp_file_is_renewed_well_within_its_lease(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lease: float,
) -> None:
    """Renewed every LEASE / 4: another node reclaims a leftover whose mtime is older than
    LEASE, so a live sync's temp file must be touched again well before that (a renewal at
    the lease's end, or never, fails). And not sooner: a renewer in a loop would load a
    shared filesystem's metadata server for nothing. The renewal's own mtime says when it
    came, whatever the load on this machine. (Two leases, so that a renewal every
    LEASE // 4 or LEASE % 4 seconds, 0 for one of them, fails as well.)"""
    import wlock.cache.leases as leases_module

    monkeypatch.setattr(leases_module, "LEASE", lease)
    leases = Leases()
    temp = tmp_path / ".blob.wlock-incomplete"
    temp.write_bytes(b"x")
    os.utime(temp, (0, 0))
    held, wall = time.monotonic(), time.time()
    with leases.hold(temp):
        while temp.stat().st_mtime == 0:
            assert time.monotonic() - held < leases_module.LEASE, "not renewed within its lease"
            time.sleep(0.02)
    renewed_after = temp.stat().st_mtime - wall
    assert lease / 4 - 0.05 <= renewed_after < lease / 2, "not renewed every LEASE / 4"


@pytest.mark.parametrize("kind", ["fails", "excludes-nobody", "reopen-refused"])
def test_a_filesystem_without_flock_is_probed_as_such(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """Where flock fails with ENOLCK (NFS without a lock manager), or succeeds for every
    caller (Lustre's localflock, NFS's local_lock=all: each node locks only itself), or the
    probe's second open of its file is refused (object-store mounts such as goofys open a
    file being written once), the probe says it does not work, and syncs go on without the
    lock, instead of failing or trusting it. Every local filesystem here has flock and
    reopens files, so the one call acts as on such a mount."""
    import fcntl

    from wlock.cache.leases import _probe_flock

    def no_flock(fd: int, operation: int) -> None:
        if kind == "fails":
            raise OSError(errno.ENOLCK, "No locks available")

    real_open = os.open

    def open_once(path: str, flags: int, *args: int) -> int:
        if not flags & os.O_CREAT:
            raise OSError(errno.EPERM, "Operation not permitted", path)
        return real_open(path, flags, *args)

    if kind == "reopen-refused":
        monkeypatch.setattr(os, "open", open_once)
    else:
        monkeypatch.setattr(fcntl, "flock", no_flock)
    assert _probe_flock(tmp_path) is False
    assert list(tmp_path.iterdir()) == []


def test_the_flock_probe_works_for_a_user_who_is_not_root() -> None:
    """The probe opens its file twice, for writing (an exclusive lock on NFS needs it):
    the file it creates must be writable by its owner. Root writes any file, so the probe
    runs as `nobody` (effective uid only, and back to root after), in a folder of its own."""
    from wlock.cache.leases import _probe_flock

    if os.geteuid() != 0:
        pytest.skip("needs root, to act as another user")
    folder = Path(tempfile.mkdtemp(prefix="wlock-probe-"))
    try:
        folder.chmod(0o777)
        os.seteuid(65534)
        try:
            works = _probe_flock(folder)
        finally:
            os.seteuid(0)
        assert works is True
        assert list(folder.iterdir()) == []  # the probe file is removed
    finally:
        shutil.rmtree(folder)


def test_a_leftover_gone_before_it_is_judged_is_left_alone(tmp_path: Path) -> None:
    """Syncs on several nodes clean the same cache: a temp file another node's sync left is
    judged by its age, and it may be removed by a third sync between the listing and the
    judging. It is then nobody's to remove, and no error."""
    from wlock.cache.layout import TEMP_SUFFIX, RepoPaths, _stale

    paths = RepoPaths(tmp_path, tmp_path / "models--acme--a")
    paths.blobs.mkdir(parents=True)
    name = f".{'a' * 40}.elsewhere.0badcafe-1.00000000{TEMP_SUFFIX}"  # another node's
    gone = paths.blobs / name
    assert _stale(paths, name, str(gone), time.time()) is False
    gone.touch()
    os.utime(gone, (0, 0))  # its lease long run out
    assert _stale(paths, name, str(gone), time.time()) is True


def test_a_download_worker_that_cannot_be_started_is_an_error_not_a_hang(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Workers are started by one spawner thread; a start that fails (fork's EAGAIN at a
    process limit, EMFILE for its pipes) must reach the download that asked for it. Lost in
    the spawner, it would leave the download waiting for a worker forever. No limit here
    can be hit on purpose as root, so Popen fails as the kernel would make it."""
    import subprocess
    import threading

    from wlock.cache.engines.hf_transfer import WorkerPool

    def no_process(*args: object, **kwargs: object) -> None:
        raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")

    monkeypatch.setattr(subprocess, "Popen", no_process)
    pool = WorkerPool(1)
    raised: list[BaseException] = []

    def checkout() -> None:
        try:
            pool._checkout()
        except BaseException as e:  # noqa: BLE001 - what reached the caller is the test
            raised.append(e)

    asking = threading.Thread(target=checkout, daemon=True)
    asking.start()
    asking.join(30)
    assert not asking.is_alive(), "the download waited for a worker that never started"
    assert [type(e) for e in raised] == [BlockingIOError]
    pool.close()  # ends the spawner thread


def test_a_process_of_another_user_is_alive() -> None:
    """A temp file's writer on this machine is alive while its pid is: asking the kernel
    (kill 0) about another user's process is refused (EPERM), and that process is alive.
    Root may signal anyone, so the question is asked as `nobody` (real and effective uid,
    root kept as the saved one to come back), about a process of root's."""
    import subprocess

    from wlock.cache.leases import alive

    if os.geteuid() != 0:
        pytest.skip("needs root, to act as another user")
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        os.setresuid(65534, 65534, 0)
        try:
            seen = alive(sleeper.pid)
        finally:
            os.setresuid(0, 0, 0)
        assert seen is True
    finally:
        sleeper.kill()
        sleeper.wait()
    assert alive(sleeper.pid) is False  # reaped: gone


@pytest.mark.parametrize(("count", "shown"), [
    (3, "a/0, a/1, a/2"), (4, "a/0, a/1, a/2 and 1 more"), (7, "a/0, a/1, a/2 and 4 more")])
def test_many_files_failing_for_one_cause_name_three_and_count_the_rest(
    count: int, shown: str
) -> None:
    from wlock.cache.sync import SyncFailed
    from wlock.errors import HubUnreachableError

    cause = "cannot connect to http://127.0.0.1:9: Connection refused"
    failed = SyncFailed([HubUnreachableError(f"a/{n}: {cause}", cause=cause, subject=f"a/{n}")
                         for n in reversed(range(count))])
    assert failed.message == f"{count} files failed:\n  {cause}: {count} files ({shown})"


def test_files_failing_with_the_same_words_after_their_names_are_one_cause() -> None:
    """A failure with no cause of its own (a full disk seen by each download) groups by its
    words after the file's name: one line for the cause, the files counted."""
    from wlock.cache.sync import SyncFailed
    from wlock.errors import ExitCode, LocalError

    words = "not enough space to write /cache/blobs: No space left on device"
    failed = SyncFailed([LocalError(f"a/{n}: {words}", subject=f"a/{n}") for n in range(3)])
    assert failed.message == f"3 files failed:\n  {words}: 3 files (a/0, a/1, a/2)"
    assert failed.exit_code == ExitCode.LOCAL


def test_a_stale_handle_while_renaming_a_snapshot_into_place_is_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A network filesystem may answer "Stale file handle" (ESTALE) for a folder while its
    cached entry outlives another node's change: the rename is tried again and goes on;
    any other error is raised at once. No local filesystem says ESTALE on purpose, so
    os.rename says it once here."""
    from wlock.cache.layout import past_stale_handles

    real_rename = os.rename
    calls: list[str] = []

    def stale_once(src: str, dst: str) -> None:
        calls.append(str(src))
        if len(calls) == 1:
            raise OSError(errno.ESTALE, "Stale file handle", str(src))
        real_rename(src, dst)

    (tmp_path / "staging").mkdir()
    monkeypatch.setattr(os, "rename", stale_once)
    past_stale_handles(lambda: os.rename(tmp_path / "staging", tmp_path / "snapshot"))
    assert (tmp_path / "snapshot").is_dir() and len(calls) == 2
    with pytest.raises(FileNotFoundError):
        past_stale_handles(lambda: os.rename(tmp_path / "staging", tmp_path / "snapshot"))
    assert len(calls) == 3  # not tried again


def test_two_syncs_building_one_snapshot_share_no_folder_and_leave_nothing(
    tmp_path: Path
) -> None:
    """Two syncs build the same new snapshot at once; one fails and discards what it built
    while the other finishes. Each builds in a folder of its own directly in the repo folder
    (no folder that syncs share and the last removes: on a network filesystem a node made
    its staging in such a folder just removed by another node, "Stale file handle"), and
    neither leaves anything of wlock's in the repo folder."""
    from wlock.cache.layout import RepoPaths, SnapshotBuild
    from wlock.models import LockedFile, LockedRepo

    data = b"{}"
    files = (LockedFile(path="config.json", size=2, sha256=hashlib.sha256(data).hexdigest()),
             LockedFile(path="sub/extra.json", size=2,
                        sha256=hashlib.sha256(data).hexdigest()))
    repo = LockedRepo(kind="model", id="acme/x", requested="main", revision="c" * 40,
                      files=files)
    paths = RepoPaths.of(tmp_path / "cache", repo)
    first, second = (SnapshotBuild(RepoPaths.of(tmp_path / "cache", repo), repo.revision,
                                   files) for _ in range(2))
    assert first.staging and second.staging
    for build in (first, second):
        assert build.staging.parent.parent == paths.root  # its own folder, in the repo's
    assert first.staging.parent != second.staging.parent
    paths.blobs.mkdir()
    (paths.blobs / files[0].etag).write_bytes(data)
    first.add(files[0])
    second.add(files[1])
    first.discard()
    second.finish()
    snapshot = paths.snapshot(repo.revision)
    assert {p.relative_to(snapshot).as_posix() for p in snapshot.rglob("*.json")} == {
        "config.json", "sub/extra.json"}
    assert (snapshot / "config.json").read_bytes() == data
    assert sorted(p.name for p in paths.root.iterdir()) == ["blobs", "snapshots"]


@pytest.mark.parametrize("env", [
    {"HF_HUB_CACHE": "/srv/hub"},
    {"HF_HOME": "/srv/hf", "XDG_CACHE_HOME": "/srv/xdg"},
    {"XDG_CACHE_HOME": "/srv/xdg"},
    {},
], ids=["HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", "HOME"])
def test_the_default_cache_is_the_one_huggingface_hub_uses(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """Without --cache-dir, the cache huggingface_hub itself reads, judged by the real
    client in a fresh interpreter: HF_HUB_CACHE, else $HF_HOME/hub, else
    $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub."""
    import subprocess
    import sys

    clean = {k: v for k, v in os.environ.items()
             if k not in ("HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", "HUGGINGFACE_HUB_CACHE")}
    run_env = {**clean, "HOME": str(tmp_path), **env}

    def ask(code: str) -> str:
        return subprocess.run([sys.executable, "-c", code], env=run_env, check=True,
                              capture_output=True, text=True).stdout.strip()

    theirs = ask("from huggingface_hub import constants; print(constants.HF_HUB_CACHE)")
    ours = ask("from wlock.cache.layout import default_cache_dir; print(default_cache_dir())")
    assert ours == theirs
