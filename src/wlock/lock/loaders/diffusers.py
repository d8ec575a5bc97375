"""`DiffusionPipeline.from_pretrained(id, variant=...)`: model_index.json's components.

Mirrors diffusers' `DiffusionPipeline.download`: it reads model_index.json, takes the folder
of every component whose entry names a library and a class (`"unet": ["diffusers",
"UNet2DConditionModel"]`; `[null, null]` is an absent component), and in each folder the
configs and one format of the weights, safetensors first, the `variant` file where the
component has one (`variant_compatible_siblings` falls back to the default weights for a
component without it). Top-level single-file checkpoints (`v1-5-pruned.ckpt`) are for
`from_single_file`, not for the pipeline: not locked.
"""

from __future__ import annotations

import json

from wlock.lock.loaders import Choice, LoaderProblem, Read, unread, weights

NAMES = ("diffusion_pytorch_model.safetensors", "model.safetensors",
         "diffusion_pytorch_model.bin", "pytorch_model.bin")


def select(paths: frozenset[str], read: Read, variant: str | None) -> Choice:
    if "model_index.json" not in paths:
        raise LoaderProblem("no model_index.json: the repo is not a diffusers pipeline",
                            "Use `loader = \"transformers\"` or `\"all\"` for this entry.")
    try:
        index = json.loads(read("model_index.json"))
        components = sorted(
            name for name, value in index.items()
            if not name.startswith("_") and isinstance(value, list) and len(value) == 2
            and value[0] is not None and value[1] is not None)
    except (ValueError, AttributeError) as e:
        raise LoaderProblem(f"model_index.json is not a pipeline index ({e})",
                            "Lock the repo with `loader = \"all\"`.") from None
    # Every file at the top and in each component's folder but what diffusers never opens
    # (loaders.unread: the other formats and variants, the top-level single-file
    # checkpoints); the folders of components the index does not name (or names
    # `[null, null]`) are not downloaded by DiffusionPipeline.download either.
    folders = {f"{name}/" for name in components}
    kept = {p for p in paths if unread(p) is None and (
        "/" not in p or p.split("/", 1)[0] + "/" in folders)}
    notes = []
    without_variant = []
    for name in components:
        prefix = f"{name}/"
        chosen = weights(paths, prefix, NAMES, read, variant)
        if chosen is None and variant:
            chosen = weights(paths, prefix, NAMES, read)
            if chosen:
                without_variant.append(name)
        kept |= set(chosen or ())
    if variant and without_variant and len(without_variant) == len(
            [c for c in components if weights(paths, f"{c}/", NAMES, read) is not None]):
        raise LoaderProblem(f"no component has the {variant!r} variant",
                            "Remove `variant`, or name one the repo has.")
    if without_variant:
        notes.append(f"no {variant!r} variant for {', '.join(without_variant)}: their "
                     "default weights are locked, as diffusers loads them")
    return Choice(frozenset(kept), notes=tuple(notes))
