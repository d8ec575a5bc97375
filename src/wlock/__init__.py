"""wlock: lock Hugging Face model weights to exact commits and bytes, then sync them anywhere.

    import wlock
    wlock.revision("acme/tiny-bert")      # the commit weights.lock pins it to
    wlock.snapshot_path("acme/tiny-squad")  # the locked commit's folder in the cache
    wlock.locked("acme/tiny-squad")       # the whole lock entry: revision, files, sizes, hashes

Importing this package imports nothing heavy (no huggingface_hub): it is safe in any script.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from wlock.version import __version__

__all__ = ["NotLockedError", "NotSyncedError", "__version__", "locked", "revision",
           "snapshot_path"]

if TYPE_CHECKING:
    from wlock.api import NotLockedError, NotSyncedError, locked, revision, snapshot_path


def __getattr__(name: str) -> Any:
    # Lazy, so that `import wlock` (and the CLI's start-up) costs nothing until used.
    if name in ("revision", "locked", "snapshot_path", "NotLockedError", "NotSyncedError"):
        from wlock import api

        return getattr(api, name)
    raise AttributeError(f"module 'wlock' has no attribute {name!r}")
