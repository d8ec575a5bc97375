"""Chunk-level upgrades as an engine (wlock.cache.upgrade plans them): a large file put
together from its cached earlier revision and the xorb ranges that changed, fetched from the
Hub's CAS and decoded here, then hashed whole; a NotUpgraded gives it back to the ordinary
download."""

from __future__ import annotations

import contextlib
import mmap
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from wlock.cache.engines import FetchJob, OnBytes
from wlock.cache.engines.route import Route
from wlock.cache.upgrade import NotUpgraded, Plan, place, plan
from wlock.hashing import hash_file
from wlock.xet import hashing
from wlock.xet.cas import Cas, CasError, Fetch, Term, xet_file

# Xorb ranges fetched at once for one file.
STREAMS = 4


class Upgrader:
    """Chunk-level upgrades for one sync, on the Route's HTTP clients."""

    def __init__(self, route: Route, on_bytes: OnBytes, stopped: threading.Event) -> None:
        self._route = route
        self._stopped = stopped
        self._on_bytes = on_bytes
        self._lock = threading.Lock()
        self.files = 0
        self.copied = 0
        self.fetched = 0
        self.size = 0

    def fetch(self, job: FetchJob, old_blob: Path) -> None:
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

    def _new_file(self, job: FetchJob) -> tuple[str, str]:
        """The new file's Xet hash and its revision's token URL: from the lock (its `xet`
        key) and the Hub's token route, else from the resolve answer (HEAD, not followed)."""
        import httpx2

        route = self._route
        if job.xet:
            return job.xet, route.xet_token_url(job.kind, job.repo_id, job.revision)
        url = route.resolve_url(job.kind, job.repo_id, job.revision, job.path)
        try:
            answer = route.http.request("HEAD", url, headers=route.headers_for(url))
        except httpx2.HTTPError as e:
            raise NotUpgraded(f"the endpoint did not answer ({e})") from None
        found = xet_file(answer) if answer.status_code < 400 else None
        if found is None:
            raise NotUpgraded("the endpoint names no Xet hash for it")
        return found.file_hash, found.token_url

    def plan(self, job: FetchJob, old_blob: Path) -> Plan:
        """What to copy from `old_blob` and what to fetch. The old file is named by its own
        bytes: the cached blob is cut and hashed as Xet does, and the CAS asked for the
        reconstruction of that hash, so a blob changed on disk since (a hash the CAS does
        not know) is never taken for the file it was."""
        import httpx2

        # Here: the chunker imports numpy (50 ms), which a sync that upgrades nothing skips.
        from wlock.xet import chunking

        route = self._route
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
            token = route.http.get(token_url, headers=route.headers_for(token_url))
        except httpx2.HTTPError as e:
            raise NotUpgraded(f"no Xet token ({e})") from None
        if token.status_code != 200:
            raise NotUpgraded(f"the Xet token endpoint answered {token.status_code}")
        try:
            cas = Cas(route.http, token)
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

    def _fetch(self, job: FetchJob, old_blob: Path) -> Plan:
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

    def _range(self, job: FetchJob, fd: int, fetch: Fetch,
               terms: tuple[tuple[int, Term], ...]) -> None:
        import httpx2

        route = self._route
        if self._stopped.is_set():
            raise NotUpgraded("stopped")
        try:
            # Presigned: no token of any kind goes with it.
            response = route.http.get(fetch.url, headers={
                "Range": f"bytes={fetch.first}-{fetch.last}", "Accept-Encoding": "identity"})
        except httpx2.HTTPError as e:
            raise NotUpgraded(f"a xorb range did not arrive ({e})") from None
        if response.status_code != 206:
            raise NotUpgraded(f"a xorb range answered {response.status_code}")
        if len(response.content) != fetch.last - fetch.first + 1:
            raise NotUpgraded(f"a xorb range of {fetch.last - fetch.first + 1} bytes came "
                              f"with {len(response.content)}", refused=True)
        # Here: xorb decoding imports numpy and lz4 (80 ms), which a sync that upgrades no
        # file never needs (and fetch.py imports this module for every sync that downloads).
        from wlock.xet.xorb import XorbFormatError, decode

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
