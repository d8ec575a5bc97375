"""`SentenceTransformer(id)`: the modules `modules.json` lists, each as it loads itself.

Mirrors sentence-transformers' `SentenceTransformer._load_sbert_model`: it reads
modules.json and config_sentence_transformers.json, then loads each module from its `path`;
the `Transformer` module is a transformers model in that folder (the transformers rule
there), every other module (Pooling, Dense, Normalize) reads its folder's config and, for
Dense, `model.safetensors` else `pytorch_model.bin`. Without modules.json it builds a
transformers model with mean pooling (`_load_auto_model`). The `onnx/` and `openvino/`
exports are read only with `backend="onnx"`/`"openvino"`: not locked.
"""

from __future__ import annotations

import json

from wlock.lock.loaders import (
    Choice,
    LoaderProblem,
    Read,
    Requirement,
    small_files,
    transformers,
    weights,
)


def select(paths: frozenset[str], read: Read, variant: str | None) -> Choice:
    if "modules.json" not in paths:
        return transformers.select_in(paths, "", read, variant)
    try:
        modules = json.loads(read("modules.json"))
        listed = [(str(m.get("path", "")).strip("/"), str(m.get("type", ""))) for m in modules]
    except (ValueError, AttributeError, TypeError) as e:
        raise LoaderProblem(f"modules.json is not a list of modules ({e})",
                            "Lock the repo with `loader = \"all\"`.") from None
    kept = set(small_files(paths, ""))
    requires: list[Requirement] = []
    notes: list[str] = []
    code: list[str] = []
    for folder, kind in listed:
        prefix = f"{folder}/" if folder else ""
        if kind.endswith(".Transformer"):
            sub = transformers.select_in(paths, prefix, read, variant)
            kept |= sub.paths
            requires += [r for r in sub.requires if r not in requires]
            notes += sub.notes
            code += sub.code
        else:
            kept |= small_files(paths, prefix)
            kept |= set(weights(paths, prefix, transformers.NAMES, read) or ())
    return Choice(frozenset(kept), tuple(requires), tuple(notes), tuple(sorted(set(code))))
