"""The resolver against the emulator over HTTP (issue 25): `wlock add` picks a loader and
writes it, the lock holds what that library reads and nothing else, an adapter brings its
base, `wlock tree` shows the graph, and old locks keep their bytes."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

from tests.conftest import Hub, run_wlock, write_project
from wlock.lock.lockfile import read_lock
from wlock.units import human_size

ROOT = Path(__file__).resolve().parents[2]

# google-bert/bert-base-uncased's layout (names from its listing), small bytes.
BERT_FILES = {
    ".gitattributes": b"*.bin filter=lfs\n", "LICENSE": b"Apache-2.0\n", "README.md": b"# bert\n",
    "config.json": b'{"model_type": "bert"}\n',
    "coreml/fill-mask/float32_model.mlpackage/Manifest.json": b"{}\n",
    "coreml/fill-mask/float32_model.mlpackage/Data/com.apple.CoreML/model.mlmodel": b"m" * 300,
    "flax_model.msgpack": b"f" * 4000, "model.onnx": b"o" * 4000,
    "model.safetensors": b"s" * 4000, "pytorch_model.bin": b"p" * 4000,
    "rust_model.ot": b"r" * 4000, "tf_model.h5": b"t" * 4000,
    "tokenizer.json": b"{}\n", "tokenizer_config.json": b"{}\n", "vocab.txt": b"[PAD]\n",
}
BERT_LOCKED = ["LICENSE", "README.md", "config.json", "model.safetensors", "tokenizer.json",
               "tokenizer_config.json", "vocab.txt"]


def bert(hub: Hub, library: str | None = "transformers") -> str:
    repo_id = hub.unique_id("bert")
    hub.builder.commit("model", repo_id, BERT_FILES)
    if library:
        hub.builder.configure("model", repo_id, extra={"library_name": library})
    return repo_id


def manifest_entries(project: Path) -> list[dict[str, object]]:
    return tomllib.loads((project / "weights.toml").read_text())["model"]


def test_add_writes_the_loader_and_locks_only_what_transformers_reads(
        hub: Hub, tmp_path: Path) -> None:
    repo_id = bert(hub)
    project = write_project(tmp_path, "")
    hub.process.reset_stats()
    added = run_wlock("add", repo_id, "--endpoint", hub.endpoint, cwd=project)
    assert added.code == 0, added.stderr
    assert manifest_entries(project) == [{"id": repo_id, "ref": "main",
                                          "loader": "transformers"}]
    repo = read_lock(project / "weights.lock").repos[0]
    assert sorted(f.path for f in repo.files) == BERT_LOCKED
    assert repo.loader == "transformers" and repo.skipped == (
        ".gitattributes", "coreml/", "flax_model.msgpack", "model.onnx", "pytorch_model.bin",
        "rust_model.ot", "tf_model.h5")
    assert repo.skipped_size == sum(len(BERT_FILES[p]) for p in BERT_FILES
                                    if p not in BERT_LOCKED)
    locked = human_size(sum(len(BERT_FILES[p]) for p in BERT_LOCKED))
    total = human_size(sum(len(b) for b in BERT_FILES.values()))
    assert f"{repo_id}: transformers, 7 of 15 files, {locked} of {total} (not locked: " \
        ".gitattributes, coreml/, flax_model.msgpack, model.onnx, pytorch_model.bin, " \
        "rust_model.ot, ...)" in added.stderr
    assert "(loader transformers, from the Hub's library_name 'transformers')" in added.stderr
    # The rule read config.json and tokenizer_config.json to look for remote code, and the
    # lock's judgement the first block of LICENSE (a file of no format it can rule out);
    # no weights were fetched.
    fetched = {e["path"].rsplit("/", 1)[-1] for e in hub.process.stats()["log"]
               if "/resolve/" in e["path"] and e["method"] == "GET"}
    assert fetched <= {"config.json", "tokenizer_config.json", "LICENSE"}, fetched
    # Up to date for CI, and the tree says it offline.
    assert run_wlock("lock", "--check", cwd=project).code == 0
    tree = run_wlock("tree", cwd=project)
    assert tree.stdout.startswith(f"{repo_id} main {repo.revision[:7]} (transformers; 7 files")
    why = run_wlock("tree", "--why", "tf_model.h5", cwd=project)
    assert why.stdout.startswith(f"{repo_id}: tf_model.h5 is not locked: TensorFlow weights; "
                                 "it locks model.safetensors")
    assert "To lock it, add it to `include`" in why.stdout
    # ... and that advice works: `include` adds the file back to what the loader took
    # (it only filtered that choice before, so following the advice failed: issue 37).
    text = (project / "weights.toml").read_text()
    (project / "weights.toml").write_text(text.rstrip("\n") + '\ninclude = ["tf_model.h5"]\n')
    relocked = run_wlock("lock", "--endpoint", hub.endpoint, cwd=project)
    assert relocked.code == 0, relocked.stderr
    paths = sorted(f.path for f in read_lock(project / "weights.lock").repos[0].files)
    assert paths == sorted([*BERT_LOCKED, "tf_model.h5"])
    assert run_wlock("lock", "--check", cwd=project).code == 0
    why = run_wlock("tree", "--why", "tf_model.h5", cwd=project)
    assert why.stdout.startswith(f"{repo_id}: tf_model.h5 is locked"), why.stdout


def test_the_loader_comes_from_the_files_when_the_hub_names_no_library(
        hub: Hub, tmp_path: Path) -> None:
    repo_id = bert(hub, library=None)
    project = write_project(tmp_path, "")
    added = run_wlock("add", repo_id, "--endpoint", hub.endpoint, cwd=project)
    assert added.code == 0, added.stderr
    assert "(loader transformers, from its files)" in added.stderr
    forced = run_wlock("add", repo_id, "--loader", "all", "--endpoint", hub.endpoint,
                       cwd=project)
    assert forced.code == 0, forced.stderr
    assert len(read_lock(project / "weights.lock").repos[0].files) == len(BERT_FILES)


def test_a_lock_made_before_loaders_reads_checks_and_relocks_byte_for_byte(
        hub: Hub, tmp_path: Path) -> None:
    project = tmp_path / "p"
    project.mkdir()
    # The example project and its lock as wlock wrote them before loaders, pickle scans and
    # cards existed.
    (project / "weights.toml").write_bytes(
        (ROOT / "fixtures/locks/made-before-loaders.toml").read_bytes())
    old = (ROOT / "fixtures/locks/made-before-loaders.lock").read_bytes()
    (project / "weights.lock").write_bytes(old)
    assert run_wlock("lock", "--check", cwd=project).code == 0
    relocked = run_wlock("lock", "--endpoint", hub.endpoint, cwd=project)
    assert relocked.code == 0 and relocked.stderr.startswith("Unchanged"), relocked.stderr
    assert (project / "weights.lock").read_bytes() == old
    cache = str(tmp_path / "cache")
    synced = run_wlock("sync", "--frozen", "--endpoint", hub.endpoint, "--cache-dir", cache,
                       cwd=project)
    assert synced.code == 0, synced.stderr
    assert run_wlock("check", "--cache-dir", cache, cwd=project).code == 0


def adapter(hub: Hub, base: str, revision: str | None) -> str:
    repo_id = hub.unique_id("lora")
    config = {"base_model_name_or_path": base, "revision": revision, "peft_type": "LORA",
              "task_type": "CAUSAL_LM", "r": 8}
    hub.builder.commit("model", repo_id, {
        "adapter_config.json": json.dumps(config).encode(), "README.md": b"# lora\n",
        "adapter_model.safetensors": b"a" * 2000, "adapter_model.bin": b"b" * 2000,
        "training_args.bin": b"x" * 100})
    hub.builder.configure("model", repo_id, extra={"library_name": "peft"})
    return repo_id


def test_an_adapter_brings_its_base_at_the_commit_it_names_and_takes_it_away(
        hub: Hub, tmp_path: Path) -> None:
    base = bert(hub)
    pinned = hub.builder.commit("model", base, {"config.json": b'{"model_type": "bert"}\n'})
    hub.builder.commit("model", base, {"vocab.txt": b"[PAD]\n[UNK]\n"})  # main moves on
    lora = adapter(hub, base, pinned)
    project = write_project(tmp_path, "")
    added = run_wlock("add", lora, "--endpoint", hub.endpoint, cwd=project)
    assert added.code == 0, added.stderr
    assert manifest_entries(project) == [{"id": lora, "ref": "main", "loader": "peft"}]
    lock = read_lock(project / "weights.lock")
    adapter_repo, base_repo = lock.find("model", lora), lock.find("model", base)
    assert adapter_repo is not None and base_repo is not None
    assert adapter_repo.requires == (base,)
    assert sorted(f.path for f in adapter_repo.files) == [
        "README.md", "adapter_config.json", "adapter_model.safetensors"]
    assert base_repo.requested == pinned and base_repo.revision == pinned
    assert base_repo.loader == "transformers"
    assert sorted(f.path for f in base_repo.files) == BERT_LOCKED
    assert f"{base}: required by {lora} (base model of the adapter (adapter_config.json, " \
        f"revision {pinned})); locked at the commit it names: {pinned[:7]}" in added.stderr
    assert run_wlock("lock", "--check", cwd=project).code == 0
    tree = run_wlock("tree", cwd=project).stdout.splitlines()
    assert tree[0].startswith(f"{lora} main ") and tree[1].startswith(f"└── {base} {pinned} ")
    assert tree[1].endswith(f"required by {lora})")

    # As `uv remove`: the base goes with the adapter that alone required it, from the lock
    # too, at once and without the Hub.
    removed = run_wlock("remove", lora, cwd=project)
    assert removed.code == 0 and "and weights.lock" in removed.stderr, removed.stderr
    assert read_lock(project / "weights.lock").repos == ()
    assert run_wlock("lock", "--check", cwd=project).code == 0


def test_a_base_the_adapter_does_not_pin_is_locked_now_and_said_so(
        hub: Hub, tmp_path: Path) -> None:
    base = bert(hub)
    lora = adapter(hub, base, None)
    project = write_project(tmp_path, "")
    added = run_wlock("add", lora, "--endpoint", hub.endpoint, cwd=project)
    assert added.code == 0, added.stderr
    base_repo = read_lock(project / "weights.lock").find("model", base)
    assert base_repo is not None and base_repo.requested == "main"
    assert f"locked at 'main' as of now (it names no commit): {base_repo.revision[:7]}" \
        in added.stderr
    # Listed in weights.toml too: the manifest's entry is the one locked, once.
    both = run_wlock("add", base, "--endpoint", hub.endpoint, cwd=project)
    assert both.code == 0, both.stderr
    assert [r.id for r in read_lock(project / "weights.lock").repos].count(base) == 1


def test_a_gguf_repo_needs_a_variant_and_the_manifest_is_left_as_it_was(
        hub: Hub, tmp_path: Path) -> None:
    repo_id = hub.unique_id("gguf")
    hub.builder.commit("model", repo_id, {
        "README.md": b"# q\n", "m.Q4_K_M.gguf": b"4" * 1000, "m.Q8_0.gguf": b"8" * 2000,
        "m.Q2_K.gguf": b"2" * 500})
    project = write_project(tmp_path, "")
    before = (project / "weights.toml").read_bytes()
    refused = run_wlock("add", repo_id, "--endpoint", hub.endpoint, cwd=project)
    assert refused.code == 4, refused.stderr
    assert "3 GGUF files (3 quantizations): say which one to lock" in refused.stderr
    assert "Set `variant` to one of Q2_K, Q4_K_M, Q8_0" in refused.stderr
    assert (project / "weights.toml").read_bytes() == before
    assert not (project / "weights.lock").exists()
    added = run_wlock("add", repo_id, "--variant", "Q4_K_M", "--endpoint", hub.endpoint,
                      cwd=project)
    assert added.code == 0, added.stderr
    assert manifest_entries(project) == [{"id": repo_id, "ref": "main", "loader": "gguf",
                                          "variant": "Q4_K_M"}]
    assert sorted(f.path for f in read_lock(project / "weights.lock").repos[0].files) == [
        "README.md", "m.Q4_K_M.gguf"]
    assert os.environ.get("HF_TOKEN") is None


def test_an_adapter_whose_base_is_a_local_folder_says_so_and_takes_base_from_the_entry(
        hub: Hub, tmp_path: Path) -> None:
    """adapter_config.json often names the folder the adapter was trained from
    (`outputs/llama-base`, a name shaped like a repo id): the error said only "model
    outputs/llama-base was not found" (issue 37). It now says where the name came from and
    how to name the base instead, and `--base` (weights.toml's `base`) locks that base."""
    base = hub.unique_id("base")
    hub.builder.commit("model", base, {"config.json": b"{}", "model.safetensors": b"\1" * 64})
    hub.builder.configure("model", base, extra={"library_name": "transformers"})
    lora = hub.unique_id("lora")
    hub.builder.commit("model", lora, {
        "adapter_config.json": json.dumps({"base_model_name_or_path": "outputs/llama-base"})
        .encode(), "adapter_model.safetensors": b"\2" * 32})
    hub.builder.configure("model", lora, extra={"library_name": "peft"})
    project = write_project(tmp_path, "")
    before = (project / "weights.toml").read_bytes()
    refused = run_wlock("add", lora, "--endpoint", hub.endpoint, cwd=project)
    assert refused.code == 5, refused.stderr
    assert "outputs/llama-base" in refused.stderr
    assert f"(required by {lora}: base model of the adapter (adapter_config.json" \
        in refused.stderr, refused.stderr
    assert "adapter_config.json's `base_model_name_or_path`" in refused.stderr
    assert 'base = "org/name@ref"' in refused.stderr
    assert (project / "weights.toml").read_bytes() == before
    added = run_wlock("add", lora, "--base", f"{base}@main", "--endpoint", hub.endpoint,
                      cwd=project)
    assert added.code == 0, added.stderr
    assert manifest_entries(project) == [{"id": lora, "ref": "main", "loader": "peft",
                                          "base": f"{base}@main"}]
    lock = read_lock(project / "weights.lock")
    adapter = lock.find("model", lora)
    assert adapter is not None and adapter.requires == (base,) and adapter.base == \
        f"{base}@main"
    assert lock.find("model", base) is not None
    assert run_wlock("lock", "--check", cwd=project).code == 0
    # `base` belongs to an adapter: on another loader it is a mistake, named at its line.
    (project / "weights.toml").write_text(
        (project / "weights.toml").read_text().replace('loader = "peft"',
                                                       'loader = "transformers"'))
    wrong = run_wlock("lock", "--check", cwd=project)
    assert wrong.code == 4 and "`base` names an adapter's base model" in wrong.stderr


def test_remove_updates_the_lock_without_the_hub_keeping_every_other_pin(
        hub: Hub, tmp_path: Path) -> None:
    """`wlock remove` as `uv remove`: weights.lock loses the entry at once, every other pin
    kept byte for byte, no request made; a lock that was stale for another entry is left as
    it was, with `wlock lock` named."""
    project = write_project(tmp_path / "p", '[[model]]\nid = "acme/tiny-bert"\n\n'
                            '[[dataset]]\nid = "acme/tiny-squad"\n')
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    before = read_lock(project / "weights.lock").find("model", "acme/tiny-bert")
    hub.process.reset_stats()
    removed = run_wlock("remove", "acme/tiny-squad", "--dataset", "--endpoint", hub.endpoint,
                        cwd=project)
    assert removed.code == 0, removed.stderr
    assert hub.process.stats()["log"] == []
    lock = read_lock(project / "weights.lock")
    assert [r.id for r in lock.repos] == ["acme/tiny-bert"]
    assert lock.repos[0] == before
    assert run_wlock("lock", "--check", cwd=project).code == 0
    # Stale for another reason: left as it was.
    manifest = project / "weights.toml"
    manifest.write_text(manifest.read_text() + '\n[[model]]\nid = "acme/gated-llama"\n')
    text = (project / "weights.lock").read_bytes()
    stale = run_wlock("remove", "acme/tiny-bert", cwd=project)
    assert stale.code == 0 and "Run `wlock lock` to update the lock." in stale.stderr
    assert (project / "weights.lock").read_bytes() == text
