"""The child of `wlock check --load`: load one locked entry offline the way code loads it.

Run as a script by the project's Python (`python load_probe.py '<entry as JSON>' ANSWER`, or
`python load_probe.py --serve MODULES ANSWERS` for many entries: `serve`),
which may not have wlock installed: this file imports the standard library and the ML
libraries only. Its answer is one JSON object written to the file ANSWER, never to stdout,
where the library prints what it likes (a `[y/N]` prompt, a load report):
`{"ok": bool, "did": [...], "error": str | None, "wanted": str | None, "asked": [...]}`.

Every load goes through the library's own entry point, by repo id at the locked commit, so
the library decides what it reads; the lock's file list only says which GGUF files and
adapters the entry holds (issue 57). `asked` lists the files huggingface_hub was asked for
and could not give (offline: the cache lacks them); the parent compares them with what the
lock leaves out.

- transformers (4.57 and 5.x): `AutoConfig`; the tokenizer and processor whenever
  transformers' own `pipeline()` would load them (the config's class in `TOKENIZER_MAPPING`,
  `PROCESSOR_MAPPING`, `IMAGE_PROCESSOR_MAPPING`, `FEATURE_EXTRACTOR_MAPPING`); then the
  model class's `from_pretrained`. On transformers 5 the weights' tensors are made on the
  meta device inside transformers' own load (`core_model_loading._materialize_copy`): every
  key is renamed, converted and its shape compared with what the class builds by
  transformers itself, and no weight byte is read. Elsewhere the weights load on CPU.
- peft: the `AutoPeftModelFor...` of the adapter's task (its base by
  `base_model_name_or_path`, as code loads it), or `PeftModel.from_pretrained` on the base
  weights.toml names; then every other adapter of the repo by `load_adapter`. The base's
  weights load on CPU (peft puts its layers on real tensors).
- sentence-transformers, diffusers: the library's class, on CPU (neither has a load that
  stops before the weights).
- gguf: every GGUF file of the entry (found by its magic, whatever its name) and each split
  part its `split.count` names (llama.cpp's `llama_split_path`), through gguf-py's reader.
- datasets: `load_dataset(snapshot, config, split=...)` per locked split, as the README loads.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import sys
from collections.abc import Callable
from typing import Any

# The suffixes of the files a library's error may name.
SUFFIXES = ("safetensors", "bin", "json", "gguf", "txt", "model", "parquet", "pt", "pth",
            "py", "jinja", "npy", "npz", "onnx", "arrow", "csv", "jsonl")
# peft's task types -> the AutoPeftModel class code loads such an adapter with (peft/auto.py).
PEFT_AUTO = {"CAUSAL_LM": "AutoPeftModelForCausalLM", "SEQ_2_SEQ_LM": "AutoPeftModelForSeq2SeqLM",
             "SEQ_CLS": "AutoPeftModelForSequenceClassification",
             "TOKEN_CLS": "AutoPeftModelForTokenClassification",
             "QUESTION_ANS": "AutoPeftModelForQuestionAnswering",
             "FEATURE_EXTRACTION": "AutoPeftModelForFeatureExtraction"}

# (repo id, path) of every file asked of huggingface_hub that it could not give.
_missed: list[tuple[str, str]] = []
_weights_on_meta = False


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
        name = kwargs.get("filename") or ""
        sub = kwargs.get("subfolder") or ""
        asked = (str(kwargs.get("repo_id") or ""), f"{sub}/{name}" if sub else name)
        try:
            return real(*args, **kwargs)
        except Exception:
            _missed.append(asked)
            raise

    file_download._hf_hub_download_to_cache_dir = watched


def _weights_without_bytes() -> None:
    """transformers 5: make each checkpoint tensor on the meta device where transformers
    materializes it, so its own load renames, converts and compares shapes without reading
    a weight. A version without that step loads the weights for real."""
    global _weights_on_meta
    try:
        loading = _lib("transformers.core_model_loading")
    except ImportError:
        return
    real = getattr(loading, "_materialize_copy", None)
    if real is None:
        return
    torch = _lib("torch")

    def on_meta(tensor: Any, device: Any = None, dtype: Any = None) -> Any:
        if isinstance(tensor, torch.Tensor) or not hasattr(tensor, "get_shape"):
            return real(tensor, device, dtype)
        source = getattr(torch, _ST_DTYPES.get(tensor.get_dtype(), "float32"))
        return torch.empty(tensor.get_shape(), dtype=dtype or source, device="meta")

    loading._materialize_copy = on_meta
    _weights_on_meta = True


# safetensors' dtype names -> torch's.
_ST_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
              "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8",
              "BOOL": "bool", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}


class _Loaded(Exception):  # a signal, not an error
    """Raised once transformers has loaded and checked every weight, before the steps that
    need real tensors (kernels, moving to a device)."""

    def __init__(self, info: Any) -> None:
        super().__init__("loaded")
        self.info = info


def _stop_after_checks() -> Callable[[], None]:
    """Stop `from_pretrained` right after `_finalize_model_loading` (transformers 5), where
    a size mismatch has raised and missing keys are known. Returns the undo."""
    modeling_utils = _lib("transformers.modeling_utils")
    cls = modeling_utils.PreTrainedModel
    real = cls.__dict__.get("_finalize_model_loading")
    if real is None:
        return lambda: None
    finalize = real.__func__ if isinstance(real, staticmethod) else real

    def finalized(*args: Any, **kwargs: Any) -> Any:
        info = finalize(*args, **kwargs)
        raise _Loaded(info)

    cls._finalize_model_loading = staticmethod(finalized)
    return lambda: setattr(cls, "_finalize_model_loading", real)


def _listed(path: str, entry: dict[str, Any]) -> bool:
    """Whether the repo has `path` at the locked commit, as the lock lists it (its files and
    what it left out, a folder written `onnx/`)."""
    return any(path == p or (p.endswith("/") and path.startswith(p)) for p in entry["listing"])


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


def _mapped(config: Any, *names: str) -> bool:
    auto = _lib("transformers.models.auto")
    for name in names:
        mapping = getattr(auto, name, None)
        try:
            if mapping is not None and type(config) in mapping:
                return True
        except (KeyError, ValueError):
            continue
    return False


def load_transformers(entry: dict[str, Any], did: list[str]) -> None:
    transformers = _lib("transformers")

    kw: dict[str, Any] = {"revision": entry["revision"],
                          "trust_remote_code": bool(entry["remote_code"])}
    config = transformers.AutoConfig.from_pretrained(entry["id"], **kw)
    did.append("config")
    # pipeline(): load_tokenizer / load_processor / load_image_processor /
    # load_feature_extractor, decided by the library's own mappings.
    if _mapped(config, "TOKENIZER_MAPPING") or getattr(config, "tokenizer_class", None):
        before = len(_missed)
        try:
            transformers.AutoTokenizer.from_pretrained(entry["id"], **kw)
        except Exception:
            if any(_listed(path, entry) for repo, path in _missed[before:]
                   if repo == entry["id"]):
                raise
            # None of the files it asked for is in the repo as the lock lists it: the repo
            # ships no tokenizer (transformers 4.x raises; 5.x builds an empty one).
            did.append("no tokenizer in the repo")
        else:
            did.append("tokenizer")
    if _mapped(config, "PROCESSOR_MAPPING"):
        transformers.AutoProcessor.from_pretrained(entry["id"], **kw)
        did.append("processor")
    elif _mapped(config, "IMAGE_PROCESSOR_MAPPING"):
        transformers.AutoImageProcessor.from_pretrained(entry["id"], **kw)
        did.append("image processor")
    elif _mapped(config, "FEATURE_EXTRACTOR_MAPPING"):
        transformers.AutoFeatureExtractor.from_pretrained(entry["id"], **kw)
        did.append("feature extractor")
    if entry["variant"]:
        kw["variant"] = entry["variant"]
    did.append(_load_model(lambda: _model_class(entry, config).from_pretrained(
        entry["id"], **kw)))


def _load_model(load: Callable[[], Any]) -> str:
    """Run a transformers `from_pretrained`, stopped once its weights are checked; what was
    proven, in words."""
    undo = _stop_after_checks() if _weights_on_meta else (lambda: None)
    try:
        load()
    except _Loaded as loaded:
        missing = sorted(getattr(loaded.info, "missing_keys", ()) or ())
        said = "weights (every tensor's shape checked by transformers on the meta device"
        if missing:
            said += f"; {len(missing)} not in the checkpoint, initialized: {', '.join(missing[:3])}"
        return said + ")"
    finally:
        undo()
    return "weights (loaded on CPU)"


def _peft_config(source: str, revision: str | None) -> Any:
    peft = _lib("peft")
    return peft.PeftConfig.from_pretrained(source, **({"revision": revision} if revision else {}))


def load_peft(entry: dict[str, Any], did: list[str]) -> None:
    """As code loads an adapter: AutoPeftModelFor<task>(id), whose base is
    `base_model_name_or_path`; with weights.toml's `base`, PeftModel on that base. Then
    every other adapter the repo holds, by `load_adapter` from the snapshot (by repo id,
    peft 0.21 asks for `<name>/<name>/...`)."""
    peft = _lib("peft")
    transformers = _lib("transformers")

    adapters = list(entry["adapters"])
    # `save_pretrained(selected_adapters=[...])` without "default": no adapter at the root,
    # the first named one (from the snapshot, as the others) is the one the model is made of.
    source, at = entry["id"], {"revision": entry["revision"]}
    if "adapter_config.json" not in entry["files"] and adapters:
        source, at = os.path.join(entry["snapshot"], adapters.pop(0)), {}
    config = _peft_config(source, at.get("revision"))
    did.append("adapter config")
    base = entry.get("base")
    if base:
        kind = getattr(transformers, _base_class(config), transformers.AutoModel)
        model: Any = kind.from_pretrained(base["id"], revision=base["revision"])
        did.append(f"base {base['id']} (weights.toml's `base`)")
        model = peft.PeftModel.from_pretrained(model, source, low_cpu_mem_usage=True, **at)
    else:
        auto = getattr(peft, PEFT_AUTO.get(str(getattr(config, "task_type", None)), ""),
                       peft.AutoPeftModel)
        model = auto.from_pretrained(source, low_cpu_mem_usage=True, **at)
        did.append(f"{auto.__name__} with its base {config.base_model_name_or_path}")
    constants = _lib("peft.utils.constants")
    for name in adapters:
        folder = os.path.join(entry["snapshot"], name)
        try:
            model.load_adapter(folder, adapter_name=name, low_cpu_mem_usage=True)
        except Exception as e:
            # From a folder without its weights peft takes the folder for a repo id: name the
            # file its load_peft_weights looks for first.
            names = (constants.SAFETENSORS_WEIGHTS_NAME, constants.WEIGHTS_NAME)
            if not any(os.path.isfile(os.path.join(folder, n)) for n in names):
                raise FileNotFoundError(f"adapter {name!r}: no {name}/{names[0]} (nor "
                                        f"{names[1]}) in the snapshot ({e})") from e
            raise
        did.append(f"adapter {name}")


def _base_class(config: Any) -> str:
    """The transformers class peft's AutoPeftModelFor<task> loads the base with."""
    return {"CAUSAL_LM": "AutoModelForCausalLM", "SEQ_2_SEQ_LM": "AutoModelForSeq2SeqLM",
            "SEQ_CLS": "AutoModelForSequenceClassification",
            "TOKEN_CLS": "AutoModelForTokenClassification",
            "QUESTION_ANS": "AutoModelForQuestionAnswering"}.get(
        str(getattr(config, "task_type", None)), "AutoModel")


def load_sentence_transformers(entry: dict[str, Any], did: list[str]) -> None:
    st = _lib("sentence_transformers")

    kind = "SentenceTransformer"
    path = os.path.join(entry["snapshot"], "config_sentence_transformers.json")
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            kind = json.load(f).get("model_type") or kind
    elif not os.path.isfile(os.path.join(entry["snapshot"], "modules.json")):
        kind = "CrossEncoder"
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
    path = os.path.join(entry["snapshot"], "config.json")
    name = None
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            name = json.load(f).get("_class_name")
    if name and hasattr(diffusers, name):
        getattr(diffusers, name).from_pretrained(entry["id"], **kw)
        did.append(f"{name} (weights loaded on CPU)")
        return
    # LoRA weights: a pipeline loads them; the library's own reader opens them alone.
    from huggingface_hub import hf_hub_download

    safetensors = _lib("safetensors")
    count = 0
    for p in entry["files"]:
        if p.endswith(".safetensors"):
            with safetensors.safe_open(hf_hub_download(entry["id"], p, revision=entry[
                    "revision"]), framework="numpy") as f:
                count += len(list(f.keys()))
    if not count:
        raise FileNotFoundError("no diffusers config.json with `_class_name`, no "
                                "model_index.json and no LoRA weights: nothing diffusers loads")
    did.append(f"LoRA weights ({count} tensors in their headers)")


GGUF_MAGIC = (b"GGUF", b"FUGG")  # little- and big-endian files, as gguf-py's reader takes them


def load_gguf(entry: dict[str, Any], did: list[str]) -> None:
    gguf = _lib("gguf")
    from huggingface_hub import hf_hub_download

    def fetch(name: str) -> str:
        return str(hf_hub_download(entry["id"], name, revision=entry["revision"]))

    found = 0
    opened: set[str] = set()
    for name in sorted(entry["files"]):
        local = os.path.join(entry["snapshot"], name)
        try:
            with open(local, "rb") as f:
                if f.read(4) not in GGUF_MAGIC:
                    continue
        except OSError:
            continue
        if name in opened:
            continue
        reader = gguf.GGUFReader(fetch(name))
        opened.add(name)
        found += 1
        parts = _split_parts(name, reader)
        for part in parts:
            if part not in opened:
                gguf.GGUFReader(fetch(part))
                opened.add(part)
        did.append(f"{name} ({len(reader.tensors)} tensors"
                   + (f"; {len(parts) + 1} split parts)" if parts else ")"))
    if not found:
        raise FileNotFoundError("the entry holds no GGUF file (none of its files starts "
                                "with GGUF's magic)")


def _split_parts(name: str, reader: Any) -> list[str]:
    """The other parts of a split GGUF: llama.cpp's `llama_split_path` names part i of n
    `{prefix}-{i:05d}-of-{n:05d}.gguf`, and `split.count` in each part says n."""
    field = reader.fields.get("split.count")
    if field is None:
        return []
    count = int(field.parts[field.data[0]][0])
    match = re.match(r"(.*)-(\d{5})-of-(\d{5})\.gguf$", name)
    if count <= 1 or match is None:
        return []
    return [f"{match[1]}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)
            if f"{match[1]}-{i:05d}-of-{count:05d}.gguf" != name]


def load_datasets(entry: dict[str, Any], did: list[str]) -> None:
    """As the README loads a locked dataset: from its snapshot, by config and split."""
    datasets = _lib("datasets")

    splits = entry["split"] or [None]
    for split in splits:
        loaded = datasets.load_dataset(entry["snapshot"], name=entry["config"], split=split)
        rows = loaded.num_rows if split else sum(loaded.num_rows.values())
        did.append(f"{entry['config'] or 'default'}/{split or 'every split'} ({rows} rows)")


def _wanted(error: str, entry: dict[str, Any]) -> str | None:
    """The file the load wanted and the snapshot lacks, relative to the repo: of those the
    error names (by the snapshot's path, or the repo's), the one huggingface_hub was asked
    for first; else, when the error names none, the last file of the repo it was asked for
    in vain (the one the failing call wanted). None rather than a guess."""
    snapshot = entry["snapshot"].rstrip("/") + "/"
    named: list[str] = []
    for name in re.findall(r"[\w.\-/]+\.(?:" + "|".join(SUFFIXES) + r")\b", error):
        if name.startswith(snapshot):
            name = name[len(snapshot):]
        elif name.startswith("/"):
            continue  # a path outside the snapshot: not a file of this repo
        name = name.removeprefix("./")
        if "://" not in name and not os.path.exists(os.path.join(snapshot, name)):
            named.append(name)
    mine = [path for repo, path in _missed if repo in ("", entry["id"])]
    if named:
        return min(named, key=lambda n: mine.index(n) if n in mine else len(mine))
    last = _missed[-1] if _missed else None
    return last[1] if last and last[0] in ("", entry["id"]) else None


LOADERS: dict[str, Callable[[dict[str, Any], list[str]], None]] = {
    "transformers": load_transformers, "sentence-transformers": load_sentence_transformers,
    "diffusers": load_diffusers, "peft": load_peft, "gguf": load_gguf,
    "datasets": load_datasets,
}


def serve(modules: str, answers: str) -> None:
    """Load many entries: import `modules` (comma-separated: what their libraries import
    before they read a file, torch and transformers taking seconds) once, then for each
    entry read from standard input (one JSON object a line) fork a process that loads it as
    `main` does, its answer in ANSWERS/<n>.json, its output in ANSWERS/<n>.out. Each load is
    still a process of its own (a crash, or state a library leaves, stays in it); after
    each, one line on standard output: `<n> <wait status>`."""
    import contextlib

    for name in filter(None, modules.split(",")):
        with contextlib.suppress(Exception):  # the entry's own load says what is missing
            importlib.import_module(name)
    for n, line in enumerate(sys.stdin):
        pid = os.fork()
        if pid == 0:  # the entry's process
            code = 0
            try:
                out = os.open(os.path.join(answers, f"{n}.out"),
                              os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                os.dup2(out, 1)
                os.dup2(out, 2)
                devnull = os.open(os.devnull, os.O_RDONLY)
                os.dup2(devnull, 0)  # a library that asks reads EOF, as main's does
                run(json.loads(line), os.path.join(answers, f"{n}.json"))
            except BaseException:  # noqa: BLE001 - the parent sees no answer: a crash
                code = 70
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        print(n, status, flush=True)


def main() -> None:
    if sys.argv[1] == "--serve":
        serve(sys.argv[2], sys.argv[3])
        return
    run(json.loads(sys.argv[1]), sys.argv[2])


def run(entry: dict[str, Any], answer_path: str) -> None:
    """Load one entry and write its answer to `answer_path`."""
    did: list[str] = []
    answer: dict[str, Any] = {"ok": True, "did": did, "error": None, "wanted": None}
    _watch_downloads()
    if entry["library"] == "transformers":
        _weights_without_bytes()
    try:
        LOADERS[entry["library"]](entry, did)
    except BaseException as e:  # every failure is the answer
        if isinstance(e, KeyboardInterrupt):
            raise
        error = f"{type(e).__name__}: {e}".strip()
        others = sorted({f"{repo}'s {path}" for repo, path in _missed
                         if repo not in ("", entry["id"])})
        if others:
            error += f" [the load asked for {', '.join(others[:3])}, not in the cache]"
        answer.update(ok=False, error=error, wanted=_wanted(error, entry))
    answer["asked"] = [{"repo": repo, "path": path} for repo, path in _missed]
    with open(answer_path, "w", encoding="utf-8") as f:
        json.dump(answer, f)


if __name__ == "__main__":
    main()
