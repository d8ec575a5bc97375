"""The upgrade report a reviewer reads (`lock --upgrade --dry-run`, text, markdown, JSON),
against the emulator: one test per change a review exists to catch, each named in all three
forms; the byte figures held to what the sync then fetches, counted by the emulator."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from tests.conftest import Hub, run_wlock, write_project

WEIGHTS = {"config.json": b'{"model_type": "bert"}\n',
           "model-00001-of-00002.safetensors": b"\x01" * 300_000,
           "model-00002-of-00002.safetensors": b"\x02" * 300_000,
           "README.md": b"---\nlicense: apache-2.0\n---\n# m\n"}


def repo(hub: Hub, files: dict[str, bytes] | None = None) -> str:
    repo_id = hub.unique_id("up")
    hub.builder.commit("model", repo_id, files or WEIGHTS, lfs=True)
    return repo_id


def locked(hub: Hub, tmp_path: Path, repo_id: str, loader: str | None = None) -> Path:
    line = f'loader = "{loader}"\n' if loader else ""
    project = write_project(tmp_path / "p", f'[[model]]\nid = "{repo_id}"\n{line}')
    done = run_wlock("lock", "--endpoint", hub.endpoint, cwd=project)
    assert done.code == 0, done.stderr
    return project


def reported(hub: Hub, project: Path, *args: str) -> tuple[str, str, dict]:
    """The dry run's report as text, markdown and JSON; nothing written."""
    before = (project / "weights.lock").read_bytes()
    up = ("lock", "--upgrade", "--dry-run", *args, "--endpoint", hub.endpoint)
    text = run_wlock(*up, cwd=project)
    markdown = run_wlock(*up, "--format", "markdown", cwd=project)
    as_json = run_wlock(*up, "--json", cwd=project)
    for done in (text, markdown, as_json):
        assert done.code == 0, done.stderr
    assert (project / "weights.lock").read_bytes() == before
    return text.stdout, markdown.stdout, json.loads(as_json.stdout)


def flagged(report: tuple[str, str, dict], kind: str, words: str) -> None:
    text, markdown, doc = report
    assert f"! {kind}: " in text and words in text, text
    assert f"- **{kind}**: " in markdown and words in markdown, markdown
    assert any(f["kind"] == kind and words in f["what"] for r in doc["report"]
               for f in r["flags"]), doc["report"]


def test_a_changed_shard_is_listed_and_the_bytes_are_what_sync_fetches(hub: Hub,
                                                                       tmp_path: Path) -> None:
    repo_id = repo(hub)
    project = locked(hub, tmp_path, repo_id)
    cache = tmp_path / "cache"
    assert run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                     cwd=project).code == 0
    hub.builder.commit("model", repo_id, {"model-00002-of-00002.safetensors": b"\x03" * 310_000},
                       lfs=True)
    text, markdown, doc = reported(hub, project)
    assert "~ model-00002-of-00002.safetensors (300.0 kB -> 310.0 kB)" in text, text
    assert "| changed | `model-00002-of-00002.safetensors` | 300.0 kB → 310.0 kB |" in markdown
    [entry] = doc["report"]
    [changed] = entry["changed"]
    assert (changed["path"], changed["old_size"], changed["new_size"]) == (
        "model-00002-of-00002.safetensors", 300_000, 310_000)
    assert changed["old_hash"] != changed["new_hash"]
    assert entry["upgrade_bytes"] == 310_000 and entry["fresh_bytes"] == 610_000 + sum(
        len(v) for k, v in WEIGHTS.items() if not k.endswith(".safetensors"))
    # The figure held to the sync that follows: what the emulator serves for the upgrade.
    assert run_wlock("lock", "--upgrade", "--endpoint", hub.endpoint, cwd=project).code == 0
    hub.process.reset_stats()
    assert run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                     cwd=project).code == 0
    served = sum(e["bytes"] for e in hub.process.stats()["log"] if e["method"] == "GET")
    assert abs(served - entry["upgrade_bytes"]) <= 0.1 * entry["upgrade_bytes"], served


def test_a_changed_card_licence_and_licence_file_are_flagged(hub: Hub, tmp_path: Path) -> None:
    repo_id = repo(hub, {**WEIGHTS, "LICENSE": b"Apache License 2.0\n"})
    project = locked(hub, tmp_path, repo_id)
    hub.builder.commit("model", repo_id, {"README.md": b"---\nlicense: cc-by-nc-4.0\n---\n",
                                          "LICENSE": b"CC BY-NC 4.0\n"})
    report = reported(hub, project)
    flagged(report, "licence", "the card's licence: apache-2.0 -> cc-by-nc-4.0")
    flagged(report, "licence", "LICENSE changed")


def _torch_file(obj: object) -> bytes:
    import torch

    out = io.BytesIO()
    torch.save(obj, out)
    return out.getvalue()


def test_a_pickle_added_and_a_pickles_imports_changed_are_flagged(hub: Hub,
                                                                  tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    repo_id = repo(hub, {**WEIGHTS, "extra.pt": _torch_file({"w": torch.zeros(2)})})
    project = locked(hub, tmp_path, repo_id)
    hub.builder.commit("model", repo_id, {
        "extra.pt": _torch_file({"w": torch.nn.Parameter(torch.zeros(2))}),
        "optimizer_state.pt": _torch_file({"step": torch.zeros(1)})})
    report = reported(hub, project)
    flagged(report, "pickle", "optimizer_state.pt: a new pickle, importing ")
    flagged(report, "pickle", "extra.pt: imports changed (now also "
            "torch._utils._rebuild_parameter")


def test_remote_code_added_is_flagged(hub: Hub, tmp_path: Path) -> None:
    repo_id = repo(hub)
    project = locked(hub, tmp_path, repo_id)
    hub.builder.commit("model", repo_id, {
        "config.json": json.dumps({"model_type": "x", "auto_map": {
            "AutoModel": "modeling_x.XModel"}}).encode(),
        "modeling_x.py": b"class XModel: pass\n"})
    flagged(reported(hub, project), "remote-code", "new remote code: modeling_x.XModel")


def test_an_adapters_base_that_moves_is_flagged_on_the_adapter(hub: Hub, tmp_path: Path
                                                                ) -> None:
    base = repo(hub)
    hub.builder.configure("model", base, extra={"library_name": "transformers"})
    lora = hub.unique_id("lora")
    hub.builder.commit("model", lora, {
        "adapter_config.json": json.dumps({"base_model_name_or_path": base,
                                           "peft_type": "LORA"}).encode(),
        "adapter_model.safetensors": b"a" * 2000})
    hub.builder.configure("model", lora, extra={"library_name": "peft"})
    project = locked(hub, tmp_path, lora, "peft")
    hub.builder.commit("model", base, {"model-00001-of-00002.safetensors": b"\x09" * 300_000},
                       lfs=True)
    report = reported(hub, project)
    flagged(report, "requires", f"requires {base}, whose pin moves ")
    assert {r["id"] for r in report[2]["report"]} == {lora, base}


def test_the_loaders_selection_changing_is_flagged(hub: Hub, tmp_path: Path) -> None:
    repo_id = repo(hub)
    project = locked(hub, tmp_path, repo_id, "transformers")
    hub.builder.commit("model", repo_id, {"onnx/model.onnx": b"o" * 5000}, lfs=True)
    flagged(reported(hub, project), "selection", "the loader now leaves out onnx/")
