"""Atomic file writes: a temp file unique to this process beside the target, then `os.replace`.

A reader (or a crash) never sees half a file, on local disks and on network filesystems alike,
because rename within one directory is atomic on every POSIX filesystem we care about.
"""

from __future__ import annotations

import contextlib
import os
import random
from pathlib import Path

from wlock.errors import LocalError

HOST = os.uname().nodename.replace(".", "_")


def _machine() -> str:
    """8 hex digits naming this boot of this machine and this PID namespace: the scope in
    which a pid means one process. Two containers may share a hostname and a pid; they do
    not share a boot id and a PID namespace both (the host's own processes do)."""
    import hashlib

    parts = []
    for source in ("/proc/sys/kernel/random/boot_id", "/proc/self/ns/pid"):
        try:
            parts.append(os.readlink(source) if source.endswith("/pid") else
                         Path(source).read_text().strip())
        except OSError:
            parts.append(HOST)  # no /proc: the hostname is the best there is
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:8]


# Temp names carry their writer (`<machine>-<pid>`), so that a cleaner on the same machine
# and PID namespace can tell a dead writer's leftovers at once; elsewhere, a leftover is
# judged by its lease (wlock.cache.layout).
MACHINE = _machine()
# Our own generator: a program that seeds `random` for its experiments repeats its sequence.
# It names files, it guards no secret.
_RANDOM = random.Random()  # noqa: S311


def temp_name(name: str, suffix: str = ".tmp") -> str:
    """The name of a sibling of `name` that no other process, thread or node will pick:
    `.<name>.<host>.<machine>-<pid>.<random><suffix>`. The random part tells this process's
    threads apart (the rest tells processes and nodes apart), so it needs no system call:
    a generator of this process, not the kernel's (a sync of 1,000 small files asked the kernel
    2,000 times, each call a handoff of the GIL among its threads)."""
    return f".{name}.{HOST}.{MACHINE}-{os.getpid()}.{_RANDOM.getrandbits(32):08x}{suffix}"


def temp_path_for(target: Path, suffix: str = ".tmp") -> Path:
    """A sibling of `target` named by `temp_name`."""
    return target.with_name(temp_name(target.name, suffix))


def write_bytes_atomic(target: Path, data: bytes) -> None:
    """Replace `target` with `data` all at once. Raises LocalError (exit 6) if it cannot."""
    tmp = temp_path_for(target)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise LocalError(
            f"cannot write {target}: {e.strerror or e}",
            hint="Check that the folder exists, is writable and has free space.",
        ) from e
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(target: Path, text: str) -> None:
    write_bytes_atomic(target, text.encode("utf-8"))
