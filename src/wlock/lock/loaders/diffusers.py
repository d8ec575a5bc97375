"""`DiffusionPipeline.from_pretrained(id, variant=...)`: model_index.json's components.

Mirrors diffusers' `DiffusionPipeline.download`: it reads model_index.json, takes the folder
of every component whose entry names a library and a class (`"unet": ["diffusers",
"UNet2DConditionModel"]`; `[null, null]` is an absent component), and in each folder the
configs and one format of the weights, safetensors first, the `variant` file where the
component has one (`variant_compatible_siblings` falls back to the default weights for a
component without it). Top-level single-file checkpoints (`v1-5-pruned.ckpt`) are for
`from_single_file`, not for the pipeline: not locked.

A repo of one component (a VAE, a ControlNet, a UNet: its `config.json` names the model
class in `_class_name`) is loaded by that class's `from_pretrained` (`ModelMixin`,
`_get_model_file`): its configs and one format of the weights at the top, the `variant` file
where there is one. A repo of LoRA weights is loaded by `load_lora_weights(id)`, which reads
`pytorch_lora_weights.safetensors`, else `pytorch_lora_weights.bin`, else the one
`.safetensors` file the repo has (`lora_base._best_guess_weight_name`); another file is
named with `weight_name` and added with `include`.
"""

from __future__ import annotations

import json

from wlock.lock.loaders import Choice, LoaderProblem, Read, unread, weights

NAMES = ("diffusion_pytorch_model.safetensors", "model.safetensors",
         "diffusion_pytorch_model.bin", "pytorch_model.bin")


LORA_NAMES = ("pytorch_lora_weights.safetensors", "pytorch_lora_weights.bin")


def select(paths: frozenset[str], read: Read, variant: str | None) -> Choice:
    if "model_index.json" not in paths:
        return _one_component(paths, read, variant)
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


def _one_component(paths: frozenset[str], read: Read, variant: str | None) -> Choice:
    """A repo of one model (its class in config.json's `_class_name`) or of LoRA weights."""
    kept = {p for p in paths if unread(p) is None}
    if "config.json" in paths:
        try:
            config = json.loads(read("config.json"))
        except ValueError:
            config = None
        if isinstance(config, dict) and isinstance(config.get("_class_name"), str):
            chosen = weights(paths, "", NAMES, read, variant)
            notes: tuple[str, ...] = ()
            if chosen is None and variant:
                chosen = weights(paths, "", NAMES, read)
                if chosen:
                    notes = (f"no {variant!r} variant of {config['_class_name']}: its "
                             "default weights are locked, as diffusers loads them",)
            if chosen is None:
                raise LoaderProblem(
                    f"config.json names {config['_class_name']}, but the repo has none of "
                    f"its weights ({', '.join(NAMES)})",
                    "Lock the repo with `loader = \"all\"`.")
            return Choice(frozenset(kept | set(chosen)), notes=notes)
    lora = next((name for name in LORA_NAMES if name in paths), None)
    if lora is None:
        top = [p for p in paths if "/" not in p and p.endswith(".safetensors")]
        lora = top[0] if len(top) == 1 else None
    if lora is not None:
        return Choice(frozenset(kept | {lora}), notes=(
            f"LoRA weights: {lora}, as load_lora_weights reads them (another file: "
            "`include` it and pass its weight_name)",))
    raise LoaderProblem(
        "no model_index.json, no config.json naming a model class, no LoRA weights: not a "
        "repo diffusers loads",
        "Use `loader = \"all\"` for this entry, or the loader of its library.")
