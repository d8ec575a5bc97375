from __future__ import annotations

from pathlib import Path

import pytest

from wlock.errors import InvalidFileError, UsageError
from wlock.lock.manifest import (
    add_entry,
    find_project,
    init_manifest,
    parse_requirement,
    read_manifest,
    remove_entry,
)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "weights.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_reads_models_and_datasets_with_defaults(tmp_path: Path) -> None:
    path = write(tmp_path, """
[[model]]
id = "acme/tiny-bert"

[[dataset]]
id = "acme/tiny-squad"
ref = "v1.0"
include = ["data/*.parquet"]
exclude = "*.md"
""")
    manifest = read_manifest(path)
    model, dataset = manifest.entries
    assert (model.kind, model.id, model.ref, model.include) == ("model", "acme/tiny-bert", "main", ())
    assert model.line == 2
    assert (dataset.kind, dataset.ref, dataset.include, dataset.exclude) == (
        "dataset", "v1.0", ("data/*.parquet",), ("*.md",)
    )
    assert manifest.digest.startswith("blake3:")


def test_digest_ignores_comments_layout_and_order(tmp_path: Path) -> None:
    a = read_manifest(write(tmp_path, '[[model]]\nid = "a/b"\n[[model]]\nid = "c/d"\nref="x"\n'))
    b = read_manifest(write(tmp_path, '# hi\n[[model]]\nid = "c/d"  # c\nref = "x"\n\n'
                                      '[[model]]\nid = "a/b"\nref = "main"\n'))
    c = read_manifest(write(tmp_path, '[[model]]\nid = "a/b"\n[[model]]\nid = "c/d"\nref="y"\n'))
    assert a.digest == b.digest
    assert a.digest != c.digest


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[model]]\nid = "acme/x"\nrev = "main"\n',
         "weights.toml:3: `model.rev`: unknown key"),
        ('[[model]]\nid = "acme/x"\n\n[[model]]\nid = "not a repo"\n',
         "weights.toml:5: `model.id`: 'not a repo' is not a Hub repo id"),
        ('[[model]]\nid = "acme--x"\n', "weights.toml:2: `model.id`: 'acme--x' is not a Hub repo id"),
        ('[[model]]\nid = "a/x"\n[[model]]\nid = "a/x"\n',
         "weights.toml:3: `id`: model 'a/x' is listed twice (first at line 1)"),
        ('[[model]]\nid = "a/x"\ninclude = [1]\n',
         "weights.toml:3: `model.include`: must be a list of glob patterns, like [\"*.safetensors\"]"),
        ('[[model]]\nref = "main"\n', "weights.toml:1: `model`: missing `id`"),
        ('models = []\n', "weights.toml:1: `models`: unknown key"),
        ('[[model]]\nid = "a/x"\nref = "has space"\n',
         "weights.toml:3: `model.ref`: 'has space' holds a control character or a space"),
        ('[[model]\nid = "a/x"\n', "weights.toml:1: invalid TOML"),
    ],
)
def test_invalid_manifests_name_file_line_and_key(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(InvalidFileError) as excinfo:
        read_manifest(path)
    assert str(excinfo.value).startswith(f"{tmp_path}/{message}")
    assert excinfo.value.exit_code == 4


def test_missing_manifest_says_how_to_create_one(tmp_path: Path) -> None:
    with pytest.raises(InvalidFileError) as excinfo:
        read_manifest(tmp_path / "weights.toml")
    assert excinfo.value.hint is not None and "wlock init" in excinfo.value.hint


def test_add_and_remove_keep_comments_and_layout(tmp_path: Path) -> None:
    path = write(tmp_path, """\
# Our weights.  Keep this comment.
[[model]]
id = "acme/tiny-bert"   # the encoder
ref = "main"
""")
    assert add_entry(path, "dataset", "acme/tiny-squad", "v1.0", ("data/*",), ())
    assert add_entry(path, "model", "acme/other", None, (), ("*.bin",))
    assert not add_entry(path, "model", "acme/tiny-bert", "v2", (), ())
    assert path.read_text() == """\
# Our weights.  Keep this comment.
[[model]]
id = "acme/tiny-bert"   # the encoder
ref = "v2"

[[model]]
id = "acme/other"
ref = "main"
exclude = ["*.bin"]

[[dataset]]
id = "acme/tiny-squad"
ref = "v1.0"
include = ["data/*"]
"""
    remove_entry(path, "model", "acme/other")
    remove_entry(path, "dataset", "acme/tiny-squad")
    assert path.read_text() == """\
# Our weights.  Keep this comment.
[[model]]
id = "acme/tiny-bert"   # the encoder
ref = "v2"
"""
    assert [e.id for e in read_manifest(path).entries] == ["acme/tiny-bert"]


def test_remove_unknown_entry_points_at_the_other_kind(tmp_path: Path) -> None:
    path = write(tmp_path, '[[dataset]]\nid = "acme/data"\n')
    with pytest.raises(UsageError) as excinfo:
        remove_entry(path, "model", "acme/data")
    assert str(excinfo.value) == f"model 'acme/data' is not in {path}"
    assert excinfo.value.hint == "It is listed as a dataset: pass --dataset."


def test_init_writes_a_readable_starter_and_refuses_to_overwrite(tmp_path: Path) -> None:
    path = init_manifest(tmp_path)
    assert read_manifest(path).entries == ()
    with pytest.raises(UsageError):
        init_manifest(tmp_path)


def test_find_project_walks_upward(tmp_path: Path) -> None:
    write(tmp_path, "")
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    assert find_project(deep) == tmp_path.resolve()


@pytest.mark.parametrize(
    ("spec", "expected"),
    [("acme/x", ("acme/x", None)), ("acme/x@v1.0", ("acme/x", "v1.0")), ("gpt2@main", ("gpt2", "main"))],
)
def test_parse_requirement(spec: str, expected: tuple[str, str | None]) -> None:
    assert parse_requirement(spec) == expected


@pytest.mark.parametrize("spec", ["acme/x@", "bad id", "a/b/c", "acme/x@with space"])
def test_parse_requirement_rejects(spec: str) -> None:
    with pytest.raises(UsageError):
        parse_requirement(spec)
