"""The chat templates in a GGUF file's header, read as llama.cpp reads its metadata.

The format (ggml/docs/gguf.md): `GGUF`, a version (llama.cpp reads 2 and 3), the tensor and
key counts, then each key: its name, its type and its value, little-endian, or big-endian
after the same magic: gguf-py's `GGUFReader` (0.10 to 0.19) takes a version whose low 16 bits
are zero as the other byte order and reads the whole header so, and so does this. The templates
are the string values of `tokenizer.chat_template` and `tokenizer.chat_template.<name>`;
everything else is passed over (a vocabulary's string array by its lengths, read through the
range reader's blocks: a few MB of a file of many GB). A header that cannot be read to its
last key raises Unjudged: its templates are unknown.
"""

from __future__ import annotations

import struct

from wlock.scan.budget import Source, Unjudged
from wlock.scan.template import MAX_TEMPLATE

TEMPLATE_KEY = "tokenizer.chat_template"
# The size of each fixed-size value type: uint8, int8, uint16, int16, uint32, int32,
# float32, bool, (8: string, 9: array), uint64, int64, float64.
_FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9
MAX_KEYS = 1_000_000
MAX_KEY = 64 * 1024


def is_gguf(head: bytes) -> bool:
    return head[:4] == b"GGUF"


def chat_templates(src: Source) -> list[tuple[str, str]]:
    """(key, template) for every chat template in the header read from `src` (at the file's
    start); [] for a file neither llama.cpp nor gguf-py reads as GGUF."""
    if src.read(4) != b"GGUF":
        return []
    raw = src.read(4)
    order = "<"
    version: int = struct.unpack("<I", raw)[0]
    if version & 0xFFFF == 0:  # gguf-py: a file of the other byte order
        order = ">"
        version = struct.unpack(">I", raw)[0]
    if version not in (2, 3):
        return []  # llama.cpp and gguf-py refuse the file: nothing of it is rendered
    src.read(8)  # the tensor count
    keys = _u64(src, order)
    if keys > MAX_KEYS:
        raise Unjudged(f"a GGUF header of {keys:,} keys")
    found = []
    for _ in range(keys):
        src.budget.opcode()
        key = _string(src, MAX_KEY, order).decode("utf-8", "replace")
        kind = _u32(src, order)
        if key.startswith(TEMPLATE_KEY) and kind == _STRING:
            text = _string(src, 4 * MAX_TEMPLATE, order)
            found.append((key, text.decode("utf-8", "replace")))
        else:
            _skip(src, kind, 0, order)
    return found


def _skip(src: Source, kind: int, depth: int, order: str) -> None:
    if kind in _FIXED:
        src.skip(_FIXED[kind])
    elif kind == _STRING:
        src.skip(_u64(src, order))
    elif kind == _ARRAY and depth < 8:
        item, count = _u32(src, order), _u64(src, order)
        if item in _FIXED:
            src.skip(_FIXED[item] * count)
            return
        for _ in range(count):
            src.budget.opcode()
            _skip(src, item, depth + 1, order)
    else:
        raise Unjudged(f"a GGUF value of type {kind}, which llama.cpp does not read")


def _string(src: Source, limit: int, order: str) -> bytes:
    n = _u64(src, order)
    if n > limit:
        raise Unjudged(f"a GGUF string of {n:,} bytes where at most {limit:,} were expected")
    return src.read(n)


def _u32(src: Source, order: str) -> int:
    value: int = struct.unpack(order + "I", src.read(4))[0]
    return value


def _u64(src: Source, order: str) -> int:
    value: int = struct.unpack(order + "Q", src.read(8))[0]
    return value
