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

import os
from dataclasses import dataclass
from pathlib import Path

from wlock.cache.layout import RepoPaths
from wlock.xet.cas import Fetch, Reconstruction, Term

# Below this a file is one quick download anyway: the two reconstructions and the chunking
# are not worth their round trips.
UPGRADE_FROM = 8 * 1024 * 1024


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
