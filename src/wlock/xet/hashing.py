"""Xet's hashes: chunk, xorb and file hashes, and the string form the Hub prints them in.

As the specification defines them for its one algorithm suite, XET-BLAKE3-GEARHASH-LZ4
(huggingface.co's Xet protocol docs; the IETF draft "XET: Content-Addressable Storage
Protocol", section "Hashing Methods"), and as xet-core computes them where the two differ:

- a chunk's hash is BLAKE3 keyed with DATA_KEY over its bytes;
- a xorb's hash is the root of an aggregated tree over its chunks' (hash, size) pairs: not a
  binary Merkle tree, a group of 2 to 9 nodes closes after a node whose last 64-bit word
  (little-endian) is 0 mod 4, from the third node on; a group's hash is BLAKE3 keyed with
  INTERNAL_NODE_KEY over one line `"{hash} : {size}\\n"` per node, the hash in string form;
- a file's hash is the same root over all its chunks, hashed once more, BLAKE3 keyed with 32
  zero bytes. An empty file's is 32 zero bytes: xet-core (and hf_xet's `hash_files`) return
  it so, where the draft says the keyed hash of the zero root.

The string form is not plain hex: the 32 bytes are four little-endian 64-bit words, each
printed as 16 hex digits (`to_hex`). A server that prints or hashes plain hex still serves
hf_xet, which checks lengths, not hashes; so the tests hold these functions to the
specification's reference vectors and to hf_xet's own `hash_files`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import blake3

HASH_LEN = 32
DATA_KEY = bytes((
    0x66, 0x97, 0xF5, 0x77, 0x5B, 0x95, 0x50, 0xDE, 0x31, 0x35, 0xCB, 0xAC, 0xA5, 0x97, 0x18, 0x1C,
    0x9D, 0xE4, 0x21, 0x10, 0x9B, 0xEB, 0x2B, 0x58, 0xB4, 0xD0, 0xB0, 0x4B, 0x93, 0xAD, 0xF2, 0x29,
))
INTERNAL_NODE_KEY = bytes((
    0x01, 0x7E, 0xC5, 0xC7, 0xA5, 0x47, 0x29, 0x96, 0xFD, 0x94, 0x66, 0x66, 0xB4, 0x8A, 0x02, 0xE6,
    0x5D, 0xDD, 0x53, 0x6F, 0x37, 0xC7, 0x6D, 0xD2, 0xF8, 0x63, 0x52, 0xE6, 0x4A, 0x53, 0x71, 0x3F,
))
VERIFICATION_KEY = bytes((
    0x7F, 0x18, 0x57, 0xD6, 0xCE, 0x56, 0xED, 0x66, 0x12, 0x7F, 0xF9, 0x13, 0xE7, 0xA5, 0xC3, 0xF3,
    0xA4, 0xCD, 0x26, 0xD5, 0xB5, 0xDB, 0x49, 0xE6, 0x41, 0x24, 0x98, 0x7F, 0x28, 0xFB, 0x94, 0xC3,
))
ZERO_KEY = bytes(HASH_LEN)
ZERO_HASH = bytes(HASH_LEN)

# The aggregated tree's shape: a group closes after a node whose hash is 0 mod this, from
# its third node on, and at most 2 * 4 + 1 nodes.
MEAN_BRANCHING = 4
MAX_CHILDREN = 2 * MEAN_BRANCHING + 1

Node = tuple[bytes, int]  # (hash, size in bytes)


def chunk_hash(data: bytes | memoryview) -> bytes:
    return blake3.blake3(data, key=DATA_KEY).digest()


def to_hex(digest: bytes) -> str:
    """A hash in the Hub's string form: four little-endian 64-bit words, 16 hex digits each."""
    if len(digest) != HASH_LEN:
        raise ValueError(f"a Xet hash is {HASH_LEN} bytes, not {len(digest)}")
    return "".join(digest[i:i + 8][::-1].hex() for i in range(0, HASH_LEN, 8))


def from_hex(text: str) -> bytes:
    """The bytes of a hash given in the Hub's string form (`X-Xet-Hash`, `xetHash`)."""
    if len(text) != 2 * HASH_LEN:
        raise ValueError(f"a Xet hash is {2 * HASH_LEN} hex digits, not {len(text)}: {text!r}")
    raw = bytes.fromhex(text)
    return b"".join(raw[i:i + 8][::-1] for i in range(0, HASH_LEN, 8))


def _merge(nodes: Sequence[Node]) -> Node:
    text = "".join(f"{to_hex(h)} : {size}\n" for h, size in nodes)
    merged = blake3.blake3(text.encode("ascii"), key=INTERNAL_NODE_KEY).digest()
    return merged, sum(size for _, size in nodes)


def _next_cut(nodes: Sequence[Node], start: int) -> int:
    """Where the group beginning at `start` ends (exclusive)."""
    left = len(nodes) - start
    if left <= 2:
        return len(nodes)
    end = start + min(MAX_CHILDREN, left)
    for i in range(start + 2, end):
        if int.from_bytes(nodes[i][0][24:], "little") % MEAN_BRANCHING == 0:
            return i + 1
    return end


def merkle_root(nodes: Iterable[Node]) -> bytes:
    level = list(nodes)
    if not level:
        return ZERO_HASH
    while len(level) > 1:
        merged: list[Node] = []
        start = 0
        while start < len(level):
            cut = _next_cut(level, start)
            merged.append(_merge(level[start:cut]))
            start = cut
        level = merged
    return level[0][0]


def xorb_hash(chunks: Iterable[Node]) -> bytes:
    return merkle_root(chunks)


def file_hash(chunks: Iterable[Node]) -> bytes:
    nodes = list(chunks)
    if not nodes:  # an empty file: xet-core's (and hf_xet's) zero hash, not the draft's
        return ZERO_HASH
    return blake3.blake3(merkle_root(nodes), key=ZERO_KEY).digest()


def verification_hash(chunk_hashes: Iterable[bytes]) -> bytes:
    """A term's proof of the chunks it covers: BLAKE3 keyed with VERIFICATION_KEY over their
    hashes' raw bytes, in order (shards carry one per term)."""
    return blake3.blake3(b"".join(chunk_hashes), key=VERIFICATION_KEY).digest()
