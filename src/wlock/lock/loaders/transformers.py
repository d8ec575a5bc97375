"""`AutoModel.from_pretrained(id)`: one format of the weights, and the files beside them.

Mirrors transformers' `modeling_utils._get_resolved_checkpoint_files`: model.safetensors, else
its index and the shards the index names, else pytorch_model.bin, else its index; never the
TF (`tf_model.h5`), Flax (`flax_model.msgpack`), rust-bert (`rust_model.ot`), ONNX, Core ML,
OpenVINO or `original/` copies, which `from_pretrained` does not read. Beside the weights,
every config-like file at the top (config, generation config, tokenizer and processor files,
chat templates, remote code), as `cached_file` asks for them by name: vLLM's
`allow_patterns` ("*.safetensors" of one kind, "*.json", "*.txt", tokenizer models) is the
same choice. Remote code that `auto_map` takes from another repo (`org/repo--module.Class`,
`dynamic_module_utils.get_class_from_dynamic_module`) is a requirement, at `main` as
transformers fetches it (`code_revision` defaults to None).
"""

from __future__ import annotations

import json

from wlock.lock.loaders import Choice, LoaderProblem, Read, Requirement, small_files, weights
from wlock.lock.names import repo_id_problem

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
    requires, code = remote_code(paths, folder, read)
    return Choice(frozenset(small_files(paths, folder)) | frozenset(chosen),
                  requires=requires, notes=notes, code=code)


def remote_code(paths: frozenset[str], folder: str, read: Read
                ) -> tuple[tuple[Requirement, ...], tuple[str, ...]]:
    """The repos whose code `auto_map` in config.json or tokenizer_config.json names, and
    every class it names (this repo's and others')."""
    found: dict[str, Requirement] = {}
    code: set[str] = set()
    for name in ("config.json", "tokenizer_config.json"):
        path = folder + name
        if path not in paths:
            continue
        try:
            data = json.loads(read(path))
        except ValueError:
            continue  # transformers would fail on it too; the lock still records it
        auto_map = data.get("auto_map") if isinstance(data, dict) else None
        if not isinstance(auto_map, dict):
            continue
        for value in auto_map.values():
            for reference in value if isinstance(value, list) else [value]:
                if isinstance(reference, str) and reference:
                    code.add(reference)
                if not isinstance(reference, str) or "--" not in reference:
                    continue
                repo = reference.split("--")[0]
                if repo_id_problem(repo) is None and repo not in found:
                    found[repo] = Requirement(
                        repo, "main", f"remote code named in {path}'s auto_map ({reference})",
                        include=("*.py",))
    return tuple(found.values()), tuple(sorted(code))
