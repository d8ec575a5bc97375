"""A xorb's chunks in the spec's byte format, as the CAS serves their ranges.

Each chunk is an 8-byte header then its bytes: version (0), the stored size in 3 bytes
little-endian, the compression scheme, the unpacked size in 3 bytes. The schemes are
xet-core's (xet_core_structures/src/xorb_object/compression_scheme.rs):

- 0, none: the bytes as they are;
- 1, LZ4: one LZ4 *frame* (lz4_flex's FrameEncoder), not a bare block;
- 2, byte grouping then LZ4: the chunk's bytes regrouped by their offset modulo 4 (all the
  first bytes of each 4, then the second ones...; a chunk whose size is not a multiple of
  4 puts its last 1-3 bytes at the end of the first groups, bg4.rs's `bg4_split`), then LZ4
  as in 1. Floats' exponent bytes then sit together and compress.

A chunk that decodes to another size than its header says, a header with another version or
an unknown scheme, or a region that ends inside a chunk is a XorbFormatError: the caller
refuses those bytes, it never guesses.
"""

from __future__ import annotations

from collections.abc import Iterator

import lz4.frame
import numpy as np

HEADER_LEN = 8
NONE, LZ4, BG4_LZ4 = 0, 1, 2


class XorbFormatError(ValueError):
    """Bytes that are not chunks in the spec's format."""


def header(stored: int, scheme: int, unpacked: int) -> bytes:
    return (b"\x00" + stored.to_bytes(3, "little") + bytes([scheme])
            + unpacked.to_bytes(3, "little"))


def bg4_split(data: bytes | memoryview) -> bytes:
    """Group the bytes by their offset modulo 4 (the first group first)."""
    view = np.frombuffer(data, dtype=np.uint8)
    return b"".join(view[k::4].tobytes() for k in range(4))


def bg4_regroup(grouped: bytes) -> bytes:
    """bg4_split's inverse."""
    n = len(grouped)
    split, rem = divmod(n, 4)
    view = np.frombuffer(grouped, dtype=np.uint8)
    out = np.empty(n, dtype=np.uint8)
    at = 0
    for k in range(4):
        size = split + (1 if k < rem else 0)
        out[k::4] = view[at:at + size]
        at += size
    return out.tobytes()


def encode(data: bytes | memoryview, scheme: int) -> bytes:
    """One chunk, header included, stored with `scheme`."""
    if scheme == NONE:
        body = bytes(data)
    elif scheme == LZ4:
        body = lz4.frame.compress(bytes(data))
    elif scheme == BG4_LZ4:
        body = lz4.frame.compress(bg4_split(data))
    else:
        raise ValueError(f"no compression scheme {scheme}")
    return header(len(body), scheme, len(data)) + body


def decode(region: bytes | memoryview) -> Iterator[bytes]:
    """The unpacked bytes of each chunk in a run of serialized chunks, in order."""
    view = memoryview(region)
    at = 0
    while at < len(view):
        if at + HEADER_LEN > len(view):
            raise XorbFormatError(f"a chunk header cut short at byte {at}")
        head = bytes(view[at:at + HEADER_LEN])
        version, scheme = head[0], head[4]
        stored = int.from_bytes(head[1:4], "little")
        unpacked = int.from_bytes(head[5:8], "little")
        if version != 0:
            raise XorbFormatError(f"chunk version {version} at byte {at} (0 is the only one)")
        body = view[at + HEADER_LEN:at + HEADER_LEN + stored]
        if len(body) != stored:
            raise XorbFormatError(f"a chunk of {stored} bytes cut short at byte {at}")
        try:
            if scheme == NONE:
                data = bytes(body)
            elif scheme == LZ4:
                data = lz4.frame.decompress(bytes(body))
            elif scheme == BG4_LZ4:
                data = bg4_regroup(lz4.frame.decompress(bytes(body)))
            else:
                raise XorbFormatError(f"unknown compression scheme {scheme} at byte {at}")
        except RuntimeError as e:  # lz4's answer to a frame it cannot read
            raise XorbFormatError(f"a chunk at byte {at} does not decompress ({e})") from None
        if len(data) != unpacked:
            raise XorbFormatError(f"a chunk at byte {at} unpacks to {len(data)} bytes, its "
                                  f"header says {unpacked}")
        yield data
        at += HEADER_LEN + stored
