"""llama.cpp / `Llama.from_pretrained(id, filename=...)`: one quantization, all its parts.

GGUF repos ship one file per quantization (Q4_K_M, Q8_0, ...), large ones split as
`name-Q4_K_M-00001-of-00003.gguf` (llama.cpp's `gguf-split`), sometimes in a folder per
quant. A user runs one: `variant` names it, and every part of it is locked; llama.cpp loads
the other parts of a split from beside the first. With one quantization, `variant` may be
left out. A vision model's projector (`mmproj-*.gguf`, llama.cpp's `--mmproj`, which
`Llama.from_pretrained(..., clip_model_path=...)` and llama-server's `-hf` fetch beside the
model) is no quantization of the model: it is locked with whichever one is chosen
(`mmproj = false` on the entry leaves it out).
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


def is_projector(path: str) -> bool:
    return path.rsplit("/", 1)[-1].lower().startswith("mmproj")


def select(paths: frozenset[str], read: Read, variant: str | None,
           mmproj: bool = True) -> Choice:
    projectors = sorted(p for p in paths if p.endswith(".gguf") and is_projector(p))
    ggufs = sorted(p for p in paths if p.endswith(".gguf") and not is_projector(p))
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
