"""The judges of the resolver: repos written by each library's own `save_pretrained`, with the
other formats beside them as the real repos have them, served by the emulator; `wlock add`
locks what the loader picks, `wlock sync` fetches only that, and the library then loads the
model offline, by id at the locked revision, with the same tensors as the full repo.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import Hub, default_signals, needs, run_wlock, write_project
from wlock.lock.lockfile import read_lock

pytestmark = needs("torch")

VOCAB = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\ncat\nsat\non\nmat\nhello\nworld\n"


def tiny_bert(folder: Path, *, shard: str | None = None, safetensors: bool = True) -> Path:
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    torch.manual_seed(0)
    config = BertConfig(vocab_size=12, hidden_size=16, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=32,
                        max_position_embeddings=32)
    model = BertModel(config)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text(VOCAB)
    BertTokenizerFast(str(folder / "vocab.txt")).save_pretrained(folder)
    kwargs = {"max_shard_size": shard} if shard else {}
    model.save_pretrained(folder, safe_serialization=safetensors, **kwargs)
    if not safetensors and not (folder / "pytorch_model.bin").exists():
        # transformers 5 writes safetensors only: the pickle as 4.x's save_pretrained wrote
        # it (torch.save of the state dict), for the repos that still carry one.
        (folder / "model.safetensors").unlink()
        torch.save(model.state_dict(), folder / "pytorch_model.bin")
    return folder


def publish(hub: Hub, stem: str, folder: Path, library: str,
            extra: dict[str, bytes] | None = None) -> tuple[str, dict[str, bytes]]:
    """Commit a folder (and the other formats a real repo carries) as a repo on the emulator."""
    files = {str(p.relative_to(folder)): p.read_bytes()
             for p in sorted(folder.rglob("*")) if p.is_file()}
    files.update(extra or {})
    repo_id = hub.unique_id(stem)
    hub.builder.commit("model", repo_id, files)
    hub.builder.configure("model", repo_id, extra={"library_name": library})
    return repo_id, files


OTHER_FORMATS = {  # what bert-base-uncased carries beside its safetensors
    "tf_model.h5": b"\x89HDF\r\n" + b"\0" * 2000, "flax_model.msgpack": b"\x80" * 2000,
    "rust_model.ot": b"PK" + b"\0" * 2000, "onnx/model.onnx": b"\x08\x07" * 1000,
    "coreml/fill-mask/float32_model.mlpackage/Manifest.json": b"{}",
}


def offline(script: str, cache: Path, *args: str) -> dict[str, object]:
    """Run `script` in a fresh interpreter with HF_HUB_OFFLINE=1 against `cache`: its last
    line of stdout, as JSON."""
    import os

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(cache),
           "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("HF_ENDPOINT", None)
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args], env=env,
                          capture_output=True, text=True, timeout=300,
                          preexec_fn=default_signals)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def add_and_sync(hub: Hub, tmp_path: Path, repo_id: str, *flags: str
                 ) -> tuple[Path, Path, str]:
    project = write_project(tmp_path, "")
    added = run_wlock("add", repo_id, *flags, "--endpoint", hub.endpoint, cwd=project)
    assert added.code == 0, added.stderr
    cache = tmp_path / "cache"
    hub.process.reset_stats()
    synced = run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                       cwd=project)
    assert synced.code == 0, synced.stderr
    revision = read_lock(project / "weights.lock").find("model", repo_id)
    assert revision is not None
    return project, cache, revision.revision


def served(hub: Hub) -> set[str]:
    """The files the emulator served to the sync (by name)."""
    return {e["path"].split("/resolve/", 1)[-1].split("/", 1)[-1].split("?")[0]
            for e in hub.process.stats()["log"]
            if "/resolve/" in e["path"] and e["method"] == "GET"} | {
        e["path"].split("/", 4)[-1] for e in hub.process.stats()["log"]
        if e["listener"] == "cdn" and e["method"] == "GET"}


SAME_TENSORS = """
    import json, sys, torch
    from transformers import AutoModel, AutoTokenizer
    repo, revision, full = sys.argv[1:4]
    locked = AutoModel.from_pretrained(repo, revision=revision)
    whole = AutoModel.from_pretrained(full)
    tok = AutoTokenizer.from_pretrained(repo, revision=revision)
    a, b = locked.state_dict(), whole.state_dict()
    same = a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    print(json.dumps({"same": same, "tensors": len(a), "ids": tok("the cat sat")["input_ids"]}))
"""


@pytest.mark.parametrize("layout", ["single", "sharded", "pickle"])
def test_transformers_selection_loads_offline_with_the_full_repos_tensors(
        hub: Hub, tmp_path: Path, layout: str) -> None:
    folder = tiny_bert(tmp_path / "full", shard="20KB" if layout == "sharded" else None,
                       safetensors=layout != "pickle")
    extra = dict(OTHER_FORMATS)
    if layout == "single":  # the pickle beside the safetensors, as bert-base-uncased has it
        tiny_bert(tmp_path / "bin", safetensors=False)
        extra["pytorch_model.bin"] = (tmp_path / "bin" / "pytorch_model.bin").read_bytes()
    repo_id, files = publish(hub, f"bert-{layout}", folder, "transformers", extra)
    project, cache, revision = add_and_sync(hub, tmp_path, repo_id)
    locked = sorted(f.path for f in read_lock(project / "weights.lock").repos[0].files)
    weights = {
        "single": ["model.safetensors"],
        "sharded": sorted(p for p in files if p.startswith("model-") or p.endswith(".index.json")),
        "pickle": ["pytorch_model.bin"],
    }[layout]
    assert len(weights) > (2 if layout == "sharded" else 0)
    # Every config and tokenizer file save_pretrained wrote (which ones depends on the
    # transformers release), and the one format of the weights; nothing else.
    beside = [p for p in files if p not in extra and not p.endswith(
        (".safetensors", ".bin", ".index.json"))]
    assert {"config.json", "tokenizer_config.json"} <= set(beside)
    assert locked == sorted([*beside, *weights])
    assert not served(hub) & set(OTHER_FORMATS)
    result = offline(SAME_TENSORS, cache, repo_id, revision, str(folder))
    assert result["same"] is True and result["tensors"] > 10
    assert result["ids"] == [2, 5, 6, 7, 3]


def test_sentence_transformers_selection_gives_the_same_embeddings(
        hub: Hub, tmp_path: Path) -> None:
    from sentence_transformers import SentenceTransformer, models

    bert = tiny_bert(tmp_path / "bert")
    transformer = models.Transformer(str(bert), max_seq_length=16)
    pooling = models.Pooling(transformer.get_word_embedding_dimension())
    full = tmp_path / "full"
    SentenceTransformer(modules=[transformer, pooling, models.Normalize()]).save(str(full))
    extra = {"onnx/model.onnx": b"\x08" * 3000, "openvino/openvino_model.bin": b"\0" * 3000,
             "openvino/openvino_model.xml": b"<net/>", "tf_model.h5": b"\x89HDF" * 500}
    repo_id, files = publish(hub, "minilm", full, "sentence-transformers", extra)
    project, cache, revision = add_and_sync(hub, tmp_path, repo_id)
    locked = {f.path for f in read_lock(project / "weights.lock").repos[0].files}
    assert locked == {p for p in files if p not in extra}
    assert "modules.json" in locked and "1_Pooling/config.json" in locked
    result = offline("""
        import json, sys, torch
        from sentence_transformers import SentenceTransformer
        repo, revision, full = sys.argv[1:4]
        a = SentenceTransformer(repo, revision=revision).encode(["the cat sat on the mat"])
        b = SentenceTransformer(full).encode(["the cat sat on the mat"])
        print(json.dumps({"same": bool((a == b).all()), "dim": int(a.shape[1])}))
    """, cache, repo_id, revision, str(full))
    assert result == {"same": True, "dim": 16}


def test_diffusers_variant_selection_loads_the_pipeline_offline(
        hub: Hub, tmp_path: Path) -> None:
    import torch
    from diffusers import DDPMPipeline, DDPMScheduler, UNet2DModel

    torch.manual_seed(0)
    unet = UNet2DModel(sample_size=8, in_channels=3, out_channels=3, layers_per_block=1,
                       block_out_channels=(8, 16), norm_num_groups=4,
                       down_block_types=("DownBlock2D", "DownBlock2D"),
                       up_block_types=("UpBlock2D", "UpBlock2D"))
    pipeline = DDPMPipeline(unet=unet, scheduler=DDPMScheduler(num_train_timesteps=10))
    full = tmp_path / "full"
    pipeline.save_pretrained(full)
    pipeline.to(torch.float16).save_pretrained(full, variant="fp16")
    extra = {"unet/diffusion_pytorch_model.bin": b"\x80" * 3000,
             "ddpm-pruned.ckpt": b"\x80" * 3000}
    repo_id, _ = publish(hub, "ddpm", full, "diffusers", extra)
    project, cache, revision = add_and_sync(hub, tmp_path, repo_id, "--variant", "fp16")
    locked = sorted(f.path for f in read_lock(project / "weights.lock").repos[0].files)
    assert locked == ["model_index.json", "scheduler/scheduler_config.json",
                      "unet/config.json", "unet/diffusion_pytorch_model.fp16.safetensors"]
    result = offline("""
        import json, sys, torch
        from diffusers import DDPMPipeline
        repo, revision, full = sys.argv[1:4]
        a = DDPMPipeline.from_pretrained(repo, revision=revision, variant="fp16",
                                         torch_dtype=torch.float16).unet
        b = DDPMPipeline.from_pretrained(full, variant="fp16", torch_dtype=torch.float16).unet
        sa, sb = a.state_dict(), b.state_dict()
        same = sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
        print(json.dumps({"same": same, "dtype": str(next(iter(sa.values())).dtype)}))
    """, cache, repo_id, revision, str(full))
    assert result == {"same": True, "dtype": "torch.float16"}


def test_an_adapter_and_its_base_load_offline_under_wlock_run(
        hub: Hub, tmp_path: Path) -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    base_folder = tmp_path / "base"
    base_model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50,
                                            n_positions=16))
    base_model.save_pretrained(base_folder)
    base_id, _ = publish(hub, "gpt2-base", base_folder, "transformers",
                         {"tf_model.h5": b"\x89HDF" * 500})
    base_commit = hub.builder.commit("model", base_id, {"README.md": b"# base\n"})
    hub.builder.commit("model", base_id, {"config.json": b"{}"})  # main moves on, broken
    lora = get_peft_model(base_model, LoraConfig(r=4, target_modules=["c_attn"],
                                                 init_lora_weights=False))
    lora.peft_config["default"].base_model_name_or_path = base_id
    lora.peft_config["default"].revision = base_commit
    adapter_folder = tmp_path / "adapter"
    lora.save_pretrained(adapter_folder, save_embedding_layers=False)  # no lookup online
    lora.eval()  # as from_pretrained leaves it: no dropout
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        expected = lora(ids).logits.flatten().tolist()
    adapter_id, _ = publish(hub, "gpt2-lora", adapter_folder, "peft",
                            {"adapter_model.bin": b"\x80" * 1000})

    project, cache, _ = add_and_sync(hub, tmp_path, adapter_id)
    lock = read_lock(project / "weights.lock")
    assert sorted(r.id for r in lock.repos) == sorted([adapter_id, base_id])
    base = lock.find("model", base_id)
    assert base is not None and base.revision == base_commit
    assert lock.find("model", adapter_id).requires == (base_id,)  # type: ignore[union-attr]
    got = logits_under_run(project, cache, tmp_path, "from peft import AutoPeftModelForCausalLM",
                           f"AutoPeftModelForCausalLM.from_pretrained({adapter_id!r})")
    assert got == pytest.approx(expected, abs=1e-5)


def logits_under_run(project: Path, cache: Path, tmp_path: Path, imports: str, load: str
                     ) -> list[float]:
    """The logits of the model `load` gives (after `imports`) for [[1, 2, 3, 4]], computed
    by a script under `wlock run`, offline."""
    script = tmp_path / "load.py"
    script.write_text(f"import json, torch\n{imports}\nmodel = {load}\n"
                      "with torch.no_grad():\n"
                      "    print(json.dumps(model(torch.tensor([[1, 2, 3, 4]])).logits"
                      ".flatten().tolist()))\n")
    ran = run_wlock("run", "--cache-dir", str(cache), "--", sys.executable, str(script),
                    cwd=project, env={"HF_HUB_OFFLINE": "1"})
    assert ran.code == 0, ran.stderr[-3000:]
    got: list[float] = json.loads(ran.stdout.strip().splitlines()[-1])
    return got


@pytest.mark.parametrize("projector", ["mmproj-tiny-f16.gguf", "vision/mmproj-tiny-f16.gguf",
                                       "tiny-vision-encoder-f16.gguf"])
def test_gguf_selection_is_one_quantization_read_back_offline(hub: Hub, tmp_path: Path,
                                                              projector: str) -> None:
    """GGUF files written by llama.cpp's own gguf package, one per quantization; the lock
    takes the one `--variant` names, and its tensors read back offline as llama.cpp's
    `Llama.from_pretrained` fetches it (hf_hub_download of that file). The vision projector
    is known by its header (`general.architecture = "clip"`), whatever its name or folder,
    and locked with the quantization (seen failing for the third name, taken for a
    quantization and left out, while the rule went by `mmproj*`)."""
    gguf = pytest.importorskip("gguf")
    import numpy as np

    full = tmp_path / "full"
    full.mkdir()
    rng = np.random.default_rng(0)
    weights = rng.standard_normal((4, 64)).astype(np.float32)
    for name, kind in (("F32", None), ("F16", "f16"), ("Q8_0", gguf.GGMLQuantizationType.Q8_0),
                       ("mmproj", "f16")):
        # The last: a vision model's projector, as llama.cpp's converter names it (clip).
        file = projector if name == "mmproj" else f"tiny.{name}.gguf"
        (full / file).parent.mkdir(parents=True, exist_ok=True)
        writer = gguf.GGUFWriter(str(full / file), "clip" if name == "mmproj" else "llama")
        writer.add_block_count(1)
        if kind is None:
            writer.add_tensor("w", weights)
        elif kind == "f16":
            writer.add_tensor("w", weights.astype(np.float16))
        else:
            data = gguf.quants.quantize(weights, kind)
            writer.add_tensor("w", data, raw_shape=data.shape, raw_dtype=kind)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
    (full / "README.md").write_text("# tiny\n")
    repo_id, _ = publish(hub, "gguf", full, "gguf")
    project, cache, revision = add_and_sync(hub, tmp_path, repo_id, "--variant", "Q8_0")
    locked = sorted(f.path for f in read_lock(project / "weights.lock").repos[0].files)
    # The projector with the quantization chosen: llama.cpp needs it with any (issue 37).
    assert locked == sorted(["README.md", projector, "tiny.Q8_0.gguf"])
    result = offline("""
        import json, sys
        import numpy as np
        from gguf import GGUFReader
        from huggingface_hub import hf_hub_download
        repo, revision, full, projector = sys.argv[1:5]
        path = hf_hub_download(repo, "tiny.Q8_0.gguf", revision=revision)
        a = GGUFReader(path).tensors[0]
        b = GGUFReader(full + "/tiny.Q8_0.gguf").tensors[0]
        proj = GGUFReader(hf_hub_download(repo, projector, revision=revision))
        print(json.dumps({"same": bool(np.array_equal(a.data, b.data)),
                          "type": a.tensor_type.name, "projector": proj.tensors[0].tensor_type.name}))
    """, cache, repo_id, revision, str(full), projector)
    assert result == {"same": True, "type": "Q8_0", "projector": "F16"}


# What the library opened under the snapshot while it loaded: the guard against the next
# missing file (issue 37). Loaded from a sync of the whole repo, every path it opens must be
# one the loader locked.
OPENED = """
    import json, os, sys
    opened = set()
    def _audit(event, args):
        if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
            path = os.fsdecode(args[0])
            if "/snapshots/" in path:
                opened.add(path.split("/snapshots/", 1)[1].split("/", 1)[1])
    sys.addaudithook(_audit)
"""

CHAT_TEMPLATES = OPENED + """
    from transformers import AutoTokenizer
    repo, revision, full = sys.argv[1:4]
    chat = [{"role": "user", "content": "hello"}]
    out = {}
    for name, tok in (("locked", AutoTokenizer.from_pretrained(repo, revision=revision)),
                      ("full", AutoTokenizer.from_pretrained(full))):
        out[name] = [tok.apply_chat_template(chat, tokenize=False),
                     tok.apply_chat_template(chat, chat_template="tool_use", tokenize=False)]
    out["opened"] = sorted(opened)
    print(json.dumps(out))
"""


def test_a_tokenizer_with_several_chat_templates_keeps_them_all(hub: Hub, tmp_path: Path
                                                               ) -> None:
    """save_pretrained keeps the second template in `additional_chat_templates/`: a rule that
    took small files from the top folder only locked one, and offline
    `apply_chat_template(chat_template="tool_use")` rendered the literal text "tool_use"."""
    from transformers import AutoTokenizer

    folder = tiny_bert(tmp_path / "full")
    tok = AutoTokenizer.from_pretrained(folder)
    tok.chat_template = {"default": "{% for m in messages %}{{ m['content'] }}{% endfor %}",
                         "tool_use": "TOOLS {% for m in messages %}{{ m['content'] }}"
                                     "{% endfor %}"}
    tok.save_pretrained(folder)
    assert (folder / "additional_chat_templates" / "tool_use.jinja").exists()
    repo_id, _ = publish(hub, "chat", folder, "transformers", dict(OTHER_FORMATS))
    project, cache, revision = add_and_sync(hub, tmp_path, repo_id)
    locked = {f.path for f in read_lock(project / "weights.lock").repos[0].files}
    assert "additional_chat_templates/tool_use.jinja" in locked
    result = offline(CHAT_TEMPLATES, cache, repo_id, revision, str(folder))
    assert result["locked"] == result["full"] == ["hello", "TOOLS hello"]
    opened = set(offline(CHAT_TEMPLATES, whole_sync(hub, tmp_path, repo_id), repo_id,
                         revision, str(folder))["opened"])  # type: ignore[arg-type]
    assert "additional_chat_templates/tool_use.jinja" in opened
    assert opened <= locked, opened - locked


BPE_CODES = OPENED + """
    from transformers import AutoTokenizer
    repo, revision, full = sys.argv[1:4]
    ids = [AutoTokenizer.from_pretrained(where, **kw)("xin chào")["input_ids"]
           for where, kw in ((repo, {"revision": revision}), (full, {}))]
    print(json.dumps({"ids": ids, "opened": sorted(opened)}))
"""


def test_a_tokenizer_whose_merges_are_in_bpe_codes_loads_offline(hub: Hub, tmp_path: Path
                                                                 ) -> None:
    """PhoBERT and BERTweet keep their merges in `bpe.codes`, a suffix no list of small
    files had: the offline load crashed."""
    from transformers import PhobertTokenizer

    source = tmp_path / "src"
    source.mkdir()
    (source / "vocab.txt").write_text("xin 5\nch@@ 4\nào 3\nc@@ 2\nhào 2\n")
    (source / "bpe.codes").write_text("c h 10\nch à@@ 5\nx i 3\n")
    folder = tmp_path / "full"
    PhobertTokenizer(str(source / "vocab.txt"), str(source / "bpe.codes")).save_pretrained(
        folder)
    assert (folder / "bpe.codes").exists()
    (folder / "config.json").write_text(json.dumps({"model_type": "roberta"}))
    repo_id, _ = publish(hub, "phobert", folder, "transformers", dict(OTHER_FORMATS))
    project, cache, revision = add_and_sync(hub, tmp_path, repo_id)
    locked = {f.path for f in read_lock(project / "weights.lock").repos[0].files}
    assert "bpe.codes" in locked
    result = offline(BPE_CODES, cache, repo_id, revision, str(folder))
    ids = result["ids"]
    assert isinstance(ids, list) and ids[0] == ids[1] and len(ids[0]) > 2
    opened = set(offline(BPE_CODES, whole_sync(hub, tmp_path, repo_id), repo_id, revision,
                         str(folder))["opened"])  # type: ignore[arg-type]
    assert "bpe.codes" in opened
    assert opened <= locked, opened - locked


def whole_sync(hub: Hub, tmp_path: Path, repo_id: str) -> Path:
    """A cache holding every file of the repo (`loader = "all"`), for the guard."""
    project = write_project(tmp_path / "whole", f'[[model]]\nid = "{repo_id}"\n'
                            'loader = "all"\n')
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    cache = tmp_path / "whole-cache"
    assert run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                     cwd=project).code == 0
    return cache


def test_an_adapter_whose_base_is_a_local_folder_is_locked_with_the_base_named(
        hub: Hub, tmp_path: Path) -> None:
    """adapter_config.json names the folder it was trained from (`outputs/llama-base`): the
    add says so, naming the file and the key, and `--base` names the base on the entry;
    then both load offline, as a load of the full repos does."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    base_model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50,
                                            n_positions=16))
    base_model.save_pretrained(tmp_path / "base")
    base_id, _ = publish(hub, "local-base", tmp_path / "base", "transformers")
    lora = get_peft_model(base_model, LoraConfig(r=4, target_modules=["c_attn"],
                                                 init_lora_weights=False))
    lora.peft_config["default"].base_model_name_or_path = "outputs/llama-base"
    lora.save_pretrained(tmp_path / "adapter", save_embedding_layers=False)
    adapter_id, _ = publish(hub, "local-lora", tmp_path / "adapter", "peft")
    project = write_project(tmp_path / "p", "")
    added = run_wlock("add", adapter_id, "--endpoint", hub.endpoint, cwd=project)
    assert added.code == 5, added.stderr  # the folder's name is no repo on the Hub
    assert "model outputs/llama-base was not found" in added.stderr
    assert "adapter_config.json's `base_model_name_or_path`" in added.stderr
    assert 'base = "org/name@ref"' in added.stderr
    assert (project / "weights.toml").read_text() == ""
    added = run_wlock("add", adapter_id, "--base", f"{base_id}@main", "--endpoint",
                      hub.endpoint, cwd=project)
    assert added.code == 0, added.stderr
    lock = read_lock(project / "weights.lock")
    assert sorted(r.id for r in lock.repos) == sorted([adapter_id, base_id])
    cache = tmp_path / "cache"
    assert run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                     cwd=project).code == 0
    result = offline("""
        import json, sys, torch
        from peft import PeftModel
        from transformers import AutoModelForCausalLM
        adapter, revision, base, base_revision, full_adapter, full_base = sys.argv[1:7]
        ids = torch.tensor([[1, 2, 3, 4]])
        out = []
        for a, ar, b, br in ((adapter, revision, base, base_revision),
                             (full_adapter, None, full_base, None)):
            model = PeftModel.from_pretrained(
                AutoModelForCausalLM.from_pretrained(b, revision=br), a, revision=ar).eval()
            with torch.no_grad():
                out.append(model(ids).logits.flatten().tolist())
        print(json.dumps({"same": out[0] == out[1]}))
    """, cache, adapter_id, lock.find("model", adapter_id).revision,  # type: ignore[union-attr]
        base_id, lock.find("model", base_id).revision,  # type: ignore[union-attr]
        str(tmp_path / "adapter"), str(tmp_path / "base"))
    assert result == {"same": True}


VARIANT_LOAD = OPENED + """
    import torch
    from transformers import AutoModel
    repo, revision, full = sys.argv[1:4]
    # dtype="auto": the saved dtype (transformers 4.x would upcast to float32 without it)
    a = AutoModel.from_pretrained(repo, revision=revision, variant="fp16",
                                  dtype="auto").state_dict()
    b = AutoModel.from_pretrained(full, variant="fp16", dtype="auto").state_dict()
    same = a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    print(json.dumps({"same": same, "dtype": str(next(iter(a.values())).dtype),
                      "opened": sorted(opened)}))
"""


def test_a_variants_index_is_locked_with_its_shards_and_loads_offline(
        hub: Hub, tmp_path: Path) -> None:
    """save_pretrained(variant="fp16") beside the default, both sharded: `--variant fp16`
    locks the fp16 index and exactly the shards it names, never the default's."""
    import torch
    from transformers import AutoModel

    folder = tiny_bert(tmp_path / "full", shard="20KB")
    AutoModel.from_pretrained(folder).to(torch.float16).save_pretrained(
        folder, variant="fp16", max_shard_size="8KB")
    repo_id, files = publish(hub, "bert-variant", folder, "transformers")
    index = "model.safetensors.index.fp16.json"
    assert index in files and "model.safetensors.index.json" in files
    project, cache, revision = add_and_sync(hub, tmp_path, repo_id, "--variant", "fp16")
    locked = {f.path for f in read_lock(project / "weights.lock").repos[0].files}
    named = set(json.loads(files[index])["weight_map"].values())
    assert len(named) > 1 and named | {index} <= locked
    assert not {p for p in locked if p.endswith((".safetensors", ".index.json"))
                } - named - {index}, locked
    result = offline(VARIANT_LOAD, cache, repo_id, revision, str(folder))
    assert result["same"] is True and result["dtype"] == "torch.float16"
    seen = set(offline(VARIANT_LOAD, whole_sync(hub, tmp_path, repo_id), repo_id, revision,
                       str(folder))["opened"])  # type: ignore[arg-type]
    assert index in seen and seen <= locked, seen - locked


PROCESSOR_CODE = '''
from transformers.image_processing_utils import BaseImageProcessor


class TinyImageProcessor(BaseImageProcessor):
    model_input_names = ["pixel_values"]

    def __init__(self, scale=1.0, **kwargs):
        super().__init__(**kwargs)
        self.scale = scale
'''


@pytest.mark.parametrize("loader", [None, "all"])
def test_processor_remote_code_from_another_repo_is_locked_and_runs_offline(
        hub: Hub, tmp_path: Path, loader: str | None) -> None:
    """preprocessor_config.json's auto_map names a class in another repo: the add locks that
    repo's code, and AutoImageProcessor(trust_remote_code=True) runs it offline; under the
    default loader and under `loader = "all"` alike (which skipped the remote-code step:
    no requirement, and the offline load failed)."""
    code_id = hub.unique_id("processor-code")
    hub.builder.commit("model", code_id, {"image_processing_tiny.py": PROCESSOR_CODE.encode(),
                                          "README.md": b"# code\n"})
    folder = tiny_bert(tmp_path / "full")
    (folder / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "TinyImageProcessor", "scale": 0.5,
        "auto_map": {"AutoImageProcessor": f"{code_id}--image_processing_tiny."
                                           "TinyImageProcessor"}}))
    repo_id, _ = publish(hub, "with-processor", folder, "transformers")
    project, cache, revision = add_and_sync(hub, tmp_path, repo_id,
                                            *(("--loader", loader) if loader else ()))
    lock = read_lock(project / "weights.lock")
    code = lock.find("model", code_id)
    assert code is not None and [f.path for f in code.files] == ["image_processing_tiny.py"]
    assert code_id in lock.find("model", repo_id).requires  # type: ignore[union-attr]
    result = offline("""
        import json, sys
        from transformers import AutoImageProcessor
        repo, revision, full = sys.argv[1:4]
        p = AutoImageProcessor.from_pretrained(repo, revision=revision, trust_remote_code=True)
        print(json.dumps({"class": type(p).__name__, "scale": p.scale}))
    """, cache, repo_id, revision, str(folder))
    assert result == {"class": "TinyImageProcessor", "scale": 0.5}


def router_model(tmp_path: Path) -> Path:
    """A sentence-transformers Router (a query and a document route) as the library saves
    it, in `tmp_path / "full"`."""
    from sentence_transformers import SentenceTransformer, models

    query = models.Transformer(str(tiny_bert(tmp_path / "q")), max_seq_length=16)
    document = models.Transformer(str(tiny_bert(tmp_path / "d")), max_seq_length=16)
    router = models.Router.for_query_document(query_modules=[query],
                                              document_modules=[document])
    full = tmp_path / "full"
    SentenceTransformer(modules=[router, models.Pooling(16)]).save(str(full))
    return full


# Queries and documents encoded by the locked repo (offline) and by the full save, alike.
ROUTER_SAME = """
    import json, sys
    from sentence_transformers import SentenceTransformer
    repo, revision, full = sys.argv[1:4]
    locked, whole = SentenceTransformer(repo, revision=revision), SentenceTransformer(full)
    text = ["the cat sat on the mat"]
    same = bool((locked.encode_query(text) == whole.encode_query(text)).all()) and bool(
        (locked.encode_document(text) == whole.encode_document(text)).all())
    print(json.dumps({"same": same}))
"""


def test_a_router_models_sub_modules_are_locked_and_load_offline(hub: Hub, tmp_path: Path
                                                                ) -> None:
    """sentence-transformers' Router (asymmetric query/document encoders) keeps each route's
    modules in folders modules.json does not list (`query_0_Transformer/`, named in
    router_config.json): their weights are locked, and the model encodes queries and
    documents offline as the full save does. Seen failing (the routes' model.safetensors
    left out, the offline load failing) before the rule followed router_config.json."""
    full = router_model(tmp_path)
    extra = {"onnx/model.onnx": b"\x08" * 3000}
    repo_id, files = publish(hub, "router", full, "sentence-transformers", extra)
    project, cache, revision = add_and_sync(hub, tmp_path, repo_id)
    locked = {f.path for f in read_lock(project / "weights.lock").repos[0].files}
    assert locked == {p for p in files if p not in extra}
    assert {"query_0_Transformer/model.safetensors",
            "document_0_Transformer/model.safetensors"} <= locked
    assert offline(ROUTER_SAME, cache, repo_id, revision, str(full)) == {"same": True}


def test_a_single_diffusers_component_is_locked_and_loads_offline(hub: Hub, tmp_path: Path
                                                                 ) -> None:
    """A repo holding one diffusers model (a VAE, as `AutoencoderKL.save_pretrained` writes
    it, with an fp16 variant and a pickle copy beside it): locked by the diffusers loader
    (it was refused: "no model_index.json"), one format of the weights, and loaded offline
    by its class at the locked commit with the full save's tensors."""
    import torch
    from diffusers import AutoencoderKL

    torch.manual_seed(0)
    vae = AutoencoderKL(block_out_channels=(8,), norm_num_groups=4, latent_channels=2,
                        sample_size=8)
    full = tmp_path / "full"
    vae.save_pretrained(full)
    vae.to(torch.float16).save_pretrained(full, variant="fp16")
    extra = {"diffusion_pytorch_model.bin": b"\x80" * 3000}
    repo_id, _ = publish(hub, "vae", full, "diffusers", extra)
    project, cache, revision = add_and_sync(hub, tmp_path, repo_id)
    locked = sorted(f.path for f in read_lock(project / "weights.lock").repos[0].files)
    assert locked == ["config.json", "diffusion_pytorch_model.safetensors"]
    result = offline("""
        import json, sys, torch
        from diffusers import AutoencoderKL
        repo, revision, full = sys.argv[1:4]
        a = AutoencoderKL.from_pretrained(repo, revision=revision).state_dict()
        b = AutoencoderKL.from_pretrained(full).state_dict()
        print(json.dumps({"same": a.keys() == b.keys() and all(
            torch.equal(a[k], b[k]) for k in a)}))
    """, cache, repo_id, revision, str(full))
    assert result == {"same": True}


@pytest.mark.parametrize("kind", ["SparseEncoder", "CrossEncoder"])
def test_sparse_and_cross_encoders_are_locked_and_give_the_same_scores(
        hub: Hub, tmp_path: Path, kind: str) -> None:
    """A SPLADE sparse encoder (MLMTransformer + SpladePooling) and a cross-encoder, as
    sentence-transformers' own `save` writes them, beside the exports real repos carry:
    locked with the default loader, synced, and loaded offline by their classes at the locked
    commit, giving the full save's outputs."""
    import torch
    from sentence_transformers import CrossEncoder, SparseEncoder
    from sentence_transformers.sparse_encoder.models import MLMTransformer, SpladePooling
    from transformers import BertConfig, BertForMaskedLM

    bert = tiny_bert(tmp_path / "bert")
    torch.manual_seed(0)
    BertForMaskedLM(BertConfig.from_pretrained(bert)).save_pretrained(bert)
    full = tmp_path / "full"
    if kind == "SparseEncoder":
        SparseEncoder(modules=[MLMTransformer(str(bert)), SpladePooling("max")]).save(str(full))
    else:
        CrossEncoder(str(bert), num_labels=1).save(str(full))
    extra = {"onnx/model.onnx": b"\x08" * 3000, "openvino/openvino_model.bin": b"\0" * 3000,
             "openvino/openvino_model.xml": b"<net/>", "pytorch_model.bin": b"\0" * 3000}
    repo_id, files = publish(hub, kind.lower(), full, "sentence-transformers", extra)
    project, cache, revision = add_and_sync(hub, tmp_path, repo_id)
    locked = {f.path for f in read_lock(project / "weights.lock").repos[0].files}
    assert locked == {p for p in files if p not in extra}
    result = offline("""
        import json, sys
        import sentence_transformers as st
        repo, revision, full, kind = sys.argv[1:5]
        cls = getattr(st, kind)
        def out(model):
            if kind == "CrossEncoder":
                return model.predict([("the cat", "sat on the mat")]).tolist()
            return model.encode(["the cat sat on the mat"]).to_dense().tolist()
        a = out(cls(repo, revision=revision, device="cpu"))
        b = out(cls(full, device="cpu"))
        print(json.dumps({"same": a == b}))
    """, cache, repo_id, revision, str(full), kind)
    assert result == {"same": True}


def test_a_speaker_file_with_a_weight_suffix_is_locked_and_loads_offline(
        hub: Hub, tmp_path: Path) -> None:
    """Qwen2.5-Omni's `from_pretrained` reads `spk_dict.pt` by name beside its safetensors (a
    torch.save of the voices): the transformers rule took it for a pickle copy of the weights
    and left it out, and the offline load failed. A tiny model saved by the library itself,
    with the speaker file and a pickle copy of the weights beside it: the speaker file is
    locked, the copy is not, and the model loads offline by id with its voices."""
    import torch

    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, "Qwen2_5OmniForConditionalGeneration"):
        pytest.skip("this transformers has no Qwen2.5-Omni")
    from transformers import Qwen2_5OmniConfig, Qwen2_5OmniForConditionalGeneration

    text = {"vocab_size": 64, "hidden_size": 16, "intermediate_size": 32,
            "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
            "rope_scaling": {"type": "default", "rope_type": "default",
                             "mrope_section": [1, 1, 2]}}
    vision = {"depth": 1, "hidden_size": 16, "intermediate_size": 32, "num_heads": 2,
              "out_hidden_size": 16, "fullatt_block_indexes": [0], "patch_size": 2,
              "spatial_merge_size": 1, "temporal_patch_size": 1}
    audio = {"encoder_layers": 1, "d_model": 16, "encoder_attention_heads": 2,
             "encoder_ffn_dim": 32, "output_dim": 16, "num_mel_bins": 8,
             "max_source_positions": 16, "n_window": 2}
    config = Qwen2_5OmniConfig(thinker_config={"text_config": text, "vision_config": vision,
                                               "audio_config": audio},
                               enable_audio_output=False)
    torch.manual_seed(0)
    full = tmp_path / "full"
    Qwen2_5OmniForConditionalGeneration(config).save_pretrained(full)
    torch.save({"Chelsie": {"cond": torch.arange(3.0)}}, full / "spk_dict.pt")
    extra = {"pytorch_model.bin": b"\0" * 3000}
    repo_id, _ = publish(hub, "omni", full, "transformers", extra)
    project, cache, revision = add_and_sync(hub, tmp_path, repo_id)
    locked = {f.path for f in read_lock(project / "weights.lock").repos[0].files}
    assert "spk_dict.pt" in locked and "pytorch_model.bin" not in locked
    result = offline("""
        import json, sys, torch
        from transformers import Qwen2_5OmniForConditionalGeneration as Omni
        repo, revision, full = sys.argv[1:4]
        a = Omni.from_pretrained(repo, revision=revision)
        b = Omni.from_pretrained(full)
        x, y = a.state_dict(), b.state_dict()
        print(json.dumps({"voices": sorted(a.speaker_map), "cond": a.speaker_map[
            "Chelsie"]["cond"].tolist(), "same": x.keys() == y.keys() and all(
            torch.equal(x[k], y[k]) for k in x)}))
    """, cache, repo_id, revision, str(full))
    assert result == {"voices": ["Chelsie"], "cond": [0.0, 1.0, 2.0], "same": True}
