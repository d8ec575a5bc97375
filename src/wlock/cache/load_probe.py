"""The child of `wlock check --load`: load one locked entry offline with its own library.

Run as a script by the project's Python (`python load_probe.py '<entry as JSON>'`), which may
not have wlock installed: this file imports the standard library and the ML libraries only.
Its last line on stdout is one JSON object: `{"ok": true, "did": [...]}` or
`{"ok": false, "error": "<the library's exception>", "wanted": "<file>" | null}`.

Weights are not materialized where the library lets us stop before it: transformers runs its
whole `from_pretrained` (config, class, remote code, the checkpoint files it resolves, with its
own errors) and is stopped right after it has resolved its checkpoint files, whose safetensors
headers are then read; GGUF files are opened by llama.cpp's reader (a memory map of the
header). sentence-transformers and diffusers offer no such stop: they load on CPU for real.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import sys
from collections.abc import Callable
from typing import Any

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json",
                   "spiece.model", "tokenizer.model", "sentencepiece.bpe.model")
PROCESSOR_FILES = ("processor_config.json", "preprocessor_config.json")
# The suffixes of the files a library's error may name.
SUFFIXES = ("safetensors", "bin", "json", "gguf", "txt", "model", "parquet", "pt", "pth",
            "py", "jinja", "npy", "npz", "onnx", "arrow", "csv", "jsonl")

# Files asked of huggingface_hub that it could not give (offline: not in the cache).
_missed: list[str] = []


class _Resolved(Exception):  # a signal, not an error
    """Raised in place of loading the weights once the library has named its files."""

    def __init__(self, files: list[str]) -> None:
        super().__init__(files)
        self.files = files


def _lib(name: str) -> Any:
    """A library of the project's environment, whatever its release (typed as Any: the
    probe runs against the releases the project has, not the ones wlock was checked with)."""
    return importlib.import_module(name)


def _watch_downloads() -> None:
    """Note every file huggingface_hub was asked for and could not give. Every library's
    `hf_hub_download` ends in this module-level function, looked up at call time."""
    file_download = _lib("huggingface_hub.file_download")

    real = file_download._hf_hub_download_to_cache_dir

    def watched(*args: Any, **kwargs: Any) -> Any:
        try:
            return real(*args, **kwargs)
        except Exception:
            name = kwargs.get("filename") or ""
            sub = kwargs.get("subfolder") or ""
            _missed.append(f"{sub}/{name}" if sub else name)
            raise

    file_download._hf_hub_download_to_cache_dir = watched


def _tensors(files: list[str]) -> int:
    """Tensors named by the safetensors headers of `files` (pickles are not opened)."""
    from safetensors import safe_open

    count = 0
    for path in files:
        if path.endswith(".safetensors"):
            with safe_open(path, framework="numpy") as f:
                count += len(list(f.keys()))
    return count


def _model_class(entry: dict[str, Any], config: Any) -> Any:
    transformers = _lib("transformers")

    auto_map = getattr(config, "auto_map", None) or {}
    if entry["remote_code"] and auto_map:
        names = [k for k in auto_map if k.startswith("AutoModel")] or list(auto_map)
        return getattr(transformers, names[0], transformers.AutoModel)
    for arch in getattr(config, "architectures", None) or ():
        if hasattr(transformers, arch):
            return getattr(transformers, arch)
    return transformers.AutoModel


def load_transformers(entry: dict[str, Any], did: list[str]) -> None:
    transformers = _lib("transformers")
    modeling_utils = _lib("transformers.modeling_utils")

    kw: dict[str, Any] = {"revision": entry["revision"]}
    if entry["remote_code"]:
        kw["trust_remote_code"] = True
    files = set(entry["files"])
    config = transformers.AutoConfig.from_pretrained(entry["id"], **kw)
    did.append("config")
    if files & set(TOKENIZER_FILES):
        transformers.AutoTokenizer.from_pretrained(entry["id"], **kw)
        did.append("tokenizer")
    if files & set(PROCESSOR_FILES):
        transformers.AutoProcessor.from_pretrained(entry["id"], **kw)
        did.append("processor")
    if not any(p.endswith((".safetensors", ".bin", ".pt", ".pth", ".gguf")) for p in files):
        return  # a tokenizer or config repo: nothing to load weights from
    resolve: Callable[..., Any] = modeling_utils._get_resolved_checkpoint_files

    def stop_after(*args: Any, **kwargs: Any) -> Any:
        found, _ = resolve(*args, **kwargs)
        raise _Resolved(list(found or ()))

    modeling_utils._get_resolved_checkpoint_files = stop_after
    if entry["variant"]:
        kw["variant"] = entry["variant"]
    try:
        _model_class(entry, config).from_pretrained(entry["id"], **kw)
    except _Resolved as resolved:
        n = len(resolved.files)
        did.append(f"weights ({n} file{'s' * (n != 1)}, {_tensors(resolved.files)} tensors "
                   "in their headers)")
    else:  # a version that resolves elsewhere: the model was loaded for real
        did.append("weights (loaded)")


def load_sentence_transformers(entry: dict[str, Any], did: list[str]) -> None:
    st = _lib("sentence_transformers")

    kind = "SentenceTransformer"
    if "modules.json" not in entry["files"]:
        kind = "CrossEncoder"
    path = _cached("config_sentence_transformers.json", entry)
    if path:
        with open(path, encoding="utf-8") as f:
            kind = json.load(f).get("model_type") or kind
    cls = getattr(st, kind, st.SentenceTransformer)
    cls(entry["id"], revision=entry["revision"], device="cpu",
        trust_remote_code=entry["remote_code"])
    did.append(f"{cls.__name__} (weights loaded on CPU)")


def load_diffusers(entry: dict[str, Any], did: list[str]) -> None:
    diffusers = _lib("diffusers")

    kw: dict[str, Any] = {"revision": entry["revision"]}
    if entry["variant"]:
        kw["variant"] = entry["variant"]
    if "model_index.json" in entry["files"]:
        diffusers.DiffusionPipeline.from_pretrained(entry["id"], **kw)
        did.append("pipeline (weights loaded on CPU)")
        return
    path = _cached("config.json", entry)
    name = None
    if path:
        with open(path, encoding="utf-8") as f:
            name = json.load(f).get("_class_name")
    if name and hasattr(diffusers, name):
        getattr(diffusers, name).from_pretrained(entry["id"], **kw)
        did.append(f"{name} (weights loaded on CPU)")
        return
    # LoRA weights: a pipeline loads them; their headers are what can be read alone.
    from huggingface_hub import hf_hub_download

    weights = [p for p in entry["files"] if p.endswith(".safetensors")]
    local = [hf_hub_download(entry["id"], p, revision=entry["revision"]) for p in weights]
    did.append(f"LoRA weights ({_tensors(local)} tensors in their headers)")


def load_peft(entry: dict[str, Any], did: list[str]) -> None:
    peft = _lib("peft")
    from huggingface_hub import hf_hub_download

    peft.PeftConfig.from_pretrained(entry["id"], revision=entry["revision"])
    did.append("adapter config")
    name = next((p for p in ("adapter_model.safetensors", "adapter_model.bin")
                 if p in entry["files"]), "adapter_model.safetensors")
    path = hf_hub_download(entry["id"], name, revision=entry["revision"])
    did.append(f"adapter weights ({_tensors([path])} tensors in their headers)")


def load_gguf(entry: dict[str, Any], did: list[str]) -> None:
    gguf = _lib("gguf")
    from huggingface_hub import hf_hub_download

    for name in sorted(p for p in entry["files"] if p.endswith(".gguf")):
        reader = gguf.GGUFReader(hf_hub_download(entry["id"], name, revision=entry["revision"]))
        did.append(f"{name} ({len(reader.tensors)} tensors)")


def load_datasets(entry: dict[str, Any], did: list[str]) -> None:
    """As the README loads a locked dataset: from its snapshot, by config and split."""
    datasets = _lib("datasets")

    splits = entry["split"] or [None]
    for split in splits:
        loaded = datasets.load_dataset(entry["snapshot"], name=entry["config"], split=split)
        rows = loaded.num_rows if split else sum(loaded.num_rows.values())
        did.append(f"{entry['config'] or 'default'}/{split or 'every split'} ({rows} rows)")


def _cached(name: str, entry: dict[str, Any]) -> str | None:
    path = os.path.join(entry["snapshot"], name)
    return path if name in entry["files"] and os.path.isfile(path) else None


def _wanted(error: str, snapshot: str) -> str | None:
    """The file the load wanted and the snapshot lacks: one the error names, else one that
    huggingface_hub was asked for in vain and the error names by its base name; None rather
    than a guess (a load asks for optional files that are rightly absent)."""
    for name in re.findall(r"[\w.\-/]+\.(?:" + "|".join(SUFFIXES) + r")\b", error):
        name = name.lstrip("./")
        if "://" not in name and not os.path.exists(os.path.join(snapshot, name)):
            return str(name)
    return next((m for m in reversed(_missed) if m.rsplit("/", 1)[-1] in error), None)


LOADERS: dict[str, Callable[[dict[str, Any], list[str]], None]] = {
    "transformers": load_transformers, "sentence-transformers": load_sentence_transformers,
    "diffusers": load_diffusers, "peft": load_peft, "gguf": load_gguf,
    "datasets": load_datasets,
}


def main() -> None:
    entry = json.loads(sys.argv[1])
    did: list[str] = []
    _watch_downloads()
    try:
        LOADERS[entry["library"]](entry, did)
    except BaseException as e:  # every failure is the answer
        if isinstance(e, KeyboardInterrupt):
            raise
        error = f"{type(e).__name__}: {e}".strip()
        print(json.dumps({"ok": False, "did": did, "error": error,
                          "wanted": _wanted(error, entry["snapshot"])}))
        return
    print(json.dumps({"ok": True, "did": did}))


if __name__ == "__main__":
    main()
