"""Every command a lint finding suggests, run as written against the emulator: it exits 0 and
does what the finding says it will (the finding it answers is gone from the next lint)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from tests.conftest import Hub, run_wlock, write_project
from tests.integration.test_datasets_real import publish as publish_dataset
from tests.integration.test_datasets_real import two_configs
from wlock.lock.lockfile import read_lock


def findings(project: Path) -> list[dict[str, object]]:
    done = run_wlock("lint", "--format", "json", cwd=project)
    assert done.code in (0, 1), done.stderr
    found: list[dict[str, object]] = json.loads(done.stdout)["findings"]
    return found


def follow(hub: Hub, project: Path, code: str) -> str:
    """Run the command the (only) finding `code` suggests; return the finding's message."""
    found = [f for f in findings(project) if f["code"] == code]
    assert len(found) == 1, findings(project)
    message = str(found[0]["message"])
    command = re.search(r"run `(wlock [^`]+)`", message)
    assert command, message
    done = run_wlock(*shlex.split(command[1])[1:], "--endpoint", hub.endpoint, cwd=project)
    assert done.code == 0, (command[1], done.stderr)
    assert code not in {f["code"] for f in findings(project)}, findings(project)
    return message


def test_wl104_add_locks_the_model_the_code_loads(hub: Hub, tmp_path: Path) -> None:
    project = write_project(tmp_path, "")
    assert run_wlock("add", "acme/tiny-squad", "--dataset", "--endpoint", hub.endpoint,
                     cwd=project).code == 0
    (project / "train.py").write_text(
        "import wlock\nfrom transformers import AutoModel\n"
        'AutoModel.from_pretrained("acme/tiny-bert", revision=wlock.revision("acme/tiny-bert"))\n')
    message = follow(hub, project, "WL104")
    assert "acme/tiny-bert" in message
    assert read_lock(project / "weights.lock").find("model", "acme/tiny-bert") is not None


def test_wl107_the_peft_loader_locks_the_adapters_base(hub: Hub, tmp_path: Path) -> None:
    repo_id = hub.unique_id("lora")
    hub.builder.commit("model", repo_id, {
        "adapter_config.json": json.dumps({"base_model_name_or_path": "acme/tiny-bert",
                                           "peft_type": "LORA"}).encode(),
        "adapter_model.safetensors": b"\0" * 64})
    project = write_project(tmp_path, "")
    added = run_wlock("add", repo_id, "--loader", "all", "--endpoint", hub.endpoint,
                      cwd=project)
    assert added.code == 0, added.stderr
    (project / "tune.py").write_text(
        "import wlock\nfrom peft import PeftModel\n"
        f'PeftModel.from_pretrained(base, "{repo_id}", revision=wlock.revision("{repo_id}"))\n')
    follow(hub, project, "WL107")
    lock = read_lock(project / "weights.lock")
    adapter = lock.find("model", repo_id)
    assert adapter is not None and adapter.loader == "peft"
    assert lock.find("model", "acme/tiny-bert") is not None


@pytest.mark.parametrize(("loads", "entry"), [
    ('"en", split="test"', {"config": "en", "split": "train+test"}),
    ('"fr", split="train"', {"config": "fr", "split": "train"}),
])
def test_wl108_add_locks_the_config_or_split_the_code_loads(
        hub: Hub, tmp_path: Path, loads: str, entry: dict[str, str]) -> None:
    repo_id, _ = publish_dataset(hub, "advice", two_configs(), tmp_path)
    project = write_project(tmp_path / "project", "")
    added = run_wlock("add", repo_id, "--dataset", "--config", "en", "--split", "train",
                      "--endpoint", hub.endpoint, cwd=project)
    assert added.code == 0, added.stderr
    (project / "prep.py").write_text(
        "import wlock\nfrom datasets import load_dataset\n"
        f'd = load_dataset(str(wlock.snapshot_path("{repo_id}", kind="dataset")), {loads})\n')
    follow(hub, project, "WL108")
    locked = read_lock(project / "weights.lock").find("dataset", repo_id)
    assert locked is not None
    assert {"config": locked.config, "split": locked.split} == entry
    config, split = entry["config"], entry["split"].split("+")
    # (With the first config's files where another is asked: datasets picks the builder
    # of every config from the first config's data files.)
    assert {f"{config}/{s}-00000-of-00001.parquet" for s in split} <= {
        f.path for f in locked.files}


def test_wl101_without_a_lock_add_pins_it_and_the_finding_names_the_commit(
        hub: Hub, tmp_path: Path) -> None:
    """Without weights.lock, an unpinned load's advice is `wlock add ID`: run, it locks the
    repo, and the finding then names the locked commit (and --fix can write it)."""
    project = write_project(tmp_path, "")
    (project / "train.py").write_text(
        'from transformers import AutoModel\nAutoModel.from_pretrained("acme/tiny-bert")\n')
    [before] = findings(project)
    command = re.search(r"run `(wlock [^`]+)`", str(before["message"]))
    assert before["code"] == "WL101" and command, before
    done = run_wlock(*shlex.split(command[1])[1:], "--endpoint", hub.endpoint, cwd=project)
    assert done.code == 0, done.stderr
    commit = read_lock(project / "weights.lock").find("model", "acme/tiny-bert")
    assert commit is not None
    [after] = findings(project)
    assert after["code"] == "WL101" and commit.revision in str(after["message"]), after


def test_wl107_lock_locks_the_base_the_lock_lacks(hub: Hub, tmp_path: Path) -> None:
    """An adapter locked with the peft loader whose base went missing from the lock (an
    edit): the advice `wlock lock` locks it again."""
    repo_id = hub.unique_id("lora-base")
    hub.builder.commit("model", repo_id, {
        "adapter_config.json": json.dumps({"base_model_name_or_path": "acme/tiny-bert",
                                           "peft_type": "LORA"}).encode(),
        "adapter_model.safetensors": b"\0" * 64})
    project = write_project(tmp_path, f'[[model]]\nid = "{repo_id}"\nloader = "peft"\n')
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    lock_file = project / "weights.lock"
    text = lock_file.read_text()
    base_at = text.index('[[model]]\nid = "acme/tiny-bert"')
    end = text.find("\n[[", base_at + 1)
    lock_file.write_text(text[:base_at] + (text[end + 1:] if end > 0 else ""))
    (project / "tune.py").write_text(
        "import wlock\nfrom peft import PeftModel\n"
        f'PeftModel.from_pretrained(base, "{repo_id}", revision=wlock.revision("{repo_id}"))\n')
    checked = run_wlock("lock", "--check", cwd=project)
    assert checked.code == 3 and "it lacks acme/tiny-bert, which its entries require" in \
        checked.stderr, checked.stderr
    follow(hub, project, "WL107")
    assert read_lock(lock_file).find("model", "acme/tiny-bert") is not None
