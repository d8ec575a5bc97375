"""`PeftModel.from_pretrained(base, id)` / `AutoPeftModelFor...(id)`: the adapter and its base.

Mirrors peft's `PeftConfig.from_pretrained` (adapter_config.json) and `load_peft_weights`
(adapter_model.safetensors, else adapter_model.bin), for the first adapter and for each
other one `save_pretrained` wrote into a folder of its own (`others`); every other file is
kept (the tokenizer AutoPeftModel loads when the adapter carries one, in any folder) but what
`loaders.unread` names (the Trainer's `checkpoint-N/` folders and optimizer state, other
formats). The base model named by `base_model_name_or_path` is a requirement, at the
adapter's `revision` when it names one: AutoPeftModel loads it with `revision=config.revision`,
which is `main` when unset.
"""

from __future__ import annotations

import json

from wlock.lock.loaders import Choice, LoaderProblem, Read, Requirement, beside, weights
from wlock.lock.names import ref_problem, repo_id_problem

NAMES = ("adapter_model.safetensors", "adapter_model.bin")


def others(paths: frozenset[str], read: Read, folder: str = "") -> list[str]:
    """The weights of every other adapter beside the one in `folder`: `PeftModel.
    save_pretrained` writes each adapter but `default` into a folder named after it
    (`<name>/adapter_config.json` + `<name>/adapter_model.safetensors`, peft_model.py), and
    `load_adapter(..., subfolder=name)` reads them as it reads the first (`load_peft_weights`:
    safetensors, else the `.bin`). Nested deeper is not a layout peft writes."""
    found: list[str] = []
    for config in sorted(p for p in paths if p.endswith("/adapter_config.json")
                         and p.startswith(folder) and p[len(folder):].count("/") == 1):
        found += weights(paths, config.removesuffix("adapter_config.json"), NAMES, read) or []
    return found


def select(paths: frozenset[str], read: Read, variant: str | None,
           named: str | None = None) -> Choice:
    """`named`: the base as weights.toml's `base` names it (`org/name@ref`), which wins over
    adapter_config.json's (a local folder the adapter was trained from, often)."""
    # `save_pretrained(selected_adapters=[...])` without "default" writes no adapter at the
    # root, only each named one in its folder: the first of those names the base.
    folders = sorted(p for p in paths if p.endswith("/adapter_config.json") and
                     p.count("/") == 1)
    first = "adapter_config.json" if "adapter_config.json" in paths else next(iter(folders),
                                                                               None)
    if first is None:
        raise LoaderProblem("no adapter_config.json: the repo is not a peft adapter",
                            "Use `loader = \"transformers\"` or `\"all\"` for this entry.")
    try:
        config = json.loads(read(first))
        base, revision = config.get("base_model_name_or_path"), config.get("revision")
    except (ValueError, AttributeError) as e:
        raise LoaderProblem(f"{first} cannot be read ({e})",
                            "Lock the repo with `loader = \"all\"`.") from None
    chosen = weights(paths, "", NAMES, read) if first == "adapter_config.json" else []
    if chosen is None:
        raise LoaderProblem("no adapter_model.safetensors or adapter_model.bin",
                            "The repo is not a loadable adapter at this ref.")
    kept = beside(paths, [*chosen, *others(paths, read)])
    if named is not None:
        repo, _, ref = named.partition("@")
        return Choice(kept, requires=(Requirement(
            repo, ref or "main", "base model of the adapter (weights.toml's `base`"
            + (f", ref {ref})" if ref else ", no ref: main)")),))
    hint = ("The name comes from adapter_config.json's `base_model_name_or_path`. If it "
            "is a local folder, name the base on the entry in weights.toml: "
            'base = "org/name@ref".')
    if not isinstance(base, str) or repo_id_problem(base) is not None:
        return Choice(kept, notes=(f"adapter_config.json names the base {base!r}, which is not "
                                   "a Hub repo id (a local path?): it is not locked; name it "
                                   'with base = "org/name@ref" on the entry',))
    ref = revision if isinstance(revision, str) and revision and ref_problem(revision) is None \
        else "main"
    why = "base model of the adapter (adapter_config.json" + (
        f", revision {ref})" if ref != "main" else ", no revision: main)")
    return Choice(kept, requires=(Requirement(base, ref, why, hint=hint),))
