"""llama.cpp / `Llama.from_pretrained(id, filename=...)`: one quantization, all its parts.

GGUF repos ship one file per quantization (Q4_K_M, Q8_0, ...), large ones split as
`name-Q4_K_M-00001-of-00003.gguf` (llama.cpp's `gguf-split`), sometimes in a folder per
quant. A user runs one: `variant` names it, and every part of it is locked; llama.cpp loads
the other parts of a split from beside the first. With one quantization, `variant` may be
left out. A vision model's projector (`mmproj-*.gguf`, llama.cpp's `--mmproj`, which
`Llama.from_pretrained(..., clip_model_path=...)` and llama-server's `-hf` fetch beside the
model) is no quantization of the model: it is locked with whichever one is chosen
(`mmproj = false` on the entry leaves it out). A projector is known by its header, as
llama.cpp's own loaders know it (`clip.cpp` reads `general.architecture = "clip"`; mtmd's
newer files say `general.type = "mmproj"`), whatever its name: `read` of a `.gguf` gives its
first bytes (`HubClient.read_file`), and the name (`mmproj*`) decides only where the header
cannot be read.
"""

from __future__ import annotations

import re

from wlock.lock.loaders import Choice, LoaderProblem, Read, beside

_QUANT = re.compile(r"(?:^|[-._/])((?:I?Q\d[A-Z0-9_]*?|[BF]F?16|F32|FP16|BF16))"
                    r"(?=(?:-\d{5}-of-\d{5})?\.gguf$|[-./])", re.IGNORECASE)
_SPLIT = re.compile(r"-\d{5}-of-\d{5}(?=\.gguf$)")


def quant_of(path: str) -> str | None:
    """The quantization a GGUF file's name says, upper case (`Q4_K_M`), or None."""
    found = _QUANT.findall(path)
    return found[-1].upper() if found else None


def is_projector(path: str, read: Read | None = None) -> bool:
    """Whether the GGUF file `path` is a vision projector: its header says so (with `read`),
    else its name starts with `mmproj`. The later parts of a split model are never read."""
    named = path.rsplit("/", 1)[-1].lower().startswith("mmproj")
    if read is None or (_SPLIT.search(path) and "-00001-of-" not in path):
        return named
    header = gguf_header(read(path))
    if header is None:
        return named
    return header.get("general.architecture") == "clip" or \
        header.get("general.type") == "mmproj" or any(k.startswith("clip.") for k in header)


def select(paths: frozenset[str], read: Read, variant: str | None,
           mmproj: bool = True) -> Choice:
    gguf_files = sorted(p for p in paths if p.endswith(".gguf"))
    kinds = {p: is_projector(p, read) for p in gguf_files}
    projectors = [p for p in gguf_files if kinds[p]]
    ggufs = [p for p in gguf_files if not kinds[p]]
    if not ggufs and not projectors:
        raise LoaderProblem("no .gguf file in the repo", "Use another loader, or `\"all\"`.")
    quants = sorted({q for p in ggufs if (q := quant_of(p))})
    if variant:
        wanted = re.compile(rf"(?:^|[-./]){re.escape(variant)}(?=[-./]|$)", re.IGNORECASE)
        chosen = [p for p in ggufs if wanted.search(p)]
        if not chosen:
            raise LoaderProblem(f"no GGUF file of the quantization {variant!r}",
                                f"The repo has: {', '.join(quants) or ', '.join(ggufs)}.")
    elif len({_SPLIT.sub("", p) for p in ggufs}) == 1:
        chosen = ggufs  # one model, maybe in parts
    else:
        raise LoaderProblem(
            f"{len(ggufs)} GGUF files ({len(quants)} quantizations): say which one to lock",
            f"Set `variant` to one of {', '.join(quants)} (`wlock add ID --variant Q4_K_M`).")
    # Every other file but what loaders.unread names (the other quantizations: `.gguf`).
    if not mmproj:
        return Choice(beside(paths, chosen), notes=(
            f"the projector(s) {', '.join(projectors)} left out (`mmproj = false`)",)
            if projectors else ())
    return Choice(beside(paths, [*chosen, *projectors]))


# GGUF's value types (ggml/include/gguf.h, enum gguf_type): fixed sizes, 8 a string, 9 an array.
_FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def gguf_header(head: bytes) -> dict[str, object] | None:
    """The metadata keys at the start of a GGUF file's first bytes `head`, with their value
    where it is a string (others: None), as far as `head` reaches; None when `head` is not a
    GGUF header (the file format: magic, version, tensor and key counts, then each key, its
    type and its value, little-endian; ggml/docs/gguf.md)."""
    import struct

    if len(head) < 24 or head[:4] != b"GGUF":
        return None
    version = struct.unpack_from("<I", head, 4)[0]
    if version not in (2, 3):
        return None
    count = struct.unpack_from("<Q", head, 16)[0]
    at, found = 24, {}

    def string(at: int) -> tuple[str, int]:
        (n,) = struct.unpack_from("<Q", head, at)
        if at + 8 + n > len(head):
            raise IndexError
        return head[at + 8:at + 8 + n].decode("utf-8", "replace"), at + 8 + n

    def skip(kind: int, at: int) -> tuple[object, int]:
        if kind in _FIXED:
            return None, at + _FIXED[kind]
        if kind == 8:
            return string(at)
        if kind == 9:
            inner, n = struct.unpack_from("<IQ", head, at)
            at += 12
            for _ in range(n):
                _, at = skip(inner, at)
                if at > len(head):
                    raise IndexError
            return None, at
        raise ValueError(kind)

    try:
        for _ in range(min(count, 4096)):
            key, at = string(at)
            (kind,) = struct.unpack_from("<I", head, at)
            value, at = skip(kind, at + 4)
            found[key] = value
    except (IndexError, ValueError, struct.error):
        pass  # the head ends mid-key, or a type no GGUF has: what was read stands
    return found
