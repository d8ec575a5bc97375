"""`SentenceTransformer(id)`: the modules `modules.json` lists, each as it loads itself.

Mirrors sentence-transformers' `SentenceTransformer._load_sbert_model`: it reads
modules.json and config_sentence_transformers.json, then loads each module from its `path`;
the `Transformer` module (and a sparse encoder's `MLMTransformer`) is a transformers model
in that folder (the transformers rule there), every other module (Pooling, Dense,
Normalize) reads its folder's files and, for Dense, `model.safetensors` else
`pytorch_model.bin`. A `Router` (asymmetric query/document encoders, and the sparse encoders
built on them; `Asym` before it) keeps its sub-modules in folders modules.json does not
list: `Router.load` reads `router_config.json` (else the legacy `config.json`) in its folder
and loads each of its `types` from the folder named by its id, each as a module of its own
(a Transformer, a Dense, a Router again). Every file but what `loaders.unread` names is
kept. Without modules.json it builds a transformers model with mean pooling
(`_load_auto_model`). The `onnx/` and `openvino/` exports are read only with
`backend="onnx"`/`"openvino"`: not locked.
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
    pending = [(f"{folder}/" if folder else "", kind) for folder, kind in listed]
    seen: set[str] = set()
    while pending:
        prefix, kind = pending.pop(0)
        if prefix in seen:  # a config naming a folder twice, or itself
            continue
        seen.add(prefix)
        if kind.rsplit(".", 1)[-1].endswith("Transformer"):
            # Transformer, and the sparse encoders' MLMTransformer: a transformers model
            # in that folder, loaded by from_pretrained (its variants, shards, remote code).
            sub = transformers.select_in(paths, prefix, read, variant)
            chosen |= sub.paths
            requires += [r for r in sub.requires if r not in requires]
            notes += sub.notes
            code += sub.code
        elif (routes := _routes(paths, prefix, read)) is not None:
            pending += routes
        else:
            chosen |= set(weights(paths, prefix, transformers.NAMES, read) or ())
    # Every other file, in any folder, but what loaders.unread names: a module's own files
    # (a CLIP module's preprocessor, a Router's config) are read by code no list keeps up with.
    return Choice(beside(paths, chosen), tuple(requires), tuple(notes),
                  tuple(sorted(set(code))))


def _routes(paths: frozenset[str], prefix: str, read: Read) -> list[tuple[str, str]] | None:
    """The sub-modules of a Router (or Asym) module in `prefix`: `(folder/, type)` for each of
    the `types` of its config, as `Router.load` reads them; None when the folder holds no
    such config (not a Router)."""
    for name in ("router_config.json", "config.json"):
        if prefix + name not in paths:
            continue
        try:
            types = json.loads(read(prefix + name)).get("types")
        except (ValueError, AttributeError):
            continue
        if isinstance(types, dict) and types:
            return [(f"{prefix}{str(model_id).strip('/')}/", str(kind))
                    for model_id, kind in types.items()]
    return None
