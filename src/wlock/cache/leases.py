"""Who holds what in a cache shared by processes and nodes: flock where the filesystem's
excludes (flock_works probes it), leases renewed on every temp blob and staging folder
while its writer lives, and the tests of both that tell a leftover from a live writer.
Nothing here knows the cache's layout: wlock.cache.layout uses it.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from wlock.atomic import MACHINE


def _env_seconds(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name, default))
    except ValueError:
        return default
    return value if value > 0 else default


# Every temp blob and staging folder is leased by its writer: it renews the lease (touches
# the mtime) every LEASE / 4 seconds while it lives. A leftover whose lease has run out, and
# whose blob lock nobody holds, is reclaimed by whichever wlock sees it, on any node: no
# hostname or pid is trusted across machines (containers share both).
LEASE = _env_seconds("WLOCK_LEASE", 120.0)


_FLOCK: dict[str, bool] = {}


def flock_works(folder: Path | str) -> bool:
    """Whether `flock` excludes on the filesystem of `folder` (a folder of `.locks`).

    On some network filesystems (Lustre with `localflock`, NFS with `local_lock=all`) flock
    succeeds for everyone: two opens of one file in this very process both get the lock
    there, which is what this probes, once per process and folder. `WLOCK_FLOCK=off`
    says not to trust it where the probe cannot tell (locks local to each node). Without
    working locks, syncs may download a blob twice and leftovers wait for their lease:
    the result is the same, only slower.
    """
    if os.environ.get("WLOCK_FLOCK", "").lower() in ("0", "off", "no", "false"):
        return False
    # Keyed by the folder, not its filesystem: no stat on the path of every small file.
    key = str(folder)
    if key not in _FLOCK:
        works = _probe_flock(Path(folder))
        if works is None:
            return False  # no such folder (yet): ask again once it exists
        _FLOCK[key] = works
    return _FLOCK[key]


def _probe_flock(folder: Path) -> bool | None:
    """Whether a second open of a file in `folder` is refused the lock the first holds;
    None when `folder` does not exist."""
    probe = folder / f".wlock-flock-probe.{MACHINE}-{os.getpid()}.{os.urandom(4).hex()}"
    try:
        first = os.open(probe, os.O_RDWR | os.O_CREAT, 0o600)
    except FileNotFoundError:
        return None
    except OSError:
        return False
    try:
        second = os.open(probe, os.O_RDWR)
        try:
            # Both getting it means this flock excludes nobody.
            return try_flock(first) is True and try_flock(second) is False
        finally:
            os.close(second)
    except OSError:
        return False
    finally:
        os.close(first)
        with contextlib.suppress(OSError):
            os.unlink(probe)


def try_flock(fd: int) -> bool | None:
    """Take an exclusive flock on `fd` without waiting: True; False when another open file
    holds it; None when this filesystem has no flock."""
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:
        return None
    return True


class Leases:
    """This process's temp blobs and staging folders, renewed (mtime touched) every
    LEASE / 4 seconds by one thread while they are registered."""

    def __init__(self, period: float | None = None) -> None:
        self._period = period  # seconds between renewals; None: LEASE / 4
        self._paths: dict[str, int] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def held(self) -> list[str]:
        """The paths registered now."""
        with self._lock:
            return list(self._paths)

    @contextlib.contextmanager
    def hold(self, path: Path | str) -> Iterator[None]:
        key = str(path)
        with self._lock:
            self._paths[key] = self._paths.get(key, 0) + 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._renew, daemon=True,
                                                name="wlock-lease")
                self._thread.start()
        try:
            yield
        finally:
            with self._lock:
                self._paths[key] -= 1
                if not self._paths[key]:
                    del self._paths[key]

    def _renew(self) -> None:
        while True:
            time.sleep(self._period if self._period is not None else LEASE / 4)
            with self._lock:
                paths = list(self._paths)
            for path in paths:
                with contextlib.suppress(OSError):  # not created yet, or already renamed
                    os.utime(path)


LEASES = Leases()


def lock_free(lock: Path) -> bool | None:
    """Whether nobody holds `lock` (flock); None when it cannot be told (no lock file, as
    with a writer older than the locks, or no working flock on this filesystem)."""
    if not flock_works(lock.parent):
        return None
    try:
        fd = os.open(lock, os.O_RDWR)
    except OSError:
        return None
    try:
        return try_flock(fd)
    finally:
        os.close(fd)


def alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
