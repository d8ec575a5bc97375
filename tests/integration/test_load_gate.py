"""`wlock check --load`: each locked entry loaded offline by its own library, from the cache.

The layouts are the loader tests' real ones (written by each library's own save function),
locked together in one project with the default loaders, synced, and loaded by the gate with
the real libraries; then a file the library reads is taken out of the lock and the cache by
hand, as a hand-edited lock would, and the gate names the entry, the library's error and the
file.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from tests.conftest import Hub, needs, run_wlock, write_project
from tests.integration.test_datasets_real import publish as publish_dataset
from tests.integration.test_datasets_real import pushed
from tests.integration.test_loaders_real import publish, tiny_bert
from wlock.lock.lockfile import read_lock

pytestmark = needs("torch")


def tiny_gguf(folder: Path) -> Path:
    """One GGUF file a quantization, as a quantized model's repo has them."""
    import gguf
    import numpy as np

    folder.mkdir(parents=True)
    weights = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    for name in ("F32", "F16", "Q8_0", "Q5_1", "Q5_0", "Q4_1", "Q4_0"):
        writer = gguf.GGUFWriter(str(folder / f"tiny.{name}.gguf"), "llama")
        writer.add_block_count(1)
        if name in ("F32", "F16"):
            writer.add_tensor("w", weights.astype(np.float32 if name == "F32" else np.float16))
        else:
            kind = gguf.GGMLQuantizationType[name]
            data = gguf.quants.quantize(weights, kind)
            writer.add_tensor("w", data, raw_shape=data.shape, raw_dtype=kind)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
    return folder


def beside(folder: Path, weights: str, names: tuple[str, ...]) -> dict[str, bytes]:
    """The other formats a real repo carries beside its weights, each as large as them (a
    TF, Flax, ONNX or OpenVINO copy of a model is its weights again)."""
    size = sum(p.stat().st_size for p in folder.glob(weights))
    return dict.fromkeys(names, b"\0" * size)


def sentence_model(folder: Path, tmp_path: Path) -> Path:
    from sentence_transformers import SentenceTransformer, models

    transformer = models.Transformer(str(tiny_bert(tmp_path / "st-bert")), max_seq_length=16)
    pooling = models.Pooling(transformer.get_word_embedding_dimension())
    SentenceTransformer(modules=[transformer, pooling]).save(str(folder))
    return folder


def vae(folder: Path) -> Path:
    from diffusers import AutoencoderKL

    AutoencoderKL(block_out_channels=(8,), norm_num_groups=4, latent_channels=2,
                  sample_size=8).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def project(_hub_session: Hub, tmp_path_factory: pytest.TempPathFactory
            ) -> tuple[Path, Path, dict[str, str], dict[str, int]]:
    """One project locking one entry of each library, beside the other formats their real
    repos carry, synced: (project, cache, each library's repo id, each repo's bytes)."""
    hub = _hub_session
    tmp = tmp_path_factory.mktemp("gate")
    bert = tiny_bert(tmp / "bert", shard="20KB")
    st = sentence_model(tmp / "st", tmp)
    diffusers = vae(tmp / "vae")
    published = {
        "transformers": publish(hub, "gate-bert", bert, "transformers", beside(
            bert, "model-*.safetensors", ("pytorch_model.bin", "tf_model.h5",
                                          "flax_model.msgpack", "rust_model.ot",
                                          "onnx/model.onnx"))),
        "sentence-transformers": publish(hub, "gate-st", st, "sentence-transformers", beside(
            st, "model.safetensors", ("onnx/model.onnx", "onnx/model_O4.onnx",
                                      "onnx/model_qint8_avx512.onnx",
                                      "openvino/openvino_model.bin", "pytorch_model.bin"))),
        "diffusers": publish(hub, "gate-vae", diffusers, "diffusers", beside(
            diffusers, "*.safetensors", ("diffusion_pytorch_model.bin",
                                         "diffusion_pytorch_model.fp16.safetensors"))),
        "gguf": publish(hub, "gate-gguf", tiny_gguf(tmp / "gguf"), "gguf"),
        # timm's layout; timm is not installed here, so the gate must skip it by name.
        "timm": publish(hub, "gate-timm", tiny_bert(tmp / "timm"), "timm"),
        "datasets": (publish_dataset(hub, "gate-pushed", pushed(), tmp)[0], pushed()),
    }
    ids = {library: repo_id for library, (repo_id, _) in published.items()}
    whole = {repo_id: sum(map(len, files.values())) for repo_id, files in published.values()}
    folder = write_project(tmp / "project", "")
    for library, repo_id in ids.items():
        flags = {"gguf": ["--variant", "Q8_0"], "datasets": ["--dataset", "--config", "en",
                                                             "--split", "train"]}
        added = run_wlock("add", repo_id, *flags.get(library, []), "--endpoint", hub.endpoint,
                          cwd=folder)
        assert added.code == 0, added.stderr
    cache = tmp / "cache"
    synced = run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                       cwd=folder)
    assert synced.code == 0, synced.stderr
    return folder, cache, ids, whole


def gate(project: Path, cache: Path, *more: str) -> tuple[int, str, dict]:
    done = run_wlock("check", "--load", "--python", sys.executable, "--cache-dir", str(cache),
                     *more, cwd=project)
    report = run_wlock("check", "--load", "--python", sys.executable, "--cache-dir",
                       str(cache), "--json", *more, cwd=project)
    return done.code, done.stdout + done.stderr, json.loads(report.stdout)


def test_every_entry_of_the_real_layouts_loads_and_a_missing_library_is_skipped(
        project: tuple[Path, Path, dict[str, str], dict[str, int]]) -> None:
    folder, cache, ids, _ = project
    code, said, report = gate(folder, cache)
    assert code == 0, said
    loads = {e["repo_id"]: e for e in report["loads"]}
    assert report["ok"] is True
    for library, repo_id in ids.items():
        expected = "skipped" if library == "timm" else "loaded"
        assert loads[repo_id]["status"] == expected, loads[repo_id]
        assert loads[repo_id]["library"] == library
    assert "wlock has no load for timm" in loads[ids["timm"]]["reason"]
    bert = loads[ids["transformers"]]["did"]
    import transformers

    weights = "weights (loaded on CPU)" if transformers.__version__.startswith("4.") else \
        "weights (every tensor's shape checked by transformers on the meta device)"
    assert bert == ["config", "tokenizer", weights]
    assert loads[ids["datasets"]]["did"] == ["en/train (8 rows)"]
    assert f"skipped  model {ids['timm']}" in said and "Loads: 5 loaded, 0 failed, 1 skipped" \
        in said


def test_a_shard_taken_out_of_the_lock_and_the_cache_fails_naming_entry_error_and_file(
        project: tuple[Path, Path, dict[str, str], dict[str, int]], tmp_path: Path) -> None:
    folder, cache, ids, _ = project
    edited = tmp_path / "project"
    shutil.copytree(folder, edited)
    repo_id = ids["transformers"]
    entry = read_lock(edited / "weights.lock").find("model", repo_id)
    assert entry is not None
    shard = sorted(f.path for f in entry.files if f.path.startswith("model-0"))[-1]
    lock = edited / "weights.lock"
    lock.write_text("".join(line for line in lock.read_text().splitlines(keepends=True)
                            if f'"{shard}"' not in line))
    own_cache = tmp_path / "cache"
    shutil.copytree(cache, own_cache, symlinks=True)
    folder_name = "models--" + repo_id.replace("/", "--")
    (own_cache / folder_name / "snapshots" / entry.revision / shard).unlink()
    code, said, report = gate(edited, own_cache)
    assert code == 1, said
    failed = [e for e in report["loads"] if e["status"] == "failed"]
    assert [e["repo_id"] for e in failed] == [repo_id]
    assert failed[0]["wanted"] == shard, failed[0]["error"]
    assert failed[0]["error"] and shard in said
    assert f"FAILED   model {repo_id}@{entry.revision[:7]} (transformers)" in said


def test_the_default_loaders_lock_at_most_035_of_the_real_layouts_bytes(
        project: tuple[Path, Path, dict[str, str], dict[str, int]]) -> None:
    """What the gate proves loads is what the loaders keep: the files read, not everything
    (issue 47: the rules that keep more must not drift towards the whole repo)."""
    folder, _, ids, whole = project
    lock = read_lock(folder / "weights.lock")
    locked = {r.id: r.size for r in lock.repos if r.id in whole and r.id != ids["timm"]}
    ratios = {repo_id: round(locked[repo_id] / whole[repo_id], 3) for repo_id in locked}
    total = sum(locked.values()) / sum(whole[repo_id] for repo_id in locked)
    assert total <= 0.35, (total, ratios)
    # Each model's loader keeps one format of one variant (the dataset, its config's splits
    # and a card as large as its tiny tables, is in the total only).
    models = [ratios[ids[library]] for library in ("transformers", "sentence-transformers",
                                                   "diffusers", "gguf")]
    assert max(models) <= 0.35, (total, ratios)
