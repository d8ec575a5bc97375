"""Upgrades that fetch only the chunks that changed (issue 39).

On Xet a new revision of a file names, in its reconstruction, the same xorb chunks as the old
one wherever their bytes are the same. When a sync needs a large file and the cache holds the
same path at another revision (the lock before `--upgrade`), it:

1. takes the new file's Xet hash from the lock (its `xet` key; else a HEAD on the resolve
   URL, not followed, names it), cuts the cached blob as Xet cuts it (wlock.xet.chunking)
   and hashes it as Xet does, so the old file is named by its own bytes; then asks for a
   read token and the CAS for both reconstructions: metadata only;
2. places each chunk of the cached blob: a reconstruction names chunks by xorb and index,
   never by offset, so the blob's chunks are laid along the old reconstruction's terms,
   which must add up exactly (sizes per term);
3. writes the new file into the sync's temp file: every term whose chunks are all in the old
   blob, in order, is copied from it; every other term is fetched from its xorb's byte range
   (the presigned URL the CAS named) and decoded (wlock.xet.xorb);
4. hashes the whole temp file: the sync publishes it only if its sha256 and size are the
   lock's, as for every download.

Anything unexpected (no Xet on the endpoint, a CAS that answers otherwise, bytes that do not
decode, a cached blob that does not match its own reconstruction, wrong final bytes) gives
the file back to the ordinary download, with the reason; nothing unverified is published.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wlock.cache.layout import RepoPaths
from wlock.hashing import hash_file
from wlock.xet import chunking, hashing
from wlock.xet.cas import Cas, CasError, Fetch, Reconstruction, Term, xet_file
from wlock.xet.xorb import XorbFormatError, decode

# Below this a file is one quick download anyway: the two reconstructions and the chunking
# are not worth their round trips.
UPGRADE_FROM = 8 * 1024 * 1024
# Xorb ranges fetched at once for one file.
STREAMS = 4


class NotUpgraded(Exception):
    """The file is downloaded whole instead; the message says why. `refused`: bytes were
    served that are not what the reconstruction or the lock names (reported as a warning,
    as a source's wrong bytes are), not merely a path that cannot be taken here."""

    def __init__(self, message: str, *, refused: bool = False) -> None:
        super().__init__(message)
        self.refused = refused


@dataclass(frozen=True, slots=True)
class Copy:
    at: int  # in the new file
    source: int  # in the cached blob
    length: int


@dataclass(frozen=True, slots=True)
class Plan:
    copies: tuple[Copy, ...]
    fetches: dict[Fetch, tuple[tuple[int, Term], ...]]  # a range -> (offset, term) it fills
    size: int

    @property
    def copied(self) -> int:
        return sum(c.length for c in self.copies)

    @property
    def fetched(self) -> int:
        """Bytes the network carries: the xorb ranges, headers and compression included."""
        return sum(f.last - f.first + 1 for f in self.fetches)


def predecessor(paths: RepoPaths, revision: str, path: str, etag: str) -> Path | None:
    """The cached blob of `path` at another revision of the repo (the newest snapshot that
    has one), or None."""
    snapshots = paths.root / "snapshots"
    try:
        others = [d for d in os.scandir(snapshots) if d.name != revision and d.is_dir()]
    except OSError:
        return None
    blobs = os.path.realpath(paths.blobs)
    for entry in sorted(others, key=lambda d: d.stat().st_mtime, reverse=True):
        target = os.path.realpath(os.path.join(entry.path, path))
        if (os.path.dirname(target) == blobs and os.path.basename(target) != etag
                and os.path.isfile(target)):
            return Path(target)
    return None


def place(old: Reconstruction, ends: list[int]) -> dict[tuple[str, int], tuple[int, int]]:
    """Each chunk of the cached blob (cut at `ends`) by (xorb, index): its offset and size
    in the blob."""
    if old.skip or sum(t.length for t in old.terms) != (ends[-1] if ends else 0):
        raise NotUpgraded("the cached blob is not the file its reconstruction describes")
    where: dict[tuple[str, int], tuple[int, int]] = {}
    k, at = 0, 0
    for term in old.terms:
        length = 0
        for index in range(term.start, term.end):
            if k >= len(ends):
                raise NotUpgraded("the cached blob has fewer chunks than its reconstruction")
            size = ends[k] - at
            where.setdefault((term.xorb, index), (at, size))
            at, k, length = ends[k], k + 1, length + size
        if length != term.length:
            raise NotUpgraded("the cached blob's chunks do not add up to its reconstruction")
    return where


def plan(new: Reconstruction, where: dict[tuple[str, int], tuple[int, int]]) -> Plan:
    """Copy each term whose chunks the cached blob holds in order; fetch every other one."""
    if new.skip:
        raise NotUpgraded("a reconstruction of part of the file")
    copies: list[Copy] = []
    fetches: dict[Fetch, list[tuple[int, Term]]] = {}
    at = 0
    for term in new.terms:
        held = [where.get((term.xorb, i)) for i in range(term.start, term.end)]
        first = held[0][0] if held[0] is not None else None
        contiguous = first is not None
        end = first or 0
        for h in held:
            if h is None or h[0] != end:
                contiguous = False
                break
            end += h[1]
        if contiguous and first is not None and end - first == term.length:
            if copies and copies[-1].at + copies[-1].length == at and (
                    copies[-1].source + copies[-1].length == first):
                last = copies.pop()
                copies.append(Copy(last.at, last.source, last.length + term.length))
            else:
                copies.append(Copy(at, first, term.length))
        else:
            fetches.setdefault(new.fetch_for(term), []).append((at, term))
        at += term.length
    return Plan(tuple(copies), {f: tuple(t) for f, t in fetches.items()}, at)


class Upgrader:
    """Chunk-level upgrades for one sync, on the Transfer's HTTP clients."""

    def __init__(self, transfer: Any, on_bytes: Callable[[Any, int], None]) -> None:
        self._transfer = transfer
        self._on_bytes = on_bytes
        self._lock = threading.Lock()
        self.files = 0
        self.copied = 0
        self.fetched = 0
        self.size = 0

    def fetch(self, job: Any, old_blob: Path) -> None:
        """Write `job`'s file into `job.temp` from `old_blob` and the changed chunks, and
        verify it. Raises NotUpgraded (nothing left in `job.temp`)."""
        try:
            done = self._fetch(job, old_blob)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(job.temp)
            raise
        with self._lock:
            self.files += 1
            self.copied += done.copied
            self.fetched += done.fetched
            self.size += done.size

    def _new_file(self, job: Any) -> tuple[str, str]:
        """The new file's Xet hash and its revision's token URL: from the lock (its `xet`
        key) and the Hub's token route, else from the resolve answer (HEAD, not followed)."""
        import httpx2

        transfer = self._transfer
        if job.xet:
            return job.xet, transfer.xet_token_url(job.kind, job.repo_id, job.revision)
        url = transfer.resolve_url(job.kind, job.repo_id, job.revision, job.path)
        try:
            answer = transfer.http.request("HEAD", url, headers=transfer.headers_for(url))
        except httpx2.HTTPError as e:
            raise NotUpgraded(f"the endpoint did not answer ({e})") from None
        found = xet_file(answer) if answer.status_code < 400 else None
        if found is None:
            raise NotUpgraded("the endpoint names no Xet hash for it")
        return found.file_hash, found.token_url

    def plan(self, job: Any, old_blob: Path) -> Plan:
        """What to copy from `old_blob` and what to fetch. The old file is named by its own
        bytes: the cached blob is cut and hashed as Xet does, and the CAS asked for the
        reconstruction of that hash, so a blob changed on disk since (a hash the CAS does
        not know) is never taken for the file it was."""
        import httpx2

        transfer = self._transfer
        new_hash, token_url = self._new_file(job)
        with open(old_blob, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            view = memoryview(m)
            try:
                ends = chunking.boundaries(view)
                nodes = [(hashing.chunk_hash(view[a:b]), b - a)
                         for a, b in zip([0, *ends], ends, strict=False)]
            finally:
                view.release()
        old_hash = hashing.to_hex(hashing.file_hash(nodes))
        try:
            token = transfer.http.get(token_url, headers=transfer.headers_for(token_url))
        except httpx2.HTTPError as e:
            raise NotUpgraded(f"no Xet token ({e})") from None
        if token.status_code != 200:
            raise NotUpgraded(f"the Xet token endpoint answered {token.status_code}")
        try:
            cas = Cas(transfer.http, token)
            new = cas.reconstruction(new_hash)
        except CasError as e:
            raise NotUpgraded(str(e)) from None
        try:
            old = cas.reconstruction(old_hash)
        except CasError:
            raise NotUpgraded("the cached blob is not a file the Hub's CAS holds (changed on "
                              "disk since it was synced?)") from None
        if new.size != job.size:
            raise NotUpgraded(f"its reconstruction is {new.size} bytes, the lock says "
                              f"{job.size}")
        where = place(old, ends)
        try:
            return plan(new, where)
        except CasError as e:
            raise NotUpgraded(str(e)) from None

    def _fetch(self, job: Any, old_blob: Path) -> Plan:
        todo = self.plan(job, old_blob)
        fd = os.open(job.temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.ftruncate(fd, todo.size)
            with open(old_blob, "rb") as source:
                for copy in todo.copies:
                    done = 0
                    while done < copy.length:
                        n = min(copy.length - done, 8 * 1024 * 1024)
                        data = os.pread(source.fileno(), n, copy.source + done)
                        if len(data) != n:
                            raise NotUpgraded("the cached blob ended early")
                        os.pwrite(fd, data, copy.at + done)
                        done += n
                        self._on_bytes(job, n)
            with ThreadPoolExecutor(max_workers=STREAMS) as pool:
                for _ in pool.map(lambda item: self._range(job, fd, *item),
                                  todo.fetches.items()):
                    pass
        finally:
            os.close(fd)
        if os.stat(job.temp).st_size != job.size or hash_file(job.temp, "sha256") != job.etag:
            self._on_bytes(job, -job.size)
            raise NotUpgraded("the bytes put together are not the lock's: refused",
                              refused=True)
        return todo

    def _range(self, job: Any, fd: int, fetch: Fetch,
               terms: tuple[tuple[int, Term], ...]) -> None:
        import httpx2

        transfer = self._transfer
        if transfer.stopped.is_set():
            raise NotUpgraded("stopped")
        try:
            # Presigned: no token of any kind goes with it.
            response = transfer.http.get(fetch.url, headers={
                "Range": f"bytes={fetch.first}-{fetch.last}", "Accept-Encoding": "identity"})
        except httpx2.HTTPError as e:
            raise NotUpgraded(f"a xorb range did not arrive ({e})") from None
        if response.status_code != 206:
            raise NotUpgraded(f"a xorb range answered {response.status_code}")
        if len(response.content) != fetch.last - fetch.first + 1:
            raise NotUpgraded(f"a xorb range of {fetch.last - fetch.first + 1} bytes came "
                              f"with {len(response.content)}", refused=True)
        try:
            chunks = list(decode(response.content))
        except XorbFormatError as e:
            raise NotUpgraded(f"a xorb range does not decode ({e})", refused=True) from None
        if len(chunks) != fetch.end - fetch.start:
            raise NotUpgraded("a xorb range holds another number of chunks than named",
                              refused=True)
        for at, term in terms:
            data = b"".join(chunks[term.start - fetch.start:term.end - fetch.start])
            if len(data) != term.length:
                raise NotUpgraded("a term decodes to another length than its reconstruction",
                                  refused=True)
            os.pwrite(fd, data, at)
            self._on_bytes(job, len(data))
