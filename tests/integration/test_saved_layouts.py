"""Layouts the libraries' own save functions write, each added with the default flags, synced,
and loaded back offline by the library (issue 57): a merged model uploaded with its LoRA
files, PEFT's `selected_adapters` without the default (no adapter at the root), the older
AutoGPTQ layout, AutoAWQ's (both built byte-faithful: their libraries need CUDA), a dataset card naming one `data_files` entry per split, a
sentence-transformers Router saved with the legacy `config.json`. (PEFT with several adapters:
tests/integration/test_load_gate_breakages.py, whose gate loads the second adapter from the
synced snapshot through peft's `load_adapter`.)
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import Hub, needs, run_wlock
from tests.integration import test_datasets_real as data
from tests.integration.test_load_gate_breakages import gpt2
from tests.integration.test_loaders_real import (
    ROUTER_SAME,
    add_and_sync,
    logits_under_run,
    offline,
    publish,
    router_model,
    tiny_bert,
)
from wlock.lock.lockfile import read_lock

pytestmark = needs("torch")


def test_a_merged_model_uploaded_with_its_lora_files_loads_offline(hub: Hub, tmp_path: Path
                                                                   ) -> None:
    """With peft installed, `from_pretrained` loads an adapter whenever adapter_config.json
    is there, on the base it names: the adapter's weights and that base are locked, and it
    loads by id under `wlock run`. Seen failing with adapter_model.safetensors left out (the
    load's OSError)."""
    import torch
    from peft import LoraConfig, get_peft_model

    base = gpt2(tmp_path / "base")
    base_id, _ = publish(hub, "merged-base", tmp_path / "base", "transformers")
    model = get_peft_model(base, LoraConfig(r=4, target_modules=["c_attn"],
                                            init_lora_weights=False))
    model.peft_config["default"].base_model_name_or_path = base_id
    folder = tmp_path / "merged"
    model.save_pretrained(folder, save_embedding_layers=False)
    model.eval()
    with torch.no_grad():
        expected = model(torch.tensor([[1, 2, 3, 4]])).logits.flatten().tolist()
    model.merge_and_unload().save_pretrained(folder)
    repo_id, _ = publish(hub, "merged", folder, "transformers")
    project, cache, _ = add_and_sync(hub, tmp_path, repo_id)
    lock = read_lock(project / "weights.lock")
    entry = lock.find("model", repo_id)
    assert entry is not None and entry.requires == (base_id,)
    assert {"adapter_config.json", "adapter_model.safetensors"} <= {f.path for f in entry.files}
    got = logits_under_run(project, cache, tmp_path, "from transformers import "
                           "AutoModelForCausalLM",
                           f"AutoModelForCausalLM.from_pretrained({repo_id!r})")
    assert got == pytest.approx(expected, abs=1e-5)
    # Pinned, it does not load: transformers passes the adapter repo's revision on to the
    # base (`from_pretrained(id, revision=commit)` asks for the base at that commit), and
    # the gate, loading as pinned code does, says so naming the base's file.
    gate = run_wlock("check", "--load", "--python", sys.executable, "--cache-dir", str(cache),
                     "--json", cwd=project)
    loads = {e["repo_id"]: e for e in json.loads(gate.stdout)["loads"]}
    assert gate.code == 1 and loads[base_id]["status"] == "loaded", gate.stdout
    assert f"{base_id}'s config.json" in loads[repo_id]["error"], loads[repo_id]
    assert loads[repo_id]["wanted"] is None


def test_peft_selected_adapters_saved_alone_load_offline(hub: Hub, tmp_path: Path) -> None:
    """`save_pretrained(selected_adapters=["second"])` writes only `second/` (each adapter
    but "default" in a folder of its own, none at the root): the default add locks it (it
    was refused: "no adapter_config.json"), the gate loads it, and it loads under `wlock
    run` from the synced snapshot's folder. (By id with `subfolder="second"`, peft 0.21
    asks for `second/second/adapter_model.safetensors`, online as offline: its bug.)"""
    import torch
    from peft import LoraConfig, get_peft_model

    base = gpt2(tmp_path / "base")
    base_id, _ = publish(hub, "selected-base", tmp_path / "base", "transformers")
    model = get_peft_model(base, LoraConfig(r=4, target_modules=["c_attn"],
                                            init_lora_weights=False))
    model.add_adapter("second", LoraConfig(r=2, target_modules=["c_attn"],
                                           init_lora_weights=False))
    for config in model.peft_config.values():
        config.base_model_name_or_path = base_id
    folder = tmp_path / "selected"
    model.save_pretrained(folder, selected_adapters=["second"], save_embedding_layers=False)
    assert not (folder / "adapter_config.json").exists()
    model.set_adapter("second")
    model.eval()
    with torch.no_grad():
        expected = model(torch.tensor([[1, 2, 3, 4]])).logits.flatten().tolist()
    repo_id, _ = publish(hub, "selected", folder, "peft")
    project, cache, _ = add_and_sync(hub, tmp_path, repo_id)
    entry = read_lock(project / "weights.lock").find("model", repo_id)
    assert entry is not None
    assert {"second/adapter_config.json", "second/adapter_model.safetensors"} <= {
        f.path for f in entry.files}
    got = logits_under_run(
        project, cache, tmp_path, "from transformers import AutoModelForCausalLM\n"
        "from peft import PeftModel",
        f"PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained({base_id!r}), "
        f"__import__('os').path.join(__import__('huggingface_hub').snapshot_download("
        f"{repo_id!r}), 'second'))")
    assert got == pytest.approx(expected, abs=1e-5)
    gate = run_wlock("check", "--load", "--python", sys.executable, "--cache-dir", str(cache),
                     "--json", cwd=project)
    loads = {e["repo_id"]: e for e in json.loads(gate.stdout)["loads"]}
    assert gate.code == 0, loads


def test_the_older_autogptq_layout_keeps_the_weights_its_config_names(hub: Hub, tmp_path: Path
                                                                      ) -> None:
    """`gptq_model-4bit-128g.safetensors` + `quantize_config.json`, as TheBloke's thousands of
    repos are. AutoGPTQ (CUDA kernels, no wheel for this machine) cannot be installed here, so
    the layout is built byte-faithful to such a repo (the files and names AutoGPTQ 0.7's
    `save_quantized` writes, quantize_config.json as it writes it) and its weights are read
    back offline by safetensors, the reader `from_quantized` loads them with. Seen failing
    with the weights left out."""
    import torch
    from safetensors.torch import save_file

    folder = tiny_bert(tmp_path / "gptq")
    (folder / "model.safetensors").unlink()
    tensors = {"model.layers.0.self_attn.q_proj.qweight": torch.zeros((2, 16), dtype=torch.int32),
               "model.layers.0.self_attn.q_proj.scales": torch.ones((1, 16), dtype=torch.float16)}
    save_file(tensors, str(folder / "gptq_model-4bit-128g.safetensors"), {"format": "pt"})
    (folder / "quantize_config.json").write_text(json.dumps({
        "bits": 4, "group_size": 128, "damp_percent": 0.01, "desc_act": False,
        "static_groups": False, "sym": True, "true_sequential": True,
        "model_name_or_path": None, "model_file_base_name": None}, indent=2))
    repo_id, _ = publish(hub, "gptq", folder, "transformers")
    project, cache, revision = add_and_sync(hub, tmp_path, repo_id)
    locked = {f.path for f in read_lock(project / "weights.lock").repos[0].files}
    assert {"gptq_model-4bit-128g.safetensors", "quantize_config.json"} <= locked
    result = offline("""
        import json, sys
        from huggingface_hub import hf_hub_download
        from safetensors.torch import load_file
        repo, revision = sys.argv[1:3]
        config = json.load(open(hf_hub_download(repo, "quantize_config.json", revision=revision)))
        name = f"gptq_model-{config['bits']}bit-{config['group_size']}g.safetensors"
        print(json.dumps(sorted(load_file(hf_hub_download(repo, name, revision=revision)))))
    """, cache, repo_id, revision)
    assert result == sorted(tensors)


def test_the_autoawq_layout_keeps_its_weights_and_quantization_config(hub: Hub, tmp_path: Path
                                                                       ) -> None:
    """AutoAWQ's `save_quantized` (0.2): `model.safetensors` with each linear layer as
    `qweight`, `qzeros` and `scales`, and the `quantization_config` (quant_method "awq")
    inside config.json, which transformers reads to pick its AWQ loader. AutoAWQ needs CUDA to
    quantize, so the layout is built byte-faithful to its save (those names, dtypes and
    config keys), locked with the default flags, and read back offline by safetensors, the
    reader transformers' AWQ loader hands them to."""
    import torch
    from safetensors.torch import save_file

    folder = tiny_bert(tmp_path / "awq")
    (folder / "model.safetensors").unlink()
    layer = "model.layers.0.self_attn.q_proj"
    tensors = {f"{layer}.qweight": torch.zeros((16, 2), dtype=torch.int32),
               f"{layer}.qzeros": torch.zeros((1, 2), dtype=torch.int32),
               f"{layer}.scales": torch.ones((1, 16), dtype=torch.float16)}
    save_file(tensors, str(folder / "model.safetensors"), {"format": "pt"})
    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": 128,
                                     "zero_point": True, "version": "gemm"}
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    repo_id, _ = publish(hub, "awq", folder, "transformers")
    project, cache, revision = add_and_sync(hub, tmp_path, repo_id)
    locked = {f.path for f in read_lock(project / "weights.lock").repos[0].files}
    assert {"model.safetensors", "config.json"} <= locked
    result = offline("""
        import json, sys
        from huggingface_hub import hf_hub_download
        from safetensors.torch import load_file
        repo, revision = sys.argv[1:3]
        config = json.load(open(hf_hub_download(repo, "config.json", revision=revision)))
        assert config["quantization_config"]["quant_method"] == "awq"
        path = hf_hub_download(repo, "model.safetensors", revision=revision)
        print(json.dumps(sorted(load_file(path))))
    """, cache, repo_id, revision)
    assert result == sorted(tensors)


def test_a_card_naming_data_files_per_split_loads_one_split_offline(hub: Hub, tmp_path: Path
                                                                    ) -> None:
    """`configs: [{config_name: c137, data_files: [{split: train, path: ...}, {split: test,
    ...}]}]` after another config, added with `--config c137 --split test`: load_dataset
    resolves every split's data_files of the config, so the train file is locked too. Seen failing (FileNotFoundError
    for c137/train.jsonl) with the test split's file alone."""
    card = textwrap.dedent("""\
        ---
        configs:
        - config_name: other
          data_files:
          - split: train
            path: other/train.jsonl
        - config_name: c137
          data_files:
          - split: train
            path: c137/train.jsonl
          - split: test
            path: c137/test.jsonl
        ---
        # per-split data files
    """)
    rows = {split: [{"text": f"{split} {i}"} for i in range(3)] for split in ("train", "test")}
    files = {"README.md": card.encode(), "other/train.jsonl": b'{"text": "x"}\n',
             **{f"c137/{split}.jsonl": "".join(json.dumps(r) + "\n" for r in got).encode()
                for split, got in rows.items()}}
    repo_id, full = data.publish(hub, "per-split", files, tmp_path)
    project, cache, said = data.add_and_sync(hub, tmp_path, repo_id, "--config", "c137",
                                             "--split", "test")
    assert "c137/train.jsonl" in data.locked_paths(project), said
    result = data.offline(tmp_path, cache, project, repo_id, full,
                          {"name": ["c137"], "kw": {"split": "test"}})
    assert result["locked"] == result["full"] == rows["test"]


def test_a_router_saved_with_the_legacy_config_json_loads_offline(hub: Hub, tmp_path: Path
                                                                  ) -> None:
    """A Router (Asym before it) whose routes are named in the legacy `config.json` of its
    folder, not `router_config.json`: `Router.load` reads either, so the loader follows
    either. Seen failing with the loader reading router_config.json only."""
    full = router_model(tmp_path)
    routed = list(full.rglob("router_config.json"))
    assert routed
    for config in routed:
        config.rename(config.with_name("config.json"))
    repo_id, _ = publish(hub, "legacy-router", full, "sentence-transformers")
    project, cache, revision = add_and_sync(hub, tmp_path, repo_id)
    locked = {f.path for f in read_lock(project / "weights.lock").repos[0].files}
    assert {"query_0_Transformer/model.safetensors",
            "document_0_Transformer/model.safetensors"} <= locked
    assert offline(ROUTER_SAME, cache, repo_id, revision, str(full)) == {"same": True}
