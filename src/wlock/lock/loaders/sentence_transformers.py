"""`SentenceTransformer(id)`: the modules `modules.json` lists, each as it loads itself.

Mirrors sentence-transformers' `SentenceTransformer._load_sbert_model`: it reads
modules.json and config_sentence_transformers.json, then loads each module from its `path`;
the `Transformer` module is a transformers model in that folder (the transformers rule
there), every other module (Pooling, Dense, Normalize) reads its folder's files and, for
Dense, `model.safetensors` else `pytorch_model.bin`. Every file but what `loaders.unread`
names is kept. Without modules.json it builds a
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
    beside,
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
    chosen: set[str] = set()
    requires: list[Requirement] = []
    notes: list[str] = []
    code: list[str] = []
    for folder, kind in listed:
        prefix = f"{folder}/" if folder else ""
        if kind.endswith(".Transformer"):
            sub = transformers.select_in(paths, prefix, read, variant)
            chosen |= sub.paths
            requires += [r for r in sub.requires if r not in requires]
            notes += sub.notes
            code += sub.code
        else:
            chosen |= set(weights(paths, prefix, transformers.NAMES, read) or ())
    # Every other file, in any folder, but what loaders.unread names: a module's own files
    # (a CLIP module's preprocessor, a Router's config) are read by code no list keeps up with.
    return Choice(beside(paths, chosen), tuple(requires), tuple(notes),
                  tuple(sorted(set(code))))
