"""The judge of the datasets loader: the real `datasets` library, offline (HF_HUB_OFFLINE=1,
HF_DATASETS_OFFLINE=1), loading by config and split what `wlock add --dataset` locked and
`wlock sync` fetched, against a load of the full repo. datasets 5.x refuses an offline load by
id of a dataset it never prepared, so both loads go through a folder: the locked commit's
snapshot (`wlock.snapshot_path`, as the README shows) and a folder holding every file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import Hub, default_signals, needs, run_wlock, write_project
from wlock.lock.lockfile import read_lock

pytestmark = needs("datasets")

CARD = """---
configs:
- config_name: en
  data_files:
  - split: train
    path: en/train-*
  - split: test
    path: en/test-*
- config_name: fr
  data_files:
  - split: train
    path: fr/train-*
  - split: test
    path: fr/test-*
---
# two configs, two splits each
"""


def parquet(rows: list[dict[str, object]]) -> bytes:
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    out = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), out)
    return out.getvalue()


def rows(config: str, split: str, n: int = 4) -> list[dict[str, object]]:
    return [{"text": f"{config} {split} {i}", "label": i % 2} for i in range(n)]


def publish(hub: Hub, stem: str, files: dict[str, bytes], tmp_path: Path,
            branch: str = "main") -> tuple[str, Path]:
    """The repo on the emulator, and a folder holding every one of its files (the full load)."""
    repo_id = hub.unique_id(stem)
    if branch != "main":
        hub.builder.commit("dataset", repo_id, {"README.md": b"# the original\n"})
    hub.builder.commit("dataset", repo_id, files, branch=branch)
    full = tmp_path / f"full-{stem}"
    for path, data in files.items():
        (full / path).parent.mkdir(parents=True, exist_ok=True)
        (full / path).write_bytes(data)
    return repo_id, full


def add_and_sync(hub: Hub, tmp_path: Path, spec: str, *flags: str) -> tuple[Path, Path, str]:
    project = write_project(tmp_path / "project", "")
    added = run_wlock("add", spec, "--dataset", *flags, "--endpoint", hub.endpoint, cwd=project)
    assert added.code == 0, added.stderr
    cache = tmp_path / "cache"
    hub.process.reset_stats()
    synced = run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                       cwd=project)
    assert synced.code == 0, synced.stderr
    return project, cache, added.stderr


def locked_paths(project: Path) -> list[str]:
    return sorted(f.path for f in read_lock(project / "weights.lock").repos[0].files)


def served(hub: Hub) -> set[str]:
    return {e["path"].split("/resolve/", 1)[-1].split("/", 1)[-1].split("?")[0]
            for e in hub.process.stats()["log"]
            if "/resolve/" in e["path"] and e["method"] == "GET"}


LOAD = """
    import json, sys
    import wlock
    from datasets import load_dataset
    repo, full, args = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    snapshot = str(wlock.snapshot_path(repo, kind="dataset", lock=__import__("pathlib").Path(
        sys.argv[4])))
    def load(where):
        data = load_dataset(where, *args.get("name", []), **args.get("kw", {}))
        if hasattr(data, "keys"):
            return {split: data[split].to_list() for split in sorted(data.keys())}
        return data.to_list()
    print(json.dumps({"locked": load(snapshot), "full": load(full)}))
"""


def offline(tmp_path: Path, cache: Path, project: Path, repo_id: str, full: Path,
            args: dict[str, object]) -> dict[str, object]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "HF_HUB_CACHE": str(cache), "HF_DATASETS_CACHE": str(tmp_path / "datasets-cache")}
    env.pop("HF_ENDPOINT", None)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(LOAD), repo_id, str(full), json.dumps(args),
         str(project / "weights.lock")], env=env, capture_output=True, text=True, timeout=300,
        preexec_fn=default_signals)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def two_configs() -> dict[str, bytes]:
    files = {"README.md": CARD.encode()}
    for config in ("en", "fr"):
        for split in ("train", "test"):
            files[f"{config}/{split}-00000-of-00001.parquet"] = parquet(rows(config, split))
    # Large files in no config: the raw dump the parquet was made from, a tarball.
    files["raw/dump.jsonl"] = b'{"text": "raw"}\n' * 40000
    files["original/everything.tar"] = b"\0" * 300_000
    return files


def test_one_config_of_a_multi_config_dataset_is_locked_and_loads_offline(
        hub: Hub, tmp_path: Path) -> None:
    repo_id, full = publish(hub, "two-configs", two_configs(), tmp_path)
    project, cache, said = add_and_sync(hub, tmp_path, repo_id, "--config", "fr")
    entry = (project / "weights.toml").read_text()
    assert 'loader = "datasets"' in entry and 'config = "fr"' in entry, entry
    # fr's files, and one file of each split of the first config (en): the library lists
    # them to pick the builder of every config before it looks at fr.
    assert locked_paths(project) == ["README.md", "en/test-00000-of-00001.parquet",
                                     "en/train-00000-of-00001.parquet",
                                     "fr/test-00000-of-00001.parquet",
                                     "fr/train-00000-of-00001.parquet"]
    assert f"{repo_id}: datasets, 5 of 7 files" in said, said
    assert "the first config's splits pick the builder" in said, said
    assert served(hub) == set(locked_paths(project))
    result = offline(tmp_path, cache, project, repo_id, full, {"name": ["fr"]})
    assert result["locked"] == result["full"]
    assert result["locked"] == {"test": rows("fr", "test"), "train": rows("fr", "train")}


def test_one_split_of_one_config_is_locked_and_loads_offline(hub: Hub, tmp_path: Path) -> None:
    repo_id, full = publish(hub, "one-split", two_configs(), tmp_path)
    project, cache, _ = add_and_sync(hub, tmp_path, repo_id, "--config", "en", "--split",
                                     "train")
    # en's train, and its test split's one file (the library picks its builder from every
    # split of the first config).
    assert locked_paths(project) == ["README.md", "en/test-00000-of-00001.parquet",
                                     "en/train-00000-of-00001.parquet"]
    result = offline(tmp_path, cache, project, repo_id, full,
                     {"name": ["en"], "kw": {"split": "train"}})
    assert result["locked"] == result["full"] == rows("en", "train")


def test_without_a_config_the_add_names_the_configs_and_leaves_weights_toml(
        hub: Hub, tmp_path: Path) -> None:
    repo_id, _ = publish(hub, "which-config", two_configs(), tmp_path)
    project = write_project(tmp_path / "project", "")
    added = run_wlock("add", repo_id, "--dataset", "--endpoint", hub.endpoint, cwd=project)
    assert added.code == 4, added.stderr
    assert "2 configs and none is the default" in added.stderr
    assert "--config en" in added.stderr and "weights.toml was left as it was" in added.stderr
    assert (project / "weights.toml").read_text() == ""


def test_the_default_layout_without_configs_is_picked_and_split(hub: Hub, tmp_path: Path
                                                                ) -> None:
    """No `configs` in the card: the packaged builder's default patterns
    (data/{split}-00000-of-00001.*), picked by `wlock add --dataset` on its own."""
    files = {"README.md": b"---\nlicense: mit\n---\n# default layout\n",
             "data/train-00000-of-00002.parquet": parquet(rows("d", "train", 3)),
             "data/train-00001-of-00002.parquet": parquet(rows("d", "train2", 3)),
             "data/test-00000-of-00001.parquet": parquet(rows("d", "test", 2)),
             "scripts/convert.py": b"print('how the data was made')\n"}
    repo_id, full = publish(hub, "default-layout", files, tmp_path)
    project, cache, said = add_and_sync(hub, tmp_path, repo_id)
    assert "(loader datasets, from its card and files)" in said, said
    assert locked_paths(project) == ["README.md", "data/test-00000-of-00001.parquet",
                                     "data/train-00000-of-00002.parquet",
                                     "data/train-00001-of-00002.parquet"]
    result = offline(tmp_path, cache, project, repo_id, full, {})
    assert result["locked"] == result["full"]
    assert len(result["locked"]["train"]) == 6  # type: ignore[index]
    # ... and one split of it.
    text = (project / "weights.toml").read_text()
    (project / "weights.toml").write_text(text.rstrip("\n") + '\nsplit = "test"\n')
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    assert locked_paths(project) == ["README.md", "data/test-00000-of-00001.parquet"]


def test_the_parquet_conversion_branch_is_a_ref_and_a_config_its_folder(
        hub: Hub, tmp_path: Path) -> None:
    """`refs/convert/parquet` holds `{config}/{split}/0000.parquet` and no card; a config is
    its folder, loaded offline as `load_dataset(snapshot, data_dir=config)`."""
    files = {f"{config}/{split}/0000.parquet": parquet(rows(config, split))
             for config in ("plain_text", "other") for split in ("train", "test")}
    repo_id, full = publish(hub, "converted", files, tmp_path, branch="refs/convert/parquet")
    project, cache, said = add_and_sync(hub, tmp_path, f"{repo_id}@refs/convert/parquet",
                                        "--config", "plain_text")
    assert locked_paths(project) == ["plain_text/test/0000.parquet",
                                     "plain_text/train/0000.parquet"]
    lock = read_lock(project / "weights.lock").repos[0]
    assert lock.requested == "refs/convert/parquet" and lock.config == "plain_text"
    assert "the parquet conversion branch's layout" in said
    result = offline(tmp_path, cache, project, repo_id, full,
                     {"kw": {"data_dir": "plain_text"}})
    assert result["locked"] == result["full"]
    assert result["locked"] == {"test": rows("plain_text", "test"),  # type: ignore[comparison-overlap]
                                "train": rows("plain_text", "train")}
    assert run_wlock("check", "--cache-dir", str(cache), cwd=project).code == 0


SPLITS = {"train": 8, "validation": 4, "test": 4}


def pushed_card() -> str:
    """The card `push_to_hub` writes: each config's data_files and its `dataset_info`
    (features, and each split's num_examples, which load_dataset verifies)."""
    lines = ["---", "dataset_info:"]
    for config in ("en", "fr"):
        lines += [f"- config_name: {config}", "  features:", "  - name: text",
                  "    dtype: string", "  - name: label", "    dtype: int64", "  splits:"]
        for split, n in SPLITS.items():
            lines += [f"  - name: {split}", f"    num_bytes: {n * 20}", f"    num_examples: {n}"]
        lines += ["  download_size: 4000", "  dataset_size: 320"]
    lines.append("configs:")
    for config in ("en", "fr"):
        lines += [f"- config_name: {config}", "  data_files:"]
        for split in SPLITS:
            lines += [f"  - split: {split}", f"    path: {config}/{split}-*"]
    return "\n".join([*lines, "---", "# pushed with push_to_hub", ""])


def pushed() -> dict[str, bytes]:
    files = {"README.md": pushed_card().encode()}
    for config in ("en", "fr"):
        for split, n in SPLITS.items():
            data = rows(config, split, n)
            if split == "train":  # two shards, as push_to_hub cuts a large split
                files[f"{config}/train-00000-of-00002.parquet"] = parquet(data[:4])
                files[f"{config}/train-00001-of-00002.parquet"] = parquet(data[4:])
            else:
                files[f"{config}/{split}-00000-of-00001.parquet"] = parquet(data)
    return files


@pytest.mark.parametrize(("config", "split"), [("en", "train"), ("fr", "validation"),
                                               ("fr", None)])
def test_a_pushed_dataset_locked_by_config_and_split_loads_offline(
        hub: Hub, tmp_path: Path, config: str, split: str | None) -> None:
    """A dataset as push_to_hub writes it (dataset_info in the card, two configs, three
    splits, a split in two shards): load_dataset verifies every split of the config it
    builds against dataset_info, so one split alone fails offline (ExpectedMoreSplitsError,
    NonMatchingSplitsSizesError). The lock takes every split of the config asked for, says
    why, and the load by config and split gives the full repo's rows. Seen failing with
    only the split's files locked."""
    repo_id, full = publish(hub, f"pushed-{config}-{split}", pushed(), tmp_path)
    flags = ["--config", config] + (["--split", split] if split else [])
    project, cache, said = add_and_sync(hub, tmp_path, repo_id, *flags)
    mine = [p for p in locked_paths(project) if p.startswith(f"{config}/")]
    assert mine == sorted(p for p in pushed() if p.startswith(f"{config}/"))
    if split:
        assert "dataset_info" in said and "every split" in said, said
    result = offline(tmp_path, cache, project, repo_id, full,
                     {"name": [config], "kw": {"split": split} if split else {}})
    assert result["locked"] == result["full"]
