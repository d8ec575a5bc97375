"""The archive as a source for `wlock sync` (wlock.cache.sources.BlobSource): a missing blob
is taken from the archive before the Hub, and verified by the sync as a Hub download is."""

from __future__ import annotations

import threading
from pathlib import Path

from wlock.archive.store import Archive
from wlock.errors import WlockError
from wlock.models import LockedFile, LockedRepo


class ArchiveSource:
    """Lists the archive's blobs once (the first time a blob is asked for), then fetches only
    what it holds: a blob it lacks costs no request. An archive that cannot be listed fails
    the first file once (the sync reports why and goes on to the Hub) and is not asked
    again."""

    def __init__(self, archive: Archive) -> None:
        self.archive = archive
        self._blobs: dict[str, int] | None = None
        self._down = False
        self._lock = threading.Lock()

    @property
    def label(self) -> str:
        return f"archive {self.archive.url}"

    def _listing(self) -> dict[str, int]:
        with self._lock:
            if self._down:
                return {}
            if self._blobs is None:
                try:
                    self._blobs = self.archive.listing("blobs")
                except WlockError:
                    self._down = True
                    raise
            return self._blobs

    def fetch(self, repo: LockedRepo, file: LockedFile, temp: Path) -> bool | str:
        if self._listing().get(file.etag) != file.size:
            return False
        return self.archive.get_blob(file.etag, temp, file.hash_kind, file.size) or True
