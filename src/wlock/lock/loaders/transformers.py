"""`AutoModel.from_pretrained(id)`: one format of the weights, and the files beside them.

Mirrors transformers' `modeling_utils._get_resolved_checkpoint_files`: model.safetensors, else
its index and the shards the index names, else pytorch_model.bin, else its index; never the
TF (`tf_model.h5`), Flax (`flax_model.msgpack`), rust-bert (`rust_model.ot`), ONNX, Core ML,
OpenVINO or `original/` copies, which `from_pretrained` does not read. Beside the weights,
every other file, in any folder (`loaders.beside`): `cached_file` asks for whatever name the
tokenizer, processor or remote code names, so only what `loaders.unread` can name is left out.
Remote code that `auto_map` takes from another repo (`org/repo--module.Class`,
`dynamic_module_utils.get_class_from_dynamic_module`) is a requirement, at `main` as
transformers fetches it (`code_revision` defaults to None).
"""

from __future__ import annotations

import json

from wlock.lock.loaders import Choice, LoaderProblem, Read, Requirement, beside, weights

NAMES = ("model.safetensors", "pytorch_model.bin")


def select(paths: frozenset[str], read: Read, variant: str | None) -> Choice:
    return select_in(paths, "", read, variant)


def select_in(paths: frozenset[str], folder: str, read: Read, variant: str | None) -> Choice:
    """The transformers rule for a model in `folder` (`""`, or `"0_Transformer/"` inside a
    sentence-transformers repo)."""
    chosen = weights(paths, folder, NAMES, read, variant)
    notes: tuple[str, ...] = ()
    if chosen is None and (gptq := autogptq(paths, folder, read)):
        chosen, notes = gptq, (f"AutoGPTQ's layout: {gptq[0]} named by quantize_config.json "
                               "(AutoGPTQForCausalLM.from_quantized reads it)",)
    if chosen is None:
        if variant:
            raise LoaderProblem(
                f"no {variant!r} variant of the weights in {folder or 'the repo'} "
                f"({', '.join(add for add in NAMES)} with .{variant})",
                "Remove `variant`, or name one the repo has.")
        chosen = []
        notes = (f"no weights transformers reads in {folder or 'the repo'}: configs and "
                 "tokenizer files only",)
    # Every file under `folder` but those transformers never opens (loaders.unread): a
    # tokenizer's `additional_chat_templates/`, a `bpe.codes`, a processor's files are read
    # by code no list of suffixes keeps up with. Remote code (auto_map) is found for every
    # loader by loaders.select.
    requires: tuple[Requirement, ...] = ()
    if folder == "" and "adapter_config.json" in paths:
        # from_pretrained then loads the base adapter_config.json names and the adapter on
        # it (modeling_utils: `find_adapter_config_file`): the base is required as peft's.
        from wlock.lock.loaders import peft

        try:
            lora = peft.select(paths, read, None)
        except LoaderProblem:
            pass  # no adapter weights: transformers fails on the full repo too
        else:
            requires, notes = lora.requires, (*notes, *lora.notes)
    return Choice(beside(paths, [*chosen, *adapter(paths, folder, read)], folder),
                  requires=requires, notes=notes)


def adapter(paths: frozenset[str], folder: str, read: Read) -> list[str]:
    """A PEFT adapter uploaded beside the model (a merged model with its LoRA files): with
    peft installed, `from_pretrained` loads it whenever adapter_config.json is there
    (`find_adapter_config_file`, then `load_adapter` with `load_peft_weights`), so its
    weights are read too, and every other adapter's beside it."""
    from wlock.lock.loaders import peft

    if folder + "adapter_config.json" not in paths:
        return []
    return (weights(paths, folder, peft.NAMES, read) or []) + peft.others(paths, read, folder)


def autogptq(paths: frozenset[str], folder: str, read: Read) -> list[str] | None:
    """The older AutoGPTQ layout (`quantize_config.json` + `gptq_model-4bit-128g.safetensors`,
    as thousands of quantized repos are): `BaseGPTQForCausalLM.from_quantized` (auto_gptq
    0.7, modeling/_base.py) takes `model_basename` from quantize_config.json's
    `model_file_base_name`, else tries `gptq_model-{bits}bit-{group_size}g` and `model`, each
    with `.safetensors` (then `.bin`, `.pt` when safetensors are not asked for). None when the
    repo is not that layout."""
    config_path = folder + "quantize_config.json"
    if config_path not in paths:
        return None
    try:
        config = json.loads(read(config_path))
    except ValueError:
        return None
    if not isinstance(config, dict):
        return None
    named = config.get("model_file_base_name")
    bases = [named] if isinstance(named, str) and named else [
        f"gptq_model-{config.get('bits')}bit-{config.get('group_size')}g", "model"]
    for base in bases:
        for suffix in (".safetensors", ".bin", ".pt"):
            if folder + base + suffix in paths:
                return [folder + base + suffix]
    return None


