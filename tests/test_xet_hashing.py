"""Xet's hashes and chunking, held to the specification's reference vectors (the IETF draft's
"Test Vectors" section) and to hf_xet itself: `hf_xet.hash_files` chunks and hashes a local
file with xet-core's own code, no network, so every file hash wlock computes is compared with
the one the Hub's client would upload under."""

from __future__ import annotations

import os
import random
from pathlib import Path

import hf_xet
import pytest

from wlock.xet import chunking, hashing
from wlock.xet.chunking import MAX_CHUNK, MIN_CHUNK


def xet_file_hash(data: bytes) -> str:
    return hashing.to_hex(hashing.file_hash(
        (hashing.chunk_hash(c), len(c)) for c in chunking.chunks(data)))


def test_chunk_hash_reference_vector() -> None:
    digest = hashing.chunk_hash(b"Hello World!")
    assert digest.hex() == "a29cfb08e608d4d8726dd8659a90b9134b3240d5d8e42d5fcb28e2a6e763a3e8"
    assert hashing.to_hex(digest) == (
        "d8d408e608fb9ca213b9909a65d86d725f2de4d8d540324be8a363e7a6e228cb")


def test_string_form_reference_vector() -> None:
    text = "07060504030201000f0e0d0c0b0a090817161514131211101f1e1d1c1b1a1918"
    assert hashing.to_hex(bytes(range(32))) == text
    assert hashing.from_hex(text) == bytes(range(32))
    with pytest.raises(ValueError, match="64 hex digits"):
        hashing.from_hex(text[:-2])


def test_internal_node_reference_vector() -> None:
    nodes = [(hashing.from_hex(
        "c28f58387a60d4aa200c311cda7c7f77f686614864f5869eadebf765d0a14a69"), 100),
        (hashing.from_hex(
            "6e4e3263e073ce2c0e78cc770c361e2778db3b054b98ab65e277fc084fa70f22"), 200)]
    assert hashing.to_hex(hashing.merkle_root(nodes)) == (
        "be64c7003ccd3cf4357364750e04c9592b3c36705dee76a71590c011766b6c14")


def test_verification_reference_vector() -> None:
    hashes = [bytes.fromhex("aad4607a38588fc2777f7cda1c310c209e86f564486186f6694aa1d065f7ebad"),
              bytes.fromhex("2cce73e063324e6e271e360c77cc780e65ab984b053bdb78220fa74f08fc77e2")]
    assert hashing.to_hex(hashing.verification_hash(hashes)) == (
        "eb06a8ad81d588ac05d1d9a079232d9c1e7d0b07232fa58091caa7bf333a2768")


def test_the_tree_is_not_binary() -> None:
    """Groups of 2 to 9 nodes, cut where a node's last word is 0 mod 4 from the third on: a
    binary tree (or plain-hex lines) gives another root for the same chunks."""
    rng = random.Random(7)
    nodes = [(rng.randbytes(32), rng.randrange(1, 1 << 17)) for _ in range(50)]
    cuts = [i for i, (h, _) in enumerate(nodes) if int.from_bytes(h[24:], "little") % 4 == 0]
    assert cuts  # the sample has cut points, so the shape matters
    root = hashing.merkle_root(nodes)

    def binary(level: list[hashing.Node]) -> bytes:
        while len(level) > 1:
            level = [hashing._merge(level[i:i + 2]) for i in range(0, len(level), 2)]
        return level[0][0]
    assert root != binary(list(nodes))
    assert hashing.merkle_root(nodes[:1]) == nodes[0][0]
    assert hashing.merkle_root([]) == hashing.ZERO_HASH


def shapes() -> dict[str, bytes]:
    rng = random.Random(2026)
    text = b"".join(b"%d,%s\n" % (i, rng.choice([b"alpha", b"beta", b"gamma"]) * (i % 7))
                    for i in range(120_000))
    return {
        "empty": b"",
        "one byte": b"x",
        "hello": b"Hello World!",
        "just under the minimum chunk": os.urandom(MIN_CHUNK - 1),
        "the minimum chunk": os.urandom(MIN_CHUNK),
        "random, a few chunks": os.urandom(300_000),
        # No window of zeros is a boundary: every chunk is cut at the maximum.
        "zeros": bytes(5 * MAX_CHUNK + 123),
        "text, repeated structure": text,
        # Past chunking.BLOCK, so candidates near a block's seam are found as in one pass.
        "random, across blocks": os.urandom(chunking.BLOCK * 2 + 77_777),
        # Past chunking.PARALLEL_FROM: searched by several threads, span by span.
        "random, searched in parallel": os.urandom(chunking.PARALLEL_FROM + 3 * chunking.BLOCK
                                                   + 12_345),
    }


@pytest.mark.parametrize("name", list(shapes()))
def test_file_hash_is_hf_xets(name: str, tmp_path: Path) -> None:
    data = shapes()[name]
    path = tmp_path / "file.bin"
    path.write_bytes(data)
    [info] = hf_xet.hash_files([str(path)])
    assert info.file_size == len(data)
    assert xet_file_hash(data) == info.hash


def test_boundaries_keep_the_sizes() -> None:
    data = os.urandom(3_000_000)
    ends = chunking.boundaries(data)
    sizes = [b - a for a, b in zip([0, *ends[:-1]], ends, strict=True)]
    assert ends[-1] == len(data)
    assert all(MIN_CHUNK <= s <= MAX_CHUNK for s in sizes[:-1])
    assert 0 < sizes[-1] <= MAX_CHUNK
    assert 20 < len(sizes) < 90  # about 64 KiB on average
    # Content-defined: bytes put before the data move the first boundaries, not the rest.
    shifted = chunking.boundaries(os.urandom(1000) + data)
    assert len({e - 1000 for e in shifted} & set(ends)) >= len(ends) - 3
