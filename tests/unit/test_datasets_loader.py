"""The datasets loader against the datasets library itself: each layout is written to a folder
(empty files: resolving patterns reads no data), `datasets.load_dataset_builder(folder, config)`
resolves its data files as `load_dataset` would, and the loader must choose exactly those, of
the splits asked for, plus the card. Layouts from the Hub: a card with configs (`data_files`
by split, globs, lists, `data_dir`), the packaged builders' default layouts with no card, the
parquet conversion branch's folder per config, hidden and `__special__` folders.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import needs
from wlock.lock.loaders import LoaderProblem, Options, detect_loader, select
from wlock.lock.loaders.datasets import split_names, usable
from wlock.models import LockedFile

pytestmark = needs("datasets")

TWO_CONFIGS = """---
configs:
- config_name: en
  data_files:
  - split: train
    path: en/train-*
  - split: test
    path: en/test-*
- config_name: fr
  data_dir: fr
---
# two configs, two splits each
"""

LAYOUTS: dict[str, tuple[str | None, list[str]]] = {
    # (the card, or None; the files)
    "two configs, extras in none": (TWO_CONFIGS, [
        "en/train-00000-of-00002.parquet", "en/train-00001-of-00002.parquet",
        "en/test-00000-of-00001.parquet", "fr/train-00000-of-00001.parquet",
        "fr/test-00000-of-00001.parquet", "raw/dump.jsonl.zst", "original/full.tar",
        "LICENSE"]),
    "default: sharded data/": (None, [
        "data/train-00000-of-00002.parquet", "data/train-00001-of-00002.parquet",
        "data/test-00000-of-00001.parquet", "data/random-00000-of-00001.parquet",
        "notes.txt"]),
    "default: a folder per split": (None, [
        "train/a.csv", "train/b.csv", "test/c.csv", "dev/d.csv", "scripts/make.py"]),
    "default: split names in file names": (None, [
        "corpus_train.jsonl", "corpus_validation.jsonl", "corpus_test.jsonl", "sample.txt"]),
    "default: one folder of files": (None, ["images/a.png", "images/b.png", "metadata.csv"]),
    "hidden and special folders": (None, [
        "data/train.parquet", ".cache/train.parquet", "__pycache__/train.parquet",
        "data/.train.parquet"]),
    "globs and lists in the card": ("""---
configs:
- config_name: default
  data_files:
  - split: train
    path:
    - "part1/*.json"
    - "part2/**/*.json"
  - split: validation
    path: "val.json"
- config_name: other
  data_files: "other/*.csv"
---
""", ["part1/a.json", "part1/sub/b.json", "part2/x/y/c.json", "val.json", "other/a.csv",
      "other/b.tsv", "dataset_infos.json"]),
    "a config marked default": ("""---
configs:
- config_name: small
  data_files: small/*.parquet
  default: true
- config_name: large
  data_files: large/*.parquet
---
""", ["small/0.parquet", "large/0.parquet", "large/1.parquet"]),
    "a config whose data_dir nests its files": ("""---
configs:
- config_name: shallow
  data_files: shallow/*.parquet
- config_name: nested
  data_dir: nested
---
""", ["shallow/0.parquet", "nested/train/part-0/a.parquet", "nested/train/part-1/b.parquet",
      "nested/test/x/c.parquet", "nested/test/x/y/d.parquet", "elsewhere/train/e.parquet"]),
    "parquet branch: a folder per config": (None, [
        "plain_text/train/0000.parquet", "plain_text/train/0001.parquet",
        "plain_text/test/0000.parquet", "plain_text/unsupervised/0000.parquet",
        "other/train/0000.parquet"]),
}

CASES = [
    ("two configs, extras in none", "en", None), ("two configs, extras in none", "fr", None),
    ("two configs, extras in none", "en", "train"), ("two configs, extras in none", "fr", "test"),
    ("default: sharded data/", None, None), ("default: sharded data/", None, "random"),
    ("default: a folder per split", None, None), ("default: a folder per split", None, "test"),
    ("default: split names in file names", None, None),
    ("default: one folder of files", None, None),
    ("hidden and special folders", None, None),
    ("globs and lists in the card", "default", None),
    ("globs and lists in the card", None, "validation"),
    ("globs and lists in the card", "other", None),
    ("a config marked default", None, None), ("a config marked default", "large", None),
    # issue 47's unguarded promises: a config's data_dir with its files in subfolders.
    ("a config whose data_dir nests its files", "nested", None),
    ("a config whose data_dir nests its files", "nested", "test"),
]


def write(folder: Path, card: str | None, files: list[str]) -> dict[str, bytes]:
    contents = {path: b"{}" if path == "dataset_infos.json" else b"" for path in files}
    if card is not None:
        contents["README.md"] = card.encode()
    for path, data in contents.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_bytes(data)
    return contents


def by_the_library(folder: Path, config: str | None, split: str | None,
                   data_dir: str | None = None) -> set[str]:
    """The files `load_dataset(folder, config, split=split)` reads, as the library resolves
    them."""
    import datasets

    os.environ["HF_DATASETS_OFFLINE"] = "1"
    builder = datasets.load_dataset_builder(str(folder), config, data_dir=data_dir)
    wanted = split_names(split) if split else list(builder.config.data_files)
    return {str(Path(f).relative_to(folder)) for name in wanted
            for f in builder.config.data_files[name]}


def choose(contents: dict[str, bytes], config: str | None, split: str | None) -> set[str]:
    listing = [LockedFile(p, len(b), git_sha1="0" * 40) for p, b in contents.items()]
    return set(select("datasets", listing, lambda p: contents[p],
                      Options(config=config, split=split)).paths)


@pytest.mark.parametrize(("layout", "config", "split"), CASES)
def test_the_loader_locks_what_the_datasets_library_reads_and_it_alone_loads(
        tmp_path: Path, layout: str, config: str | None, split: str | None) -> None:
    """Every data file the library reads for the config (and split) is locked, and the
    locked files alone, in a folder of their own, load that config with the same data files:
    beyond them only the card and the first config's files the library lists to pick its
    builder (one per split, `datasets._inference`)."""
    card, files = LAYOUTS[layout]
    contents = write(tmp_path / "full", card, files)
    expected = by_the_library(tmp_path / "full", config, split)
    assert expected  # the layout is one the library reads
    chosen = choose(contents, config, split)
    metadata = {p for p in ("README.md", "dataset_infos.json") if p in contents}
    assert expected | metadata <= chosen
    extra = chosen - expected - metadata
    assert len(extra) <= 2, extra  # at most one file per split of the first config
    alone = tmp_path / "locked"
    write(alone, None, sorted(chosen))
    for path in metadata:
        (alone / path).write_bytes(contents[path])
    assert by_the_library(alone, config, split) == expected


def test_the_parquet_branch_config_is_its_folder_read_with_data_dir(tmp_path: Path) -> None:
    """refs/convert/parquet has no card: a config is a folder, which load_dataset reads with
    data_dir (by id: load_dataset(id, revision="refs/convert/parquet", data_dir=config))."""
    _, files = LAYOUTS["parquet branch: a folder per config"]
    contents = write(tmp_path, None, files)
    for split in ("train", "test"):
        expected = by_the_library(tmp_path, None, split, data_dir="plain_text")
        assert choose(contents, "plain_text", split) == expected, split
    # A split the default patterns do not name is the converter's folder all the same, as
    # the Hub's parquet export lists it (config, split, url).
    assert choose(contents, "plain_text", None) == {
        "plain_text/train/0000.parquet", "plain_text/train/0001.parquet",
        "plain_text/test/0000.parquet", "plain_text/unsupervised/0000.parquet"}
    assert choose(contents, "plain_text", "unsupervised") == {
        "plain_text/unsupervised/0000.parquet"}


def test_a_parquet_branch_split_the_converter_stopped_is_its_partial_folder(
        tmp_path: Path) -> None:
    """The parquet converter writes `partial-{split}/` when it stopped early: that folder is
    the split, as the library reads it with data_dir (issue 47: no test held this)."""
    files = ["plain_text/partial-train/0000.parquet", "plain_text/partial-train/0001.parquet",
             "plain_text/test/0000.parquet", "other/train/0000.parquet"]
    contents = write(tmp_path, None, files)
    expected = by_the_library(tmp_path, None, "train", data_dir="plain_text")
    assert expected == {"plain_text/partial-train/0000.parquet",
                        "plain_text/partial-train/0001.parquet"}
    assert choose(contents, "plain_text", "train") == expected


def test_a_config_or_split_it_does_not_have_is_a_problem_naming_what_it_has() -> None:
    contents = {"README.md": TWO_CONFIGS.encode(),
                **dict.fromkeys(LAYOUTS["two configs, extras in none"][1], b"")}
    with pytest.raises(LoaderProblem, match="2 configs and none is the default") as e:
        choose(contents, None, None)
    assert "en, fr" in e.value.hint and "--config en" in e.value.hint
    with pytest.raises(LoaderProblem, match="no config 'de'") as e:
        choose(contents, "de", None)
    assert e.value.hint == "The card has: en, fr."
    with pytest.raises(LoaderProblem, match="has no split validation") as e:
        choose(contents, "en", "validation")
    assert e.value.hint == "Its splits: train, test."
    assert split_names("train[:10%]+test") == ["train", "test"]


@pytest.mark.parametrize("card", [
    "---\nconfigs: [\n---\n",  # YAML the library cannot read either
    "---\nconfigs:\n- data_files: a/*\n---\n",  # a config without config_name
    "---\nconfigs:\n- config_name: x\n  data_files: 3\n---\n",
    "---\nconfigs:\n- config_name: x\n  data_files: hf://datasets/other/repo/*.parquet\n---\n",
    "---\nconfigs:\n- config_name: x\n  data_files: ../outside/*.parquet\n---\n",
    "---\nconfigs:\n- config_name: x\n  data_files: missing.parquet\n---\n",
])
def test_a_card_it_cannot_follow_fails_closed(card: str) -> None:
    """Never a guess: a card the library would fail on, or that names files outside the
    repo, is a problem (lock it with `loader = "all"`), not a partial lock."""
    contents = {"README.md": card.encode(), "a/0.parquet": b"", "b/0.parquet": b""}
    with pytest.raises(LoaderProblem):
        choose(contents, "x" if "config_name: x" in card else None, None)


def test_add_picks_the_datasets_loader_when_the_card_or_the_layout_allow() -> None:
    def judge(contents: dict[str, bytes]) -> bool:
        return usable(frozenset(contents), lambda p: contents[p])

    assert judge({"README.md": TWO_CONFIGS.encode(), "en/train-0.parquet": b""})
    assert judge({"data/train-00000-of-00001.parquet": b""})
    assert not judge({"README.md": b"---\nconfigs: [\n---\n", "a.parquet": b""})
    assert not judge({"README.md": b"# a card and no data\n"})
    assert detect_loader(None, ["config.json", "model.safetensors"]) == "transformers"


def test_the_builder_table_is_the_installed_librarys() -> None:
    """MODULE_EXTENSIONS is copied from datasets.packaged_modules: the guard against drift."""
    import datasets
    from datasets.packaged_modules import _ALL_METADATA_FILENAMES, _EXTENSION_TO_MODULE

    from wlock.lock.loaders.datasets import METADATA_FILENAMES, MODULE_EXTENSIONS

    theirs: dict[str, set[str]] = {}
    for ext, (module, _) in _EXTENSION_TO_MODULE.items():
        theirs.setdefault(module, set()).add(ext.lower().lstrip("."))
    ours = {module: set(exts.split()) for module, exts in MODULE_EXTENSIONS.items()}
    missing = {m: e - ours.get(m, set()) for m, e in theirs.items() if e - ours.get(m, set())}
    assert not missing, f"datasets {datasets.__version__} reads these too: {missing}"
    assert set(METADATA_FILENAMES) >= set(_ALL_METADATA_FILENAMES)
