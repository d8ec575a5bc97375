"""The link's verdict, kept in the cache for the syncs that follow (issue 39).

The probe (Link.tune) reads 2.5-3 MiB of ranges of a file that its download then reads
again. On a shared cache every sync probed: 8 syncs on two mounts of one JuiceFS volume
took 1.15x the lock from the Hub where 1.00x is the promise. So the sync that probes writes
what it measured to `<cache>/.locks/wlock-link.json`, per endpoint origin, and a sync of the
same cache within RECALL_S takes that verdict instead of probing. Syncs that start together
queue on an flock of `.locks/wlock-link.lock` around the probe: one probes, the others read
its verdict. Where flock excludes nobody (some network filesystems: leases.flock_works),
or the record cannot be read or written, each sync probes as before: bytes, never
correctness, are at stake.

The record is the link as seen from the cache's users (the endpoint's per-stream cap, or its
absence), not a node's own: nodes that share a cache share the path to the Hub in the cases
this is for (a cluster's nodes, a job array).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from wlock.atomic import temp_path_for
from wlock.cache.engines.curl import origin_of
from wlock.cache.leases import flock_works, try_flock

RECALL_S = 600.0  # a verdict older than this is measured again
WAIT_S = 15.0  # at most this long for another sync's probe, then probe anyway
NAME = "wlock-link.json"
LOCK = "wlock-link.lock"
_MAX_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class Verdict:
    one_stream: float  # bytes/s
    four_streams: float
    capped: bool  # single streams are capped: more connections help
    age: float  # seconds since it was measured


def _folder(cache_dir: Path) -> Path | None:
    """`<cache>/.locks`, made if missing; None where it is a link or no folder."""
    folder = cache_dir / ".locks"
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        return None
    return folder if folder.is_dir() and not folder.is_symlink() else None


def _key(endpoint: str) -> str:
    scheme, host, port = origin_of(endpoint)
    return f"{scheme}://{host}:{port}"


def _read(folder: Path) -> dict[str, object]:
    try:
        fd = os.open(folder / NAME, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return {}
    try:
        raw = os.read(fd, _MAX_BYTES)
    except OSError:
        return {}
    finally:
        os.close(fd)
    try:
        data = json.loads(raw)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def recall(cache_dir: Path, endpoint: str) -> Verdict | None:
    """The verdict another sync of this cache measured for `endpoint` within RECALL_S."""
    folder = _folder(cache_dir)
    if folder is None:
        return None
    entry = _read(folder).get(_key(endpoint))
    if not isinstance(entry, dict):
        return None
    one, four, capped, at = (entry.get(k) for k in ("one_stream", "four_streams", "capped",
                                                    "at"))
    if not (isinstance(one, int | float) and isinstance(four, int | float)
            and isinstance(capped, bool) and isinstance(at, int | float)) or one <= 0:
        return None
    age = time.time() - at
    if not 0 <= age <= RECALL_S:  # old, or from a clock ahead of this one
        return None
    return Verdict(float(one), float(four), capped, age)


def remember(cache_dir: Path, endpoint: str, one_stream: float, four_streams: float,
             capped: bool) -> None:
    """Record a probe's verdict (other endpoints' are kept); a failure to write is no
    failure of the sync."""
    folder = _folder(cache_dir)
    if folder is None:
        return
    data = _read(folder)
    data[_key(endpoint)] = {"one_stream": round(one_stream), "four_streams": round(four_streams),
                            "capped": capped, "at": time.time()}
    # Renamed into place, not synced to the disk: a hint lost in a crash costs a probe, and
    # an fsync here, before any download starts, waits on the filesystem's journal after a
    # large sync (bench/shaped_link.py, 4 x 128 MiB: the default 1.87 s with it, 1.45 s
    # without, in one run).
    temp = temp_path_for(folder / NAME)
    try:
        temp.write_text(json.dumps(data, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(temp, folder / NAME)
    except OSError:
        with contextlib.suppress(OSError):
            temp.unlink()


@contextlib.contextmanager
def probing(cache_dir: Path, stop: object = None) -> Iterator[None]:
    """Hold the cache's probe lock (waiting up to WAIT_S for another sync's probe), or go on
    without it where there is none to be had."""
    folder = _folder(cache_dir)
    fd = None
    if folder is not None and flock_works(folder):
        with contextlib.suppress(OSError):
            fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0),
                         0o664)
    try:
        if fd is not None:
            deadline = time.monotonic() + WAIT_S
            while try_flock(fd) is False and time.monotonic() < deadline:
                if getattr(stop, "is_set", lambda: False)():
                    break
                time.sleep(0.05)
        yield
    finally:
        if fd is not None:
            os.close(fd)  # the lock goes with it
