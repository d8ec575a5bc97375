"""What a model needs: one rule per loading library, over a repo's listing and a few small files.

A loader is a side-effect-free function of the files the Hub lists at the locked commit and of
`read`, which returns the bytes of one small file there (an index, `modules.json`,
`model_index.json`, `adapter_config.json`): the resolver fetches, the rule decides. Each rule
cites the library code it mirrors, as pip's `packaging.tags` mirrors the interpreter's own. A
reader asking "why was tf_model.h5 not locked?" lands in this package (`explain`).

`all` is every file: today's behaviour, and the meaning of an entry without `loader`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from wlock.models import LockedFile

Read = Callable[[str], bytes]

LOADERS = ("transformers", "sentence-transformers", "diffusers", "peft", "gguf", "timm",
           "open_clip", "datasets", "all")
# The loaders of a dataset entry; every other loader but `all` is a model's.
DATASET_LOADERS = ("datasets", "all")
# The loaders whose `variant` means something: a weights variant (`fp16`) or a GGUF quant.
VARIANT_LOADERS = ("transformers", "diffusers", "gguf")

# The Hub's `library_name` -> our loader. Names the Hub uses for the same library are folded.
_BY_LIBRARY = {
    "transformers": "transformers", "sentence-transformers": "sentence-transformers",
    "diffusers": "diffusers", "peft": "peft", "gguf": "gguf", "llama.cpp": "gguf",
    "timm": "timm", "open_clip": "open_clip", "open-clip": "open_clip",
}


class LoaderProblem(Exception):
    """The rule cannot choose: the manifest must say more (a variant), or the repo is
    inconsistent (an index naming a shard that is not there). The resolver turns it into an
    error naming weights.toml's entry."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.message, self.hint = message, hint


@dataclass(frozen=True, slots=True)
class Requirement:
    """Another repo an entry cannot load without: an adapter's base model, a remote-code repo."""

    id: str
    ref: str  # the commit or ref the requiring repo names ("main" when it names none)
    why: str
    include: tuple[str, ...] = ()  # only these files (remote code: the .py files)
    # What to do when the repo is not on the Hub (it was named by a file: say which, and how
    # to name it instead), for the error that says so.
    hint: str | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Choice:
    """What a loader takes from a repo, and what it needs from others."""

    paths: frozenset[str]
    requires: tuple[Requirement, ...] = ()
    notes: tuple[str, ...] = field(default=())
    # The classes `auto_map` names (`modeling_x.XModel`, `org/repo--modeling_x.XModel`):
    # code a trust_remote_code load runs, which the policy wants locked.
    code: tuple[str, ...] = ()


def detect_loader(library_name: str | None, paths: Iterable[str]) -> str:
    """The loader for a repo: from the Hub's `library_name`, else from the files that only one
    library writes (as the Hub itself infers library_name). `all` when nothing says."""
    if library_name and library_name.lower() in _BY_LIBRARY:
        return _BY_LIBRARY[library_name.lower()]
    names = set(paths)
    for marker, loader in (("adapter_config.json", "peft"), ("model_index.json", "diffusers"),
                           ("modules.json", "sentence-transformers"),
                           ("open_clip_config.json", "open_clip")):
        if marker in names:
            return loader
    if any(p.endswith(".gguf") for p in names):
        return "gguf"
    # One diffusers component, or LoRA weights for a pipeline (diffusers' own file names).
    if any(p.rsplit("/", 1)[-1].startswith(("diffusion_pytorch_model", "pytorch_lora_weights"))
           for p in names):
        return "diffusers"
    if "config.json" in names and any(
            p in names for p in ("model.safetensors", "pytorch_model.bin",
                                 "model.safetensors.index.json",
                                 "pytorch_model.bin.index.json")):
        return "transformers"
    return "all"


@dataclass(frozen=True, slots=True)
class Options:
    """What an entry tells its loader beyond the repo: a variant or quant, an adapter's base
    (`org/name@ref`), a projector left out (`mmproj = false`), a dataset's config and split."""

    variant: str | None = None
    base: str | None = None
    mmproj: bool = True
    config: str | None = None
    split: str | None = None


def select(loader: str, files: Sequence[LockedFile], read: Read,
           options: Options = Options()) -> Choice:
    """The files `loader` reads from a repo listed as `files`, and the repos it requires.

    Raises LoaderProblem when the rule cannot choose.
    """
    paths = frozenset(f.path for f in files)
    if loader == "all":
        return _with_remote_code(Choice(paths), read)
    if loader == "datasets":  # data files run no code: no auto_map to follow
        from wlock.lock.loaders import datasets

        return datasets.select(paths, read, options.config, options.split,
                               {f.path: f.size for f in files})
    choice = _select(loader, paths, read, options)
    large = sorted(f"{f.path} ({f.size / 1e6:.0f} MB)" for f in files
                   if f.path in choice.paths and f.size > LARGE_KEPT and describe(f.path) is None)
    if large:
        choice = replace(choice, notes=(*choice.notes, (
            f"kept though large and not the weights: {', '.join(large)} (`exclude` them if "
            "the library does not read them)")))
    return choice


def _select(loader: str, paths: frozenset[str], read: Read, options: Options) -> Choice:
    from wlock.lock.loaders import (
        diffusers,
        gguf,
        open_clip,
        peft,
        sentence_transformers,
        timm,
        transformers,
    )

    rules: dict[str, Callable[[frozenset[str], Read, str | None], Choice]] = {
        "transformers": transformers.select,
        "sentence-transformers": sentence_transformers.select,
        "diffusers": diffusers.select,
        "timm": timm.select,
        "open_clip": open_clip.select,
    }
    variant = options.variant
    if loader == "peft":
        choice = peft.select(paths, read, variant, options.base)
    elif loader == "gguf":
        choice = gguf.select(paths, read, variant, options.mmproj)
    else:
        choice = rules[loader](paths, read, variant)
    return _with_remote_code(choice, read)


# Every config a library reads `auto_map` from: transformers' AutoConfig (config.json), its
# tokenizer (tokenizer_config.json), and its processors (`processing_utils`,
# `feature_extraction_utils`, `image_processing_base`, `video_processing_utils` each read
# `auto_map` from their own config file), in any folder a pipeline keeps a model in.
AUTO_MAP_CONFIGS = ("config.json", "tokenizer_config.json", "preprocessor_config.json",
                    "processor_config.json", "feature_extractor_config.json",
                    "image_processor_config.json", "video_preprocessor_config.json",
                    # diffusers' ModularPipelineBlocks (modular_pipeline.py: config_name)
                    "modular_config.json")


def _with_remote_code(choice: Choice, read: Read) -> Choice:
    requires, code = remote_code(choice.paths, read)
    known = {r.id for r in choice.requires}
    return replace(choice, requires=choice.requires + tuple(
        r for r in requires if r.id not in known),
        code=tuple(sorted(set(choice.code) | set(code))))


# The other files a library reads code references from: sentence-transformers' module list,
# its Router's and WordEmbeddings' configs, diffusers' pipeline index, and transformers'
# generation config (a generation mode it now runs from another repo).
CODE_CONFIGS = (*AUTO_MAP_CONFIGS, "modules.json", "model_index.json", "router_config.json",
                "wordembedding_config.json", "generation_config.json")

# transformers' hub_kernels.is_kernel: an attention or experts implementation named as a Hub
# repo (`org/name`, `@revision`, `:function`), whose compiled code the `kernels` library
# fetches and runs on a plain from_pretrained (kernels-community's without trust_remote_code).
KERNEL = re.compile(r"^[^/:]+/[^/:]+(?:@[^/:]+)?(?::[^/:]+)?$")
# The generation modes transformers 4.56+ moved to Hub repos (generation/utils.py:
# GENERATION_MODES_MAPPING): generate() runs that repo's custom_generate/generate.py.
MOVED_GENERATION = "transformers-community"


def remote_code(paths: frozenset[str], read: Read
                ) -> tuple[tuple[Requirement, ...], tuple[str, ...]]:
    """Every class a trust_remote_code load could run from a repo (this one's or another's,
    `org/repo--module.Class`), wherever a library looks for one: `auto_map` in any config
    (AUTO_MAP_CONFIGS), config.json's `custom_pipelines` (pipeline() picks its `impl`), a
    sentence-transformers module whose `type` is not the library's own, a diffusers
    pipeline whose `_class_name` is `[module, class]` or a component whose module is a `.py`
    in its folder. Returns the repos that code lives in (required, `*.py` locked) and the
    references."""
    from wlock.lock.names import repo_id_problem

    found: dict[str, Requirement] = {}
    code: set[str] = set()
    for path in sorted(p for p in paths if p.rsplit("/", 1)[-1] in CODE_CONFIGS):
        try:
            data = json.loads(read(path))
        except ValueError:
            continue  # the library would fail on it too; the lock still records it
        for where, reference in _code_references(path, data, paths):
            code.add(reference)
            if "--" not in reference:
                continue
            repo = reference.split("--")[0]
            if repo_id_problem(repo) is None and repo not in found:
                found[repo] = Requirement(repo, "main", f"remote code named in {path}'s "
                                          f"{where} ({reference})", include=("*.py",))
    # transformers (4.56+) imports `custom_generate/generate.py` on any trust_remote_code
    # load of a model whose repo has it, auto_map or not (GenerationMixin.load_custom_generate,
    # called from from_pretrained), and `generate(custom_generate=...)` does too.
    for path in sorted(p for p in paths if p.rsplit("/", 1)[-1] == "generate.py"
                       and p.rsplit("/", 2)[-2:-1] == ["custom_generate"]):
        code.add(path.removesuffix(".py") + ".generate")
    return tuple(found.values()), tuple(sorted(code))


def moved_generation_mode(config: Any) -> str | None:
    """The repo (under transformers-community) of the generation mode a
    generation_config.json picks, when transformers moved it to the Hub; else None.
    GenerationConfig.get_generation_mode, read from the file as it is written (the test
    asks transformers' own for each config it makes)."""
    if not isinstance(config, dict):
        return None

    def number(key: str) -> float | None:
        value = config.get(key)
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) \
            else None

    beams = number("num_beams")
    if config.get("constraints") is not None or config.get("force_words_ids") is not None:
        return "constrained-beam-search"
    if beams is None or beams == 1:
        sampling = config.get("do_sample") is True
        top_k, alpha = number("top_k"), number("penalty_alpha")
        contrastive = not sampling and top_k is not None and top_k > 1 and \
            alpha is not None and alpha > 0
        assisted = any(config.get(key) not in (None, False) for key in (
            "use_mtp", "prompt_lookup_num_tokens", "assistant_early_exit"))
        if contrastive:
            return "contrastive-search"
        if config.get("dola_layers") is not None and not assisted:
            return "dola"
        return None
    groups = number("num_beam_groups")
    if groups is not None and groups > 1:
        return "group-beam-search"
    return None


def _kernels(config: Any) -> Iterator[tuple[str, str]]:
    """(key, kernel) for each Hub kernel a config.json names as its attention or experts
    implementation, at its root or per sub-config (`{"": ..., "text_config": ...}`)."""
    for key in ("attn_implementation", "experts_implementation"):
        value = config.get(key)
        for named in value.values() if isinstance(value, dict) else [value]:
            if isinstance(named, str) and KERNEL.match(named):
                yield key, named
    for sub in config.values():
        if isinstance(sub, dict) and "model_type" in sub:
            yield from _kernels(sub)


def _code_references(path: str, data: Any, paths: frozenset[str]
                     ) -> Iterator[tuple[str, str]]:
    """(where in the file, class reference) for each piece of code `path` names."""
    name = path.rsplit("/", 1)[-1]
    folder = path[:-len(name)]
    if name == "modules.json" and isinstance(data, list):
        # SentenceTransformer._load_module_class_from_ref: a type outside the library is
        # imported, else (trust_remote_code) taken from the repo, or `org/repo--...`.
        for module in data:
            kind = module.get("type") if isinstance(module, dict) else None
            if isinstance(kind, str) and kind and not kind.startswith("sentence_transformers."):
                yield "module types", kind
        return
    if not isinstance(data, dict):
        return
    if name == "router_config.json":
        # sentence-transformers' Router.load: each route's `types` entry through the same
        # import_module_class as a module's type.
        types = data.get("types")
        for kind in types.values() if isinstance(types, dict) else ():
            if isinstance(kind, str) and kind and not kind.startswith("sentence_transformers."):
                yield "Router types", kind
        return
    if name == "wordembedding_config.json":
        # WordEmbeddings.load: `tokenizer_class` through import_module_class.
        kind = data.get("tokenizer_class")
        if isinstance(kind, str) and kind and not kind.startswith("sentence_transformers."):
            yield "tokenizer_class", kind
        return
    if name == "generation_config.json":
        mode = moved_generation_mode(data)
        if mode is not None:
            yield "generation mode", f"{MOVED_GENERATION}/{mode}--custom_generate/generate.generate"
        return
    if name == "model_index.json":
        # DiffusionPipeline: `_class_name` as [module, class] is a custom pipeline (the
        # repo's module.py, else a community pipeline); a component [module, class] whose
        # `{component}/{module}.py` the repo has is custom code (_get_custom_components...).
        for key, value in data.items():
            if not (isinstance(value, list) and len(value) == 2 and isinstance(value[0], str)
                    and isinstance(value[1], str)):
                continue
            if key == "_class_name":
                yield "_class_name", f"{value[0]}.{value[1]}"
            elif f"{folder}{key}/{value[0]}.py" in paths:
                yield f"component {key}", f"{key}/{value[0]}.{value[1]}"
        return
    auto_map = data.get("auto_map")
    if isinstance(auto_map, dict):
        for value in auto_map.values():
            for reference in value if isinstance(value, list) else [value]:
                if isinstance(reference, str) and reference:
                    yield "auto_map", reference
    if name == "config.json":
        for key, kernel in _kernels(data):
            yield key, f"kernel:{kernel}"
        activation = data.get("activation_function")
        if folder and "in_features" in data and "out_features" in data and \
                isinstance(activation, str) and not activation.startswith("torch."):
            # sentence-transformers' Dense.load (a module's folder: in_features,
            # out_features) imports an `activation_function` outside torch only under
            # trust_remote_code.
            yield "Dense activation_function", f"import:{activation}"
    pipelines = data.get("custom_pipelines") if name == "config.json" else None
    if isinstance(pipelines, dict):
        for task in pipelines.values():
            impl = task.get("impl") if isinstance(task, dict) else None
            if isinstance(impl, str) and impl:
                yield "custom_pipelines", impl


# -- shared by the rules ----------------------------------------------------------------------

def beside(paths: Iterable[str], chosen: Iterable[str], folder: str = "") -> frozenset[str]:
    """The `chosen` weights and every file under `folder` but those the library never opens
    (`unread`): configs, tokenizers, processors, chat templates, remote code, a `bpe.codes`,
    the card, in any folder. A list of what to keep is always one short (issue 37); what is
    left out is only what `unread` can name."""
    taken = frozenset(chosen)
    return taken | {p for p in paths if p.startswith(folder) and unread(p) is None}


def add_variant(name: str, variant: str | None) -> str:
    """transformers' `_add_variant` (utils/hub.py): `model.safetensors` + fp16 ->
    `model.fp16.safetensors`; `model.safetensors.index.json` -> `model.safetensors.index.fp16
    .json`."""
    if not variant:
        return name
    parts = name.split(".")
    return ".".join([*parts[:-1], variant, parts[-1]])


def weights(paths: frozenset[str], folder: str, names: Sequence[str], read: Read,
            variant: str | None = None) -> list[str] | None:
    """The weights a loader takes from `folder`, in the library's order of preference: for
    each name (`model.safetensors`, then `pytorch_model.bin`), the single file, else its
    `.index.json` and exactly the shards its `weight_map` names. None when there are none.

    This is transformers' `_get_resolved_checkpoint_files` (modeling_utils.py): it asks for
    SAFE_WEIGHTS_NAME, then SAFE_WEIGHTS_INDEX_NAME, then WEIGHTS_NAME, then
    WEIGHTS_INDEX_NAME, each with `_add_variant`; diffusers' `_get_model_file` and timm's
    `load_state_dict_from_hf` ask in the same order with their own names.
    """
    for name in names:
        single = folder + add_variant(name, variant)
        if single in paths:
            return [single]
        index = folder + add_variant(name + ".index.json", variant)
        if index in paths:
            try:
                weight_map = json.loads(read(index))["weight_map"]
                shards = sorted({folder + str(s) for s in weight_map.values()})
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                raise LoaderProblem(
                    f"{index} is not a weights index (no `weight_map`: {e})",
                    "Lock the repo with `loader = \"all\"`, or tell its authors.") from None
            missing = [s for s in shards if s not in paths]
            if missing:
                raise LoaderProblem(
                    f"{index} names {len(missing)} shard(s) the repo does not have "
                    f"({', '.join(missing[:3])})",
                    "The repo is incomplete at this commit: pin another ref, or lock it with "
                    "`loader = \"all\"`.")
            return [index, *shards]
    return None


def collapse(paths: Iterable[str], kept: Iterable[str]) -> list[str]:
    """`paths` with every folder none of whose files is kept written once as `folder/`: the
    short list of what was not locked, for `wlock lock` and `wlock tree`."""
    kept_folders = {"/".join(p.split("/")[:depth]) for p in kept
                    for depth in range(1, p.count("/") + 1)}
    out: set[str] = set()
    for path in paths:
        parts = path.split("/")
        for depth in range(1, len(parts)):
            folder = "/".join(parts[:depth])
            if folder not in kept_folders:
                out.add(folder + "/")
                break
        else:
            out.add(path)
    return sorted(out)


_WEIGHT_KINDS = (
    (re.compile(r"(^|/)(tf_model|.*\.h5$)"), "TensorFlow weights"),
    (re.compile(r"\.msgpack$"), "Flax weights"),
    (re.compile(r"\.ot$"), "rust-bert weights"),
    (re.compile(r"(^|/)onnx/|\.onnx(_data)?$"), "an ONNX export"),
    # An export is both its files or neither: `openvino_model.xml` names its `.bin`.
    (re.compile(r"(^|/)openvino/|(^|/)openvino_[\w-]*\.(xml|bin)$"), "an OpenVINO export"),
    (re.compile(r"(^|/)coreml/|\.mlpackage|\.mlmodel"), "a Core ML export"),
    (re.compile(r"(^|/)original/"), "the original checkpoint (another copy of the weights)"),
    (re.compile(r"\.gguf$"), "a GGUF file"),
    # A pickle is a copy of the weights only under a name the libraries save weights by
    # (transformers' WEIGHTS_NAME and its shards and variants, diffusers', peft's, open_clip's,
    # a Lightning or single-file `.ckpt`, Meta's `consolidated.NN.pth`): a pickle of another
    # name is data a library reads by name (Qwen2.5-Omni's `spk_dict.pt`), kept (issue 47).
    (re.compile(r"(^|/)(pytorch_model|diffusion_pytorch_model|adapter_model|model|"
                r"open_clip_pytorch_model|pytorch_lora_weights|consolidated)"
                r"([.-][\w.-]*)?\.(bin|pt|pth)$|\.ckpt$"), "a pickle of the weights"),
    (re.compile(r"\.safetensors$"), "safetensors weights"),
)


def describe(path: str) -> str | None:
    """What kind of copy of the weights `path` is, in words, or None for other files."""
    for pattern, words in _WEIGHT_KINDS:
        if pattern.search(path):
            return words
    return None


# What transformers' Trainer writes beside a checkpoint and from_pretrained never opens
# (trainer.py: OPTIMIZER_NAME, SCHEDULER_NAME, TRAINING_ARGS_NAME, the RNG states, the
# `checkpoint-N/` folders of PREFIX_CHECKPOINT_DIR; TRAINER_STATE_NAME is small and kept).
_TRAINING = re.compile(r"(^|/)(optimizer\.pt|scheduler\.pt|training_args\.bin|"
                       r"rng_state(_\d+)?\.pth|scaler\.pt)$|(^|/)checkpoint-\d+/")


def unread(path: str) -> str | None:
    """Why a library's loader leaves `path` out: it is a copy of the weights in a form the
    loader did not choose (another framework, format, variant, an export, `original/`), an
    index of weights not chosen, a training artefact, or git's own metadata; None for every
    other file, which the loader keeps (a library reads whatever its code reads: a list of
    what to keep is always one short, issue 37)."""
    if (kind := describe(path)) is not None:
        return kind
    # `model.safetensors.index.json`, and a variant's (`model.safetensors.index.fp16.json`,
    # transformers' _add_variant): never without the shards it names (issue 37, 47).
    if re.search(r"\.index(\.[\w-]+)?\.json$", path):
        return "an index of weights the loader did not choose"
    if _TRAINING.search(path):
        return "a training artefact (optimizer, scheduler, RNG state, training arguments)"
    if path.rsplit("/", 1)[-1] == ".gitattributes":
        return "git's own metadata"
    return None


# A kept file that is not the chosen weights but this large is named in the loader's line,
# so a user sees it and can `exclude` it (a dataset dump, a second tokenizer's training
# corpus). 50 MB: larger than any tokenizer.json measured (Gemma's, 33 MB).
LARGE_KEPT = 50 * 1000 * 1000
