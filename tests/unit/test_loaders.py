"""Each loader's rule over repos laid out as the real ones on the Hub are (file names from their
listings), asserted file by file; and what each rule reads to choose (small files only)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from wlock.lock.loaders import (
    AUTO_MAP_CONFIGS,
    LoaderProblem,
    Options,
    Requirement,
    collapse,
    detect_loader,
    moved_generation_mode,
    select,
)
from wlock.models import LockedFile

BASE_COMMIT = "a" * 40


def listing(*paths: str) -> tuple[LockedFile, ...]:
    return tuple(LockedFile(path=p, size=1, git_sha1="0" * 40) for p in paths)


class Reader:
    """The bytes of the small files a rule may read, and a record of what it read."""

    def __init__(self, files: dict[str, object]) -> None:
        self.files = {p: (v if isinstance(v, bytes) else json.dumps(v).encode())
                      for p, v in files.items()}
        self.read: list[str] = []

    def __call__(self, path: str) -> bytes:
        self.read.append(path)
        if path not in self.files and path.rsplit("/", 1)[-1] in AUTO_MAP_CONFIGS:
            return b"{}"  # a config the remote-code pass reads; no auto_map in it
        if path not in self.files and path.endswith(".gguf"):
            return b""  # a GGUF head that is none: the gguf rule goes by the name
        return self.files[path]


BERT = (  # google-bert/bert-base-uncased
    ".gitattributes", "LICENSE", "README.md", "config.json",
    "coreml/fill-mask/float32_model.mlpackage/Data/com.apple.CoreML/model.mlmodel",
    "coreml/fill-mask/float32_model.mlpackage/Data/com.apple.CoreML/weights/weight.bin",
    "coreml/fill-mask/float32_model.mlpackage/Manifest.json", "flax_model.msgpack",
    "model.onnx", "model.safetensors", "pytorch_model.bin", "rust_model.ot", "tf_model.h5",
    "tokenizer.json", "tokenizer_config.json", "vocab.txt",
)


def test_transformers_takes_safetensors_and_the_files_beside_it_never_other_formats() -> None:
    read = Reader({"config.json": {"model_type": "bert"}, "tokenizer_config.json": {}})
    choice = select("transformers", listing(*BERT), read)
    assert sorted(choice.paths) == ["LICENSE", "README.md", "config.json", "model.safetensors",
                                    "tokenizer.json", "tokenizer_config.json", "vocab.txt"]
    assert choice.requires == ()
    assert set(read.read) <= {"config.json", "tokenizer_config.json"}


def test_transformers_falls_back_to_the_pickle_when_there_is_no_safetensors() -> None:
    paths = [p for p in BERT if p != "model.safetensors"]
    choice = select("transformers", listing(*paths), Reader({"config.json": {},
                                                             "tokenizer_config.json": {}}))
    assert "pytorch_model.bin" in choice.paths
    assert not choice.paths & {"tf_model.h5", "flax_model.msgpack", "rust_model.ot",
                               "model.onnx"}


LLAMA = (  # meta-llama/Meta-Llama-3-8B-Instruct
    ".gitattributes", "LICENSE", "README.md", "USE_POLICY.md", "config.json",
    "generation_config.json", *(f"model-0000{i}-of-00004.safetensors" for i in range(1, 5)),
    "model.safetensors.index.json", "original/consolidated.00.pth", "original/params.json",
    "original/tokenizer.model", "special_tokens_map.json", "tokenizer.json",
    "tokenizer_config.json",
)


def test_transformers_takes_exactly_the_shards_the_index_names() -> None:
    # A stray fifth shard (an interrupted upload) is not named by the index: not locked.
    paths = (*LLAMA, "model-00005-of-00004.safetensors")
    weight_map = {f"layer.{i}": f"model-0000{i % 4 + 1}-of-00004.safetensors" for i in range(9)}
    read = Reader({"model.safetensors.index.json": {"weight_map": weight_map},
                   "config.json": {}, "tokenizer_config.json": {},
                   "generation_config.json": {}})
    choice = select("transformers", listing(*paths), read)
    assert sorted(choice.paths) == sorted([
        "LICENSE", "README.md", "USE_POLICY.md", "config.json", "generation_config.json",
        *(f"model-0000{i}-of-00004.safetensors" for i in range(1, 5)),
        "model.safetensors.index.json", "special_tokens_map.json", "tokenizer.json",
        "tokenizer_config.json"])
    assert "model.safetensors.index.json" in read.read


def test_an_index_naming_a_missing_shard_is_a_problem_not_a_partial_lock() -> None:
    read = Reader({"model.safetensors.index.json": {"weight_map": {"a": "gone.safetensors"}}})
    with pytest.raises(LoaderProblem, match="names 1 shard"):
        select("transformers", listing("config.json", "model.safetensors.index.json"), read)


def test_transformers_variant_and_remote_code_from_another_repo() -> None:
    read = Reader({"config.json": {"auto_map": {
        "AutoConfig": "acme/code--configuration_x.XConfig",
        "AutoModel": "modeling_x.XModel"}},
        "tokenizer_config.json": {"auto_map": {"AutoTokenizer": ["acme/tok--tok.T", None]}}})
    paths = listing("config.json", "tokenizer_config.json", "model.safetensors",
                    "model.fp16.safetensors", "modeling_x.py")
    choice = select("transformers", paths, read, Options(variant="fp16"))
    assert sorted(choice.paths) == ["config.json", "model.fp16.safetensors", "modeling_x.py",
                                    "tokenizer_config.json"]
    assert [r.id for r in choice.requires] == ["acme/code", "acme/tok"]
    assert choice.requires[0].include == ("*.py",) and choice.requires[0].ref == "main"
    with pytest.raises(LoaderProblem, match="no 'int8' variant"):
        select("transformers", paths, read, Options(variant="int8"))


@pytest.mark.parametrize("loader", ["all", "transformers", "sentence-transformers"])
@pytest.mark.parametrize("config", ["preprocessor_config.json", "processor_config.json",
                                    "video_preprocessor_config.json"])
def test_remote_code_is_found_in_every_config_under_every_loader(loader: str, config: str
                                                                 ) -> None:
    """transformers reads `auto_map` from its processors' configs too; a processor's remote
    code passed `remote-code = "deny"` when only config.json and tokenizer_config.json were
    read, and under `loader = "all"` none was read (issue 36)."""
    read = Reader({config: {"auto_map": {"AutoProcessor": "acme/proc--processing_x.XProc"}},
                   "config.json": {}, "modules.json": [
                       {"idx": 0, "name": "0", "path": "",
                        "type": "sentence_transformers.models.Transformer"}]})
    paths = listing(config, "config.json", "model.safetensors", "modules.json")
    choice = select(loader, paths, read)
    assert config in choice.paths
    assert "acme/proc--processing_x.XProc" in choice.code
    assert [r.id for r in choice.requires] == ["acme/proc"]
    assert f"{config}'s auto_map" in choice.requires[0].why


def test_transformers_keeps_every_file_it_might_read_and_leaves_out_only_what_it_never_opens(
        ) -> None:
    """The rule keeps what it does not know to be unread (a list of suffixes to keep was
    always one short: `bpe.codes`, `prophetnet.tokenizer`, `additional_chat_templates/`;
    with `.model` dropped from it the whole suite passed: issue 37)."""
    paths = listing(
        "config.json", "model.safetensors", "tokenizer.model", "tokenizer_config.json",
        "bpe.codes", "prophetnet.tokenizer", "additional_chat_templates/tool_use.jinja",
        "chat_template.jinja", "pytorch_model.bin", "model.fp16.safetensors",
        "pytorch_model.bin.index.json", "optimizer.pt", "scheduler.pt", "rng_state_0.pth",
        "training_args.bin", "checkpoint-500/model.safetensors", "checkpoint-500/config.json",
        ".gitattributes", "original/consolidated.00.pth", "onnx/model.onnx")
    choice = select("transformers", paths, Reader({}))
    assert sorted(choice.paths) == [
        "additional_chat_templates/tool_use.jinja", "bpe.codes", "chat_template.jinja",
        "config.json", "model.safetensors", "prophetnet.tokenizer", "tokenizer.model",
        "tokenizer_config.json"]


def test_a_pickle_a_library_reads_by_name_is_kept_whatever_its_suffix() -> None:
    """Qwen2.5-Omni's from_pretrained reads `spk_dict.pt` beside the weights: a pickle is
    left out only under a name libraries save weights by (issue 47). Seen failing (left out
    as "a pickle") with every `.pt`/`.bin` taken for the weights."""
    paths = listing(  # Qwen/Qwen2.5-Omni-7B, and the copies a repo may carry beside it
        "config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
        "model.safetensors.index.json", "spk_dict.pt", "preprocessor_config.json",
        "pytorch_model.bin", "pytorch_model-00001-of-00002.bin", "model.fp16.bin",
        "consolidated.00.pth", "sd-v1.ckpt", "adapter_model.bin", "training_args.bin",
        "voices/speaker_embeddings.pkl")
    reader = Reader({"model.safetensors.index.json": {"weight_map": {
        "a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}})
    choice = select("transformers", paths, reader)
    assert sorted(choice.paths) == [
        "config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
        "model.safetensors.index.json", "preprocessor_config.json", "spk_dict.pt",
        "voices/speaker_embeddings.pkl"]


def test_no_index_without_its_shards_and_no_half_export() -> None:
    """A variant's index (`.index.fp16.json`) not chosen is left out with its shards, and
    an OpenVINO export at the top (`openvino_model.xml` + `.bin`) is both or neither."""
    paths = listing(
        "config.json", "model.safetensors", "model.safetensors.index.fp16.json",
        "model-00001-of-00002.fp16.safetensors", "model.safetensors.index.fp32.json",
        "openvino_model.xml", "openvino_model.bin", "openvino_tokenizer.xml",
        "openvino_tokenizer.bin", "tokenizer.json")
    choice = select("transformers", paths, Reader({}))
    assert sorted(choice.paths) == ["config.json", "model.safetensors", "tokenizer.json"]


MINILM = (  # sentence-transformers/all-MiniLM-L6-v2
    ".gitattributes", "1_Pooling/config.json", "README.md", "config.json",
    "config_sentence_transformers.json", "data_config.json", "model.safetensors",
    "modules.json", "onnx/model.onnx", "onnx/model_O1.onnx", "onnx/model_qint8_avx512.onnx",
    "openvino/openvino_model.bin", "openvino/openvino_model.xml", "pytorch_model.bin",
    "rust_model.ot", "sentence_bert_config.json", "special_tokens_map.json", "tf_model.h5",
    "tokenizer.json", "tokenizer_config.json", "train_script.py", "vocab.txt",
)
MODULES = [
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
    {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    {"idx": 2, "name": "2", "path": "2_Normalize",
     "type": "sentence_transformers.models.Normalize"},
]


def test_sentence_transformers_takes_each_module_and_no_export() -> None:
    read = Reader({"modules.json": MODULES, "config.json": {}, "tokenizer_config.json": {}})
    choice = select("sentence-transformers", listing(*MINILM), read)
    assert sorted(choice.paths) == sorted([
        "1_Pooling/config.json", "README.md", "config.json", "config_sentence_transformers.json",
        "data_config.json", "model.safetensors", "modules.json", "sentence_bert_config.json",
        "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json", "train_script.py",
        "vocab.txt"])


def test_sentence_transformers_dense_module_weights_in_its_folder() -> None:
    modules = [*MODULES[:2], {"idx": 2, "name": "2", "path": "2_Dense",
                              "type": "sentence_transformers.models.Dense"}]
    paths = (*MINILM, "2_Dense/config.json", "2_Dense/model.safetensors",
             "2_Dense/pytorch_model.bin")
    read = Reader({"modules.json": modules, "config.json": {}, "tokenizer_config.json": {}})
    choice = select("sentence-transformers", listing(*paths), read)
    assert {"2_Dense/config.json", "2_Dense/model.safetensors"} <= choice.paths
    assert "2_Dense/pytorch_model.bin" not in choice.paths


SD = (  # a Stable Diffusion 1.5 layout
    "README.md", "model_index.json", "v1-5-pruned.ckpt", "v1-5-pruned-emaonly.safetensors",
    "feature_extractor/preprocessor_config.json", "safety_checker/config.json",
    "safety_checker/model.safetensors", "scheduler/scheduler_config.json",
    "text_encoder/config.json", "text_encoder/model.safetensors",
    "text_encoder/model.fp16.safetensors", "text_encoder/pytorch_model.bin",
    "tokenizer/merges.txt", "tokenizer/special_tokens_map.json",
    "tokenizer/tokenizer_config.json", "tokenizer/vocab.json", "unet/config.json",
    "unet/diffusion_pytorch_model.safetensors", "unet/diffusion_pytorch_model.fp16.safetensors",
    "unet/diffusion_pytorch_model.bin", "unet/diffusion_flax_model.msgpack",
    "vae/config.json", "vae/diffusion_pytorch_model.safetensors",
    "vae/diffusion_pytorch_model.bin",
)
SD_INDEX = {"_class_name": "StableDiffusionPipeline", "_diffusers_version": "0.6.0",
            "feature_extractor": ["transformers", "CLIPImageProcessor"],
            "safety_checker": [None, None], "scheduler": ["diffusers", "PNDMScheduler"],
            "text_encoder": ["transformers", "CLIPTextModel"],
            "tokenizer": ["transformers", "CLIPTokenizer"],
            "unet": ["diffusers", "UNet2DConditionModel"], "vae": ["diffusers", "AutoencoderKL"]}


@pytest.mark.parametrize("variant", [None, "fp16"])
def test_diffusers_takes_the_components_in_one_format_and_the_variant(variant: str | None
                                                                      ) -> None:
    choice = select("diffusers", listing(*SD), Reader({"model_index.json": SD_INDEX}),
                    Options(variant=variant))
    dot = f".{variant}" if variant else ""
    assert sorted(choice.paths) == sorted([
        "README.md", "model_index.json", "feature_extractor/preprocessor_config.json",
        "scheduler/scheduler_config.json", "text_encoder/config.json",
        f"text_encoder/model{dot}.safetensors", "tokenizer/merges.txt",
        "tokenizer/special_tokens_map.json", "tokenizer/tokenizer_config.json",
        "tokenizer/vocab.json", "unet/config.json",
        f"unet/diffusion_pytorch_model{dot}.safetensors", "vae/config.json",
        "vae/diffusion_pytorch_model.safetensors"])  # vae has no fp16: its default weights
    assert bool(choice.notes) == bool(variant)


def test_peft_takes_the_adapter_and_requires_its_base_at_the_revision_it_names() -> None:
    paths = listing("README.md", "adapter_config.json", "adapter_model.safetensors",
                    "adapter_model.bin", "training_args.bin", "tokenizer.json",
                    "tokenizer_config.json")
    read = Reader({"adapter_config.json": {"base_model_name_or_path": "acme/base",
                                           "revision": BASE_COMMIT, "peft_type": "LORA"}})
    choice = select("peft", paths, read)
    assert sorted(choice.paths) == ["README.md", "adapter_config.json",
                                    "adapter_model.safetensors", "tokenizer.json",
                                    "tokenizer_config.json"]
    assert choice.requires == (Requirement(
        "acme/base", BASE_COMMIT, f"base model of the adapter (adapter_config.json, revision "
        f"{BASE_COMMIT})"),)
    unpinned = select("peft", paths, Reader({"adapter_config.json": {
        "base_model_name_or_path": "acme/base", "revision": None}}))
    assert unpinned.requires[0].ref == "main"
    local = select("peft", paths, Reader({"adapter_config.json": {
        "base_model_name_or_path": "/home/me/llama"}}))
    assert local.requires == () and "not a Hub repo id" in local.notes[0]


GGUF = ("README.md", "config.json", "llama-2-7b.Q2_K.gguf", "llama-2-7b.Q4_K_M.gguf",
        "llama-2-7b.Q4_K_S.gguf", "llama-2-7b.Q8_0.gguf",
        "Q8_0/llama-2-70b.Q8_0-00001-of-00002.gguf", "Q8_0/llama-2-70b.Q8_0-00002-of-00002.gguf")


def test_gguf_locks_a_vision_models_projector_with_any_quantization() -> None:
    """llama.cpp needs `mmproj-*.gguf` beside the model whatever its quantization; it was
    locked with one quantization (the one its own name matched) and not another, and a repo
    of one model and its projector asked which to lock (issue 37)."""
    vision = ("README.md", "gemma-3-4b-it-Q4_K_M.gguf", "gemma-3-4b-it-Q8_0.gguf",
              "mmproj-model-f16.gguf")
    for quant in ("Q4_K_M", "Q8_0"):
        choice = select("gguf", listing(*vision), Reader({}), Options(variant=quant))
        assert "mmproj-model-f16.gguf" in choice.paths, quant
    assert "gemma-3-4b-it-Q8_0.gguf" not in select("gguf", listing(*vision), Reader({}),
                                                   Options(variant="Q4_K_M")).paths
    with pytest.raises(LoaderProblem, match="no GGUF file of the quantization 'F16'"):
        select("gguf", listing(*vision), Reader({}), Options(variant="F16")).paths  # noqa: B018
    one = select("gguf", listing("model-Q4_K_M.gguf", "mmproj-model-f16.gguf"), Reader({}))
    assert sorted(one.paths) == ["mmproj-model-f16.gguf", "model-Q4_K_M.gguf"]


def test_gguf_takes_one_quantization_with_all_its_parts() -> None:
    choice = select("gguf", listing(*GGUF), Reader({}), Options(variant="Q4_K_M"))
    assert sorted(choice.paths) == ["README.md", "config.json", "llama-2-7b.Q4_K_M.gguf"]
    q8 = select("gguf", listing(*GGUF), Reader({}), Options(variant="q8_0"))
    assert sorted(q8.paths) == ["Q8_0/llama-2-70b.Q8_0-00001-of-00002.gguf",
                                "Q8_0/llama-2-70b.Q8_0-00002-of-00002.gguf", "README.md",
                                "config.json", "llama-2-7b.Q8_0.gguf"]
    with pytest.raises(LoaderProblem) as e:
        select("gguf", listing(*GGUF), Reader({}))
    assert "Q2_K, Q4_K_M, Q4_K_S, Q8_0" in e.value.hint
    with pytest.raises(LoaderProblem, match="no GGUF file of the quantization 'Q4_K'"):
        select("gguf", listing(*GGUF), Reader({}), Options(variant="Q4_K"))
    split = listing("m-Q4_K_M-00001-of-00002.gguf", "m-Q4_K_M-00002-of-00002.gguf")
    assert len(select("gguf", split, Reader({})).paths) == 2  # one model: no variant needed


def test_timm_and_open_clip_take_their_own_weight_names() -> None:
    timm = listing("README.md", "config.json", "model.safetensors", "pytorch_model.bin")
    assert sorted(select("timm", timm, Reader({})).paths) == [
        "README.md", "config.json", "model.safetensors"]
    clip = listing("open_clip_config.json", "open_clip_model.safetensors",
                   "open_clip_pytorch_model.bin", "tokenizer.json", "README.md")
    assert sorted(select("open_clip", clip, Reader({})).paths) == [
        "README.md", "open_clip_config.json", "open_clip_model.safetensors", "tokenizer.json"]


def test_all_is_every_file() -> None:
    assert select("all", listing(*BERT), Reader({})).paths == frozenset(BERT)


@pytest.mark.parametrize(("library", "paths", "loader"), [
    ("transformers", (), "transformers"), ("sentence-transformers", (), "sentence-transformers"),
    ("llama.cpp", (), "gguf"), ("keras", ("config.json",), "all"),
    (None, ("adapter_config.json", "adapter_model.safetensors"), "peft"),
    (None, ("model_index.json",), "diffusers"), (None, ("modules.json",), "sentence-transformers"),
    (None, ("x.Q4_0.gguf",), "gguf"), (None, ("config.json", "model.safetensors"), "transformers"),
    (None, ("weights.npz",), "all"),
])
def test_the_loader_comes_from_library_name_else_the_files(
    library: str | None, paths: tuple[str, ...], loader: str
) -> None:
    assert detect_loader(library, paths) == loader


def test_collapse_writes_a_folder_none_of_whose_files_is_kept_once() -> None:
    left = ["onnx/a.onnx", "onnx/b.onnx", "tf_model.h5", "x/drop.bin", "x/y/z.bin"]
    assert collapse(left, ["x/keep.json"]) == ["onnx/", "tf_model.h5", "x/drop.bin", "x/y/"]


def test_tree_why_explains_a_file_under_a_left_out_folder() -> None:
    """`onnx/` is recorded once, as a folder: a file under it is explained as left out,
    never "in no locked repo's files" (issue 37), whichever way the path is written."""
    from wlock.lock.tree import explain
    from wlock.models import Lock, LockedRepo

    repo = LockedRepo("model", "acme/bert", "main", "0" * 40,
                      listing("config.json", "model.safetensors"), loader="transformers",
                      skipped=("onnx/", "tf_model.h5"))
    lock = Lock("blake3:" + "0" * 64, (repo,))
    for path in ("onnx/model.onnx", "./onnx/model.onnx", "onnx", "onnx/"):
        lines = explain(lock, path)
        shown = "onnx/" if path.startswith("onnx") and "." not in path else path[2:] \
            if path.startswith("./") else path
        assert lines[0].startswith(f"acme/bert: {shown} is not locked: an "
                                   "ONNX export; it locks model.safetensors"), (path, lines)
        assert "add it to `include`" in lines[0]


def test_mmproj_false_leaves_the_projector_out_and_needs_the_gguf_loader(tmp_path: Path
                                                                         ) -> None:
    from wlock.errors import InvalidFileError
    from wlock.lock.manifest import read_manifest

    vision = listing("README.md", "model-Q4_K_M.gguf", "model-Q8_0.gguf",
                     "mmproj-model-f16.gguf")
    kept = select("gguf", vision, Reader({}), Options(variant="Q4_K_M", mmproj=False))
    assert sorted(kept.paths) == ["README.md", "model-Q4_K_M.gguf"]
    assert kept.notes == ("the projector(s) mmproj-model-f16.gguf left out (`mmproj = false`)",)
    manifest = tmp_path / "weights.toml"
    manifest.write_text('[[model]]\nid = "acme/vision-gguf"\nloader = "gguf"\n'
                        'variant = "Q4_K_M"\nmmproj = false\n')
    entry = read_manifest(manifest).entries[0]
    assert entry.mmproj is False and entry.extras == ("mmproj=false",)
    manifest.write_text('[[model]]\nid = "acme/bert"\nloader = "transformers"\nmmproj = false\n')
    with pytest.raises(InvalidFileError, match="`mmproj` is the gguf loader's"):
        read_manifest(manifest)


def test_a_lora_repo_locks_the_weights_load_lora_weights_reads() -> None:
    """diffusers' load_lora_weights(id): pytorch_lora_weights.safetensors, else the .bin,
    else the one .safetensors file (issue 47: such repos were refused)."""
    both = listing("README.md", "pytorch_lora_weights.safetensors", "pytorch_lora_weights.bin",
                   "image_0.png")
    assert sorted(select("diffusers", both, Reader({})).paths) == [
        "README.md", "image_0.png", "pytorch_lora_weights.safetensors"]
    one = listing("README.md", "pixel-art-xl.safetensors")
    assert sorted(select("diffusers", one, Reader({})).paths) == [
        "README.md", "pixel-art-xl.safetensors"]
    assert detect_loader(None, ("README.md", "pytorch_lora_weights.safetensors")) == "diffusers"
    with pytest.raises(LoaderProblem, match="not a repo diffusers loads"):
        select("diffusers", listing("README.md", "a.safetensors", "b.safetensors"), Reader({}))


def test_the_gguf_header_is_read_as_far_as_the_head_reaches(tmp_path: Path) -> None:
    """gguf_header over a file llama.cpp's own writer made, whole and cut short."""
    gguf = pytest.importorskip("gguf")
    import numpy as np

    from wlock.lock.loaders.gguf import gguf_header

    path = tmp_path / "vision.gguf"
    writer = gguf.GGUFWriter(str(path), "clip")
    writer.add_string("general.type", "mmproj")
    writer.add_array("tokens", ["a"] * 1000)
    writer.add_tensor("w", np.zeros((4, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    data = path.read_bytes()
    whole = gguf_header(data)
    assert whole is not None and whole["general.architecture"] == "clip"
    assert whole["general.type"] == "mmproj" and "tokens" in whole
    cut = gguf_header(data[:200])  # ends inside the token list: what came before stands
    assert cut is not None and cut["general.architecture"] == "clip" and "tokens" not in cut
    assert gguf_header(b"PK\x03\x04" + bytes(100)) is None


CODE_ELSEWHERE = {  # a library's own place for a class reference, beside auto_map (issue 48)
    "module type": ({"modules.json": [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pool", "type": "acme/stcode--pool.Pool"},
        {"idx": 2, "name": "2", "path": "2_Mine", "type": "custom_module.Mine"}]},
        ("modules.json", "custom_module.py", "1_Pool/config.json", "2_Mine/config.json"),
        {"acme/stcode--pool.Pool", "custom_module.Mine"}),
    "custom pipeline": ({"config.json": {"custom_pipelines": {
        "pair-classification": {"impl": "acme/pipe--pair.PairPipeline", "pt": ["AutoModel"]},
        "other": {"impl": "mine.MinePipeline"}}}},
        ("mine.py",), {"acme/pipe--pair.PairPipeline", "mine.MinePipeline"}),
    "diffusers class": ({"model_index.json": {
        "_class_name": ["pipeline_x", "XPipeline"], "vae": ["diffusers", "AutoencoderKL"],
        "unet": ["my_unet", "MyUNet"], "text_encoder": ["transformers", "CLIPTextModel"]}},
        ("model_index.json", "pipeline_x.py", "unet/my_unet.py", "unet/config.json",
         "unet/diffusion_pytorch_model.safetensors", "vae/config.json",
         "vae/diffusion_pytorch_model.safetensors", "text_encoder/config.json",
         "text_encoder/model.safetensors"),
        {"pipeline_x.XPipeline", "unet/my_unet.MyUNet"}),
}


@pytest.mark.parametrize("where", sorted(CODE_ELSEWHERE))
@pytest.mark.parametrize("loader", ["all", "own"])
def test_remote_code_outside_auto_map_is_found_under_its_loader_and_all(where: str, loader: str
                                                                        ) -> None:
    """A sentence-transformers module type outside the library, config.json's
    custom_pipelines (pipeline() runs its impl), a diffusers `_class_name` given as [module,
    class] and a component whose module is a .py in its folder: code a trust_remote_code load
    runs, recorded, and its other repo required (each passed `remote-code = "deny"`)."""
    files, extra, expected = CODE_ELSEWHERE[where]
    read = Reader({"config.json": {}, **files})
    paths = listing(*files, *extra, "config.json", "model.safetensors")
    own = {"module type": "sentence-transformers", "custom pipeline": "transformers",
           "diffusers class": "diffusers"}[where]
    choice = select(own if loader == "own" else "all", paths, read)
    assert expected <= set(choice.code), choice.code
    others = sorted({ref.split("--")[0] for ref in expected if "--" in ref})
    assert [r.id for r in choice.requires] == others
    assert all(r.include == ("*.py",) for r in choice.requires)


@pytest.mark.parametrize("loader", ["all", "diffusers"])
def test_auto_map_is_read_from_configs_in_every_folder(loader: str) -> None:
    """A pipeline keeps a model in a folder (`text_encoder/config.json`), whose auto_map
    transformers follows as for a top-level one: its code is recorded and its repo required
    (a guard: reading top-level configs only left the whole suite green)."""
    read = Reader({
        "model_index.json": {"_class_name": "StableDiffusionPipeline",
                             "text_encoder": ["transformers", "CLIPTextModel"]},
        "text_encoder/config.json": {"auto_map": {"AutoModel": "acme/enc--enc.Encoder"}}})
    paths = listing("model_index.json", "text_encoder/config.json",
                    "text_encoder/model.safetensors")
    choice = select(loader, paths, read)
    assert "acme/enc--enc.Encoder" in choice.code
    assert [r.id for r in choice.requires] == ["acme/enc"]
    assert "text_encoder/config.json's auto_map" in choice.requires[0].why


GENERATION_CONFIGS = [
    {}, {"dola_layers": "low"}, {"dola_layers": [2, 4], "do_sample": True},
    {"dola_layers": "high", "num_beams": 2}, {"dola_layers": "low", "prompt_lookup_num_tokens": 3},
    {"penalty_alpha": 0.6, "top_k": 4}, {"penalty_alpha": 0.6, "top_k": 1},
    {"penalty_alpha": 0.6, "top_k": 4, "do_sample": True}, {"penalty_alpha": 0, "top_k": 4},
    {"num_beams": 4, "num_beam_groups": 2, "diversity_penalty": 1.0}, {"num_beams": 4},
    {"num_beams": 4, "num_beam_groups": 1}, {"force_words_ids": [[1, 2]], "num_beams": 2},
    {"num_beams": 1, "do_sample": True, "top_k": 50},
]


@pytest.mark.parametrize("config", GENERATION_CONFIGS, ids=json.dumps)
def test_the_moved_generation_mode_is_the_one_transformers_picks(config: dict[str, object]
                                                                  ) -> None:
    """wlock reads generation_config.json without transformers; transformers' own
    GenerationConfig.get_generation_mode, and its map of the modes moved to Hub repos, judge
    each config."""
    from transformers import GenerationConfig
    from transformers.generation.utils import GENERATION_MODES_MAPPING

    moved = GENERATION_MODES_MAPPING[GenerationConfig(**config).get_generation_mode()]
    expected = moved.split("/")[1] if "/" in moved else None
    assert moved_generation_mode(config) == expected
