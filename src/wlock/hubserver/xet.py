"""The emulator's Xet storage: files as chunks in xorbs, and the CAS's reconstructions of them.

What the Hub stores every LFS file in, as its Xet protocol docs and the IETF draft "XET:
Content-Addressable Storage Protocol" describe it, and as hf_xet reads it:

- a file is cut into content-defined chunks (wlock.xet.chunking); a chunk already stored
  (by its hash, in any file of the store) is not stored again, so a new revision of a file
  shares every unchanged chunk with the old one, and its reconstruction names them;
- new chunks go into xorbs of at most 64 MiB and 8,192 chunks, in the spec's byte format
  (wlock.xet.xorb): per chunk an 8-byte header then its bytes, each stored as the smallest
  of none, LZ4 and byte grouping + LZ4, as xet-core's uploads choose (random weights stay
  uncompressed; text takes LZ4; bf16 tensors take byte grouping). Only the chunk region is
  kept: it is what a download reads (by the byte ranges the reconstruction gives); the
  metadata footer that uploads write is not emulated;
- a file's reconstruction is its list of terms (xorb hash, chunk range, unpacked length),
  stored at build time; the CAS answers it whole or for a byte range, as /v1 (`fetch_info`,
  one URL and byte range per term) or /v2 (`xorbs`, ranges grouped under a URL).

Layout, under the store's root:

    xet/files/<file hash>.json     {"size": n, "terms": [[xorb, start, end, length], ...]}
    xet/xorbs/<xorb hash>          the chunk region
    xet/xorbs/<xorb hash>.json     {"ends": [...], "sizes": [...], "hashes": [...]}: each
                                   chunk's end offset in the region, its size, its hash
    xet/chunks.json                {chunk hash: [xorb hash, index]}: what is stored
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wlock.xet import chunking, hashing
from wlock.xet.xorb import BG4_LZ4, HEADER_LEN, LZ4, NONE, encode

MAX_XORB_BYTES = 64 * 1024 * 1024
MAX_XORB_CHUNKS = 8192


def stored(piece: bytes | memoryview) -> bytes:
    """A chunk as an upload stores it: the smallest of its encodings, none on a tie."""
    return min((encode(piece, s) for s in (NONE, LZ4, BG4_LZ4)), key=len)


@dataclass(frozen=True, slots=True)
class Term:
    xorb: str
    start: int  # chunk indices, end exclusive
    end: int
    length: int  # unpacked bytes


@dataclass(frozen=True, slots=True)
class Xorb:
    ends: list[int]  # each chunk's end offset in the serialized region, header included
    sizes: list[int]  # each chunk's unpacked size

    def byte_range(self, start: int, end: int) -> tuple[int, int]:
        """Chunks [start, end) as a byte range of the region, end inclusive (as `Range`)."""
        return (self.ends[start - 1] if start else 0), self.ends[end - 1] - 1


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


class XetStore:
    """Read and build one store's Xet side (the builder and the server share it)."""

    def __init__(self, root: Path) -> None:
        self.root = root / "xet"
        self._xorbs: dict[str, Xorb] = {}
        self._lock = threading.Lock()

    # -- read ----------------------------------------------------------------------------

    def terms(self, file_hash: str) -> tuple[int, list[Term]] | None:
        try:
            data = json.loads((self.root / "files" / f"{file_hash}.json").read_bytes())
        except (OSError, ValueError):
            return None
        return int(data["size"]), [Term(*t) for t in data["terms"]]

    def xorb_path(self, xorb_hash: str) -> Path | None:
        path = self.root / "xorbs" / xorb_hash
        return path if len(xorb_hash) == 64 and path.is_file() else None

    def xorb(self, xorb_hash: str) -> Xorb:
        with self._lock:
            hit = self._xorbs.get(xorb_hash)
        if hit is None:
            data = json.loads((self.root / "xorbs" / f"{xorb_hash}.json").read_bytes())
            hit = Xorb(ends=data["ends"], sizes=data["sizes"])
            with self._lock:
                self._xorbs[xorb_hash] = hit
        return hit

    def reconstruction(self, file_hash: str, first: int | None = None,
                       last: int | None = None) -> tuple[int, list[Term]] | None:
        """The terms covering bytes [first, last] (inclusive; the whole file by default),
        the first and last narrowed to the chunks that hold the range, and how far into the
        first term the range begins (`offset_into_first_range`). None: no such file."""
        found = self.terms(file_hash)
        if found is None:
            return None
        size, terms = found
        first = 0 if first is None else first
        last = size - 1 if last is None else min(last, size - 1)
        out: list[Term] = []
        skip = 0
        offset = 0
        for term in terms:
            if offset > last:
                break
            if offset + term.length <= first:
                offset += term.length
                continue
            sizes = self.xorb(term.xorb).sizes
            start, at = term.start, offset
            while at + sizes[start] <= first:  # chunks wholly before the range
                at += sizes[start]
                start += 1
            if not out:
                skip = first - at
            end, stop = start, at
            while end < term.end and stop <= last:
                stop += sizes[end]
                end += 1
            out.append(Term(term.xorb, start, end, stop - at))
            offset += term.length
        return skip, out

    # -- build ---------------------------------------------------------------------------

    def add(self, data: bytes | memoryview) -> str:
        """Store a file's chunks (those not stored yet) and its reconstruction; returns its
        file hash in the Hub's string form (`X-Xet-Hash`, `xetHash`)."""
        (self.root / "files").mkdir(parents=True, exist_ok=True)
        (self.root / "xorbs").mkdir(parents=True, exist_ok=True)
        index_path = self.root / "chunks.json"
        with self._lock:
            index: dict[str, list[Any]] = (json.loads(index_path.read_bytes())
                                           if index_path.exists() else {})
            pieces = list(chunking.chunks(data))
            nodes = [(hashing.chunk_hash(c), len(c)) for c in pieces]
            file_hash = hashing.to_hex(hashing.file_hash(nodes))
            # Each chunk's place: (xorb, index) if stored, else (None, k) in the new ones.
            new: list[list[int]] = []  # per new xorb, the chunks (indices into `pieces`)
            new_bytes = 0
            places: list[tuple[str | None, int, int]] = []  # (xorb, index, new xorb no.)
            seen: dict[str, tuple[int, int]] = {}
            for i, (digest, size) in enumerate(nodes):
                key = hashing.to_hex(digest)
                if key in index:
                    places.append((index[key][0], index[key][1], -1))
                    continue
                if key in seen:  # a chunk repeated within this file: stored once
                    x, k = seen[key]
                    places.append((None, k, x))
                    continue
                if not new or len(new[-1]) >= MAX_XORB_CHUNKS or (
                        new_bytes + HEADER_LEN + size > MAX_XORB_BYTES):
                    new.append([])
                    new_bytes = 0
                new[-1].append(i)
                new_bytes += HEADER_LEN + size
                seen[key] = (len(new) - 1, len(new[-1]) - 1)
                places.append((None, len(new[-1]) - 1, len(new) - 1))
            names = [self._write_xorb([pieces[i] for i in members],
                                      [nodes[i] for i in members]) for members in new]
            for x, members in enumerate(new):
                for k, i in enumerate(members):
                    index[hashing.to_hex(nodes[i][0])] = [names[x], k]
            terms: list[list[Any]] = []
            for (xorb, k, x), (_, size) in zip(places, nodes, strict=True):
                name = xorb if xorb is not None else names[x]
                if terms and terms[-1][0] == name and terms[-1][2] == k:
                    terms[-1][2] += 1
                    terms[-1][3] += size
                else:
                    terms.append([name, k, k + 1, size])
            _write_atomic(self.root / "files" / f"{file_hash}.json",
                          json.dumps({"size": len(data), "terms": terms}).encode())
            _write_atomic(index_path, json.dumps(index).encode())
        return file_hash

    def _write_xorb(self, pieces: list[memoryview], nodes: list[hashing.Node]) -> str:
        name = hashing.to_hex(hashing.xorb_hash(nodes))
        ends, sizes, at = [], [], 0
        region = bytearray()
        for piece in pieces:
            serialized = stored(piece)
            region += serialized
            at += len(serialized)
            ends.append(at)
            sizes.append(len(piece))
        path = self.root / "xorbs" / name
        if not path.exists():
            _write_atomic(path, bytes(region))
        _write_atomic(path.with_name(f"{name}.json"), json.dumps({
            "ends": ends, "sizes": sizes,
            "hashes": [hashing.to_hex(h) for h, _ in nodes]}).encode())
        return name
