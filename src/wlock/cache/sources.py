"""Where a missing blob can come from before the Hub.

A sync asks each source in turn, in the order given (another cache on disk, then an archive:
`wlock.archive`), and the Hub last. A source copies the bytes into the sync's temp file and
nothing more: the sync verifies them exactly as it verifies a Hub download, and bytes that do
not match the lock are refused (the temp file removed, the refusal reported) and the next
source is asked. So a source is never trusted, only used.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

from wlock.cache.layout import repo_folder_name
from wlock.fastcopy import clone_or_copy
from wlock.models import LockedFile, LockedRepo


class BlobSource(Protocol):
    """A place holding blobs by the names the lock gives them."""

    @property
    def label(self) -> str:
        """How reports name it ("cache /nas/hf/hub", "archive s3://bucket/prefix")."""
        ...

    def fetch(self, repo: LockedRepo, file: LockedFile, temp: Path) -> bool | str:
        """Write the blob's bytes into `temp`; False (and nothing written) when this source
        does not hold it; True when written; or the digest (of `file.hash_kind`) of the
        bytes as they were written into `temp`, when they were hashed on their way (the sync
        then does not read them again). Raises OSError, or a WlockError for a source that
        cannot be read at all."""
        ...


class OtherCache:
    """Another Hugging Face cache: a second machine's cache on a NAS, a colleague's HF_HOME.
    Read only; its blobs are copied (reflinked where the filesystem can), never linked, so
    the two caches stay independent."""

    def __init__(self, folder: Path) -> None:
        folder = folder.expanduser().resolve()
        # HF_HOME or the hub folder itself: both are what people call "my cache".
        if (folder / "hub").is_dir() and not any(folder.glob("models--*")) and not any(
                folder.glob("datasets--*")):
            folder = folder / "hub"
        self.folder = folder

    @property
    def label(self) -> str:
        return f"cache {self.folder}"

    def fetch(self, repo: LockedRepo, file: LockedFile, temp: Path) -> bool | str:
        blob = self.folder / repo_folder_name(repo.kind, repo.id) / "blobs" / file.etag
        try:
            if os.stat(blob).st_size != file.size:
                return False  # a partial or foreign file: not worth a copy
        except OSError:
            return False
        clone_or_copy(blob, temp)
        return True
