"""Atomic file writes: a temp file unique to this process beside the target, then `os.replace`.

A reader (or a crash) never sees half a file, on local disks and on network filesystems alike,
because rename within one directory is atomic on every POSIX filesystem we care about.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from wlock.errors import LocalError

# Temp names carry the host and pid of their writer, so that a cleaner can tell a dead
# writer's leftovers from a live one's on a filesystem shared by several nodes.
HOST = os.uname().nodename.replace(".", "_")


def temp_path_for(target: Path, suffix: str = ".tmp") -> Path:
    """A sibling of `target` that no other process, thread or node will pick:
    `.<name>.<host>.<pid>.<random><suffix>`."""
    return target.with_name(
        f".{target.name}.{HOST}.{os.getpid()}.{os.urandom(4).hex()}{suffix}"
    )


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
