"""`wlock check --load` on projects broken the way real ones break (issue 57).

Each case locks repos written by the libraries' own save functions, syncs them, then breaks
the project as a user does (a line deleted from weights.lock, an `exclude`, a config edited
upstream, an interpreter without the library) and expects the gate red, naming the file the
library wanted relative to the repo. The gate loads through each library's entry point, so
what the library asks for decides, never the lock's own file list.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Hub, added, needs, run_wlock
from tests.integration.test_datasets_real import publish as publish_dataset
from tests.integration.test_datasets_real import pushed
from tests.integration.test_loaders_real import publish, tiny_bert
from wlock.lock.lockfile import read_lock

pytestmark = needs("torch")


def drop(project: Path, cache: Path, repo_id: str, paths: list[str]) -> None:
    """Delete `paths` of `repo_id` from weights.lock by hand and from the cache, as
    `sync --frozen` of that lock into a fresh cache leaves it."""
    lock = project / "weights.lock"
    lock.write_text("".join(line for line in lock.read_text().splitlines(keepends=True)
                            if not any(f'{{ path = "{p}",' in line for p in paths)))
    entry = read_lock(lock).find("model", repo_id) or read_lock(lock).find("dataset", repo_id)
    assert entry is not None
    kind = "models" if entry.kind == "model" else "datasets"
    for path in paths:
        (cache / f"{kind}--{repo_id.replace('/', '--')}" / "snapshots" / entry.revision
         / path).unlink()


def gate(project: Path, cache: Path, *more: str, python: str = sys.executable,
         words: bool = False) -> tuple[int, dict[str, dict[str, Any]], str]:
    """`check --load --json`: its exit code, each entry's load, and what it printed. With
    `words`, the command is run again without --json (each load costs a library import, so
    only where a test reads the sentences) and must end the same way."""
    done = run_wlock("check", "--load", "--python", python, "--cache-dir", str(cache),
                     "--json", *more, cwd=project)
    report = json.loads(done.stdout)
    said = done.stdout + done.stderr
    if words:
        text = run_wlock("check", "--load", "--python", python, "--cache-dir", str(cache),
                         *more, cwd=project)
        assert text.code == done.code
        said = text.stdout + text.stderr
    return done.code, {e["repo_id"]: e for e in report["loads"]}, said


def gpt2(folder: Path) -> Any:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50,
                                       n_positions=16))
    model.save_pretrained(folder)
    return model


def lora(base: Any, base_name: str, folder: Path, *more: str) -> Path:
    """An adapter saved by peft's own save_pretrained, with `more` adapters beside the
    first (each written in a folder of its own)."""
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(base, LoraConfig(r=4, target_modules=["c_attn"],
                                            init_lora_weights=False))
    for name in more:
        model.add_adapter(name, LoraConfig(r=2, target_modules=["c_attn"],
                                           init_lora_weights=False))
    for config in model.peft_config.values():
        config.base_model_name_or_path = base_name
    model.save_pretrained(folder, save_embedding_layers=False)
    return folder


@pytest.fixture(scope="module")
def repos(_hub_session: Hub, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    hub = _hub_session
    tmp = tmp_path_factory.mktemp("broken")
    ids = {"bert": publish(hub, "gate-one", tiny_bert(tmp / "bert"), "transformers")[0]}
    templated = tiny_bert(tmp / "chat")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(templated)
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    tokenizer.save_pretrained(templated)
    ids["chat"] = publish(hub, "gate-chat", templated, "transformers")[0]
    shapes = tiny_bert(tmp / "shapes")
    config = json.loads((shapes / "config.json").read_text())
    (shapes / "config.json").write_text(json.dumps({**config, "intermediate_size": 64}))
    ids["shapes"] = publish(hub, "gate-shapes", shapes, "transformers")[0]
    base = gpt2(tmp / "base")
    ids["base"] = publish(hub, "gate-base", tmp / "base", "transformers")[0]
    ids["adapters"] = publish(hub, "gate-adapters", lora(base, ids["base"], tmp / "lora",
                                                         "second"), "peft")[0]
    ids["local"] = publish(hub, "gate-local", lora(gpt2(tmp / "b2"), str(tmp / "gone-base"),
                                                   tmp / "lora2"), "peft")[0]
    ids["split"] = publish(hub, "gate-split", split_gguf(tmp / "split"), "gguf")[0]
    ids["data"] = publish_dataset(hub, "gate-data", pushed(), tmp)[0]
    return ids


def split_gguf(folder: Path) -> Path:
    """A GGUF split in two parts as llama.cpp's gguf-split writes them: each part names
    `split.no`, `split.count` and the whole's `split.tensors.count`."""
    import gguf
    import numpy as np

    folder.mkdir(parents=True)
    for i in range(2):
        writer = gguf.GGUFWriter(str(folder / f"tiny-Q8_0-0000{i + 1}-of-00002.gguf"), "llama")
        writer.add_uint16("split.no", i)
        writer.add_uint16("split.count", 2)
        writer.add_int32("split.tensors.count", 2)
        writer.add_tensor(f"w{i}", np.ones((4, 8), dtype=np.float32))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
    return folder


def test_a_weights_line_deleted_from_the_lock_fails_naming_it(
        hub: Hub, repos: dict[str, str], tmp_path: Path) -> None:
    project, cache = added(hub, tmp_path, (repos["bert"],))
    assert gate(project, cache)[0] == 0
    drop(project, cache, repos["bert"], ["model.safetensors"])
    code, loads, said = gate(project, cache, words=True)
    assert code == 1, said
    assert loads[repos["bert"]]["status"] == "failed"
    # transformers names every weights file it looked for; the gate names one of them.
    wanted = loads[repos["bert"]]["wanted"]
    assert wanted in ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                      "pytorch_model.bin.index.json"), loads[repos["bert"]]
    assert f"it wanted {wanted}" in said


def test_every_tokenizer_file_left_out_fails(
        hub: Hub, repos: dict[str, str], tmp_path: Path) -> None:
    """transformers 5 builds an empty tokenizer from no file at all, so the load itself
    passes: what fails it is that it asked for files the repo has and the lock left out."""
    tokenizer = ["vocab.txt", "tokenizer.json", "tokenizer_config.json"]
    project, cache = added(hub, tmp_path, (repos["bert"], *(
        flag for name in tokenizer for flag in ("--exclude", name))))
    code, loads, said = gate(project, cache)
    assert code == 1, said
    assert loads[repos["bert"]]["wanted"] in tokenizer, loads[repos["bert"]]
    assert "the lock leaves out" in loads[repos["bert"]]["error"]


def test_a_chat_template_left_out_fails_though_the_tokenizer_loads(
        hub: Hub, repos: dict[str, str], tmp_path: Path) -> None:
    project, cache = added(hub, tmp_path / "whole", (repos["chat"],))
    assert gate(project, cache)[0] == 0
    project, cache = added(hub, tmp_path / "cut", (repos["chat"], "--exclude",
                                                   "chat_template.jinja"))
    code, loads, said = gate(project, cache)
    assert code == 1, said
    assert loads[repos["chat"]]["wanted"] == "chat_template.jinja", loads[repos["chat"]]
    assert "the lock leaves out" in loads[repos["chat"]]["error"]


def test_tokenizer_lines_deleted_from_the_lock_by_hand_fail(
        hub: Hub, repos: dict[str, str], tmp_path: Path) -> None:
    """No `exclude` records them: the entry's files-digest shows the lines were deleted, and
    the files transformers asked for are the ones the gate names."""
    tokenizer = ["vocab.txt", "tokenizer.json", "tokenizer_config.json"]
    project, cache = added(hub, tmp_path, (repos["bert"],))
    entry = read_lock(project / "weights.lock").find("model", repos["bert"])
    assert entry is not None
    locked = {f.path for f in entry.files}
    drop(project, cache, repos["bert"], [p for p in tokenizer if p in locked])
    code, loads, said = gate(project, cache)
    assert code == 1, said
    assert loads[repos["bert"]]["wanted"] in tokenizer, loads[repos["bert"]]
    assert "deleted from weights.lock by hand" in loads[repos["bert"]]["error"]


def test_a_chat_template_line_deleted_from_the_lock_by_hand_fails(
        hub: Hub, repos: dict[str, str], tmp_path: Path) -> None:
    project, cache = added(hub, tmp_path, (repos["chat"],))
    drop(project, cache, repos["chat"], ["chat_template.jinja"])
    code, loads, said = gate(project, cache)
    assert code == 1, said
    assert loads[repos["chat"]]["wanted"] == "chat_template.jinja", loads[repos["chat"]]
    assert "deleted from weights.lock by hand" in loads[repos["chat"]]["error"]


def test_weights_whose_shapes_disagree_with_the_config_fail(
        hub: Hub, repos: dict[str, str], tmp_path: Path) -> None:
    project, cache = added(hub, tmp_path, (repos["shapes"],))
    code, loads, said = gate(project, cache)
    assert code == 1, said
    assert "mismatch" in loads[repos["shapes"]]["error"].lower(), loads[repos["shapes"]]


def test_every_adapter_loads_and_one_left_out_fails(
        hub: Hub, repos: dict[str, str], tmp_path: Path) -> None:
    """PEFT's save_pretrained with two adapters: the default add locks the second's folder
    and the gate loads it; excluded, the gate names its file."""
    project, cache = added(hub, tmp_path / "whole", (repos["adapters"],))
    locked = [f.path for f in read_lock(project / "weights.lock").find(  # type: ignore[union-attr]
        "model", repos["adapters"]).files]
    assert "second/adapter_model.safetensors" in locked
    code, loads, said = gate(project, cache)
    assert code == 0, said
    assert loads[repos["adapters"]]["did"][-1] == "adapter second"
    project, cache = added(hub, tmp_path / "cut", (repos["adapters"], "--exclude",
                                                   "second/adapter_model.safetensors"))
    code, loads, said = gate(project, cache)
    assert code == 1, said
    assert loads[repos["adapters"]]["wanted"] == "second/adapter_model.safetensors", said


def test_a_second_adapter_deleted_from_the_lock_by_hand_fails(
        hub: Hub, repos: dict[str, str], tmp_path: Path) -> None:
    """Nothing asks for the second adapter (code loads it by name), so no asked file names
    it: the entry's paths-digest fails it."""
    project, cache = added(hub, tmp_path, (repos["adapters"],))
    entry = read_lock(project / "weights.lock").find("model", repos["adapters"])
    assert entry is not None
    drop(project, cache, repos["adapters"],
         [f.path for f in entry.files if f.path.startswith("second/")])
    code, loads, said = gate(project, cache)
    assert code == 1, said
    assert "deleted or added by hand" in loads[repos["adapters"]]["error"], said


def test_an_adapters_base_deleted_from_the_lock_fails_naming_it(
        hub: Hub, repos: dict[str, str], tmp_path: Path) -> None:
    project, cache = added(hub, tmp_path, (repos["adapters"],))
    lock = project / "weights.lock"
    blocks = lock.read_text().split("\n[[")
    lock.write_text("\n[[".join(b for b in blocks if f'id = "{repos["base"]}"' not in b))
    shutil.rmtree(cache / f"models--{repos['base'].replace('/', '--')}")
    code, loads, said = gate(project, cache)
    assert code == 1, said
    assert repos["base"] in loads[repos["adapters"]]["error"], loads[repos["adapters"]]


def test_an_adapter_whose_base_is_a_local_folder_fails(
        hub: Hub, repos: dict[str, str], tmp_path: Path) -> None:
    project, cache = added(hub, tmp_path, (repos["local"],))
    code, loads, said = gate(project, cache)
    assert code == 1, said
    assert "gone-base" in loads[repos["local"]]["error"], loads[repos["local"]]


def test_a_gguf_split_part_deleted_from_the_lock_fails_naming_it(
        hub: Hub, repos: dict[str, str], tmp_path: Path) -> None:
    project, cache = added(hub, tmp_path, (repos["split"],))
    code, loads, said = gate(project, cache)
    assert code == 0, said
    assert "2 split parts" in loads[repos["split"]]["did"][0]
    drop(project, cache, repos["split"], ["tiny-Q8_0-00002-of-00002.gguf"])
    code, loads, said = gate(project, cache)
    assert code == 1, said
    assert loads[repos["split"]]["wanted"] == "tiny-Q8_0-00002-of-00002.gguf", said


def test_a_datasets_missing_file_is_named_relative_to_the_repo(
        hub: Hub, repos: dict[str, str], tmp_path: Path) -> None:
    project, cache = added(hub, tmp_path, (repos["data"], "--dataset", "--config", "en",
                                           "--split", "train"))
    entry = read_lock(project / "weights.lock").find("dataset", repos["data"])
    assert entry is not None
    data = sorted(f.path for f in entry.files if f.path.endswith(".parquet"))
    (cache / f"datasets--{repos['data'].replace('/', '--')}" / "snapshots" / entry.revision
     / data[0]).unlink()
    code, loads, said = gate(project, cache)
    assert code == 1, said
    assert loads[repos["data"]]["wanted"] == data[0], loads[repos["data"]]["error"]


def test_a_missing_library_fails_unless_skipping_is_asked(
        hub: Hub, repos: dict[str, str], tmp_path: Path) -> None:
    import subprocess

    # An interpreter without the ML stack: a virtualenv of its own, nothing installed.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")],
                   check=True)
    bare = str(tmp_path / "bare" / "bin" / "python")
    project, cache = added(hub, tmp_path, (repos["bert"],))
    code, loads, said = gate(project, cache, python=bare, words=True)
    assert code == 1, said
    assert "transformers is not installed" in loads[repos["bert"]]["error"]
    assert "pip install transformers torch" in said
    code, loads, said = gate(project, cache, "--skip-missing-libraries", python=bare)
    assert code == 0, said
    assert loads[repos["bert"]]["status"] == "skipped"


REMOTE_CONFIG = '''import sys
from transformers import BertConfig
# What transformers' own remote-code prompt leaves on stdout: no newline after it.
sys.stdout.write("Do you wish to run the custom code? [y/N] ")
sys.stdout.flush()


class XConfig(BertConfig):
    model_type = "xbert"
'''
REMOTE_MODEL = '''from transformers import BertModel

from .configuration_x import XConfig


class XModel(BertModel):
    config_class = XConfig
'''


def test_the_answer_travels_apart_from_what_the_library_prints(
        hub: Hub, tmp_path: Path) -> None:
    """Remote code (locked, so run) that leaves a `[y/N]` prompt on stdout without a newline,
    as transformers' own prompt does: the load's answer is not lost on that line. Seen
    failing with the answer on stdout ("the load's process died: exit status 0")."""
    folder = tiny_bert(tmp_path / "remote")
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="xbert", auto_map={"AutoConfig": "configuration_x.XConfig",
                                                "AutoModel": "modeling_x.XModel"})
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "configuration_x.py").write_text(REMOTE_CONFIG)
    (folder / "modeling_x.py").write_text(REMOTE_MODEL)
    repo_id, _ = publish(hub, "gate-prompt", folder, "transformers")
    project, cache = added(hub, tmp_path, (repo_id,))
    code, loads, said = gate(project, cache)
    assert code == 0, said
    assert loads[repo_id]["status"] == "loaded"
    assert loads[repo_id]["did"][0] == "config", loads[repo_id]


def test_a_load_that_kills_its_process_fails_alone(hub: Hub, repos: dict[str, str],
                                                    tmp_path: Path) -> None:
    """The entries of one library load in processes forked from one that imported it once:
    remote code (locked, so run) that kills its own process fails its entry, named, and the
    other entry still loads (seen failing, with no answer for either, when an entry left
    without an answer was not loaded again alone)."""
    folder = tiny_bert(tmp_path / "killer")
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="xbert", auto_map={"AutoConfig": "configuration_x.XConfig",
                                                "AutoModel": "modeling_x.XModel"})
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "configuration_x.py").write_text(
        "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n" + REMOTE_CONFIG)
    (folder / "modeling_x.py").write_text(REMOTE_MODEL)
    killer, _ = publish(hub, "gate-killer", folder, "transformers")
    project, cache = added(hub, tmp_path, (killer,), (repos["bert"],))
    code, loads, said = gate(project, cache)
    assert code == 1, said
    assert loads[killer]["status"] == "failed"
    assert "the load's process died" in loads[killer]["error"], loads[killer]
    assert loads[repos["bert"]]["status"] == "loaded", loads[repos["bert"]]
