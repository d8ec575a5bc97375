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

from wlock.lock.loaders import Choice, LoaderProblem, Read, beside, weights

NAMES = ("model.safetensors", "pytorch_model.bin")


def select(paths: frozenset[str], read: Read, variant: str | None) -> Choice:
    return select_in(paths, "", read, variant)


def select_in(paths: frozenset[str], folder: str, read: Read, variant: str | None) -> Choice:
    """The transformers rule for a model in `folder` (`""`, or `"0_Transformer/"` inside a
    sentence-transformers repo)."""
    chosen = weights(paths, folder, NAMES, read, variant)
    notes: tuple[str, ...] = ()
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
    return Choice(beside(paths, chosen, folder), notes=notes)


