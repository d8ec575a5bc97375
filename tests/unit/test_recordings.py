"""The real Hub's recorded answers go through the same parsing code as the emulator's."""

from __future__ import annotations

import json

import pytest
from huggingface_hub.hf_api import ModelInfo, RepoFile

from tests.conftest import RECORDINGS
from wlock.errors import UnsafePathError
from wlock.lock.hub import files_from_siblings, files_from_tree


def test_repo_info_with_blobs_parses_into_locked_files() -> None:
    data = json.loads(
        (RECORDINGS / "api_models_mcpotato_42-eicar-street_revision_8b3861f6_blobs_true.json")
        .read_text()
    )
    info = ModelInfo(**data)
    files = {f.path: f for f in files_from_siblings(info.id, info.siblings or [])}
    assert info.sha == "8b3861f6931c4026b0cd22b38dbc09e7668983ac"
    lfs = files["pytorch_model.bin"]
    assert (lfs.size, lfs.sha256, lfs.git_sha1) == (
        22, "f9343d7d7ec5c3d8bcced056c438fc9f1d3819e9ca3d42418a40857050e10e20", None
    )
    # The LFS file's blobId is its pointer's git oid, never the content hash we lock.
    assert lfs.etag != "cd1c6d8bde5006076655711a49feae66f07d707e"
    regular = files["eicar_test_file"]
    assert (regular.size, regular.git_sha1) == (70, "86b812515e075a1ae216e1239e615a1d9e0b316e")
    assert len(files) == 7


def test_tree_listing_parses_into_the_same_values() -> None:
    data = json.loads(
        (RECORDINGS / "api_models_google-bert_bert-base-uncased_tree_dd4bc8b2.json").read_text()
    )
    entries = [RepoFile(**e) for e in data["response_json"]]
    files = {f.path: f for f in files_from_tree("google-bert/bert-base-uncased", entries)}
    assert files["tf_model.h5"].sha256 == (
        "a7a17d6d844b5de815ccab5f42cad6d24496db3850a2a43d8258221018ce87d2"
    )
    assert files["tf_model.h5"].size == 536063208
    assert files["config.json"].git_sha1 == "fca794a5f07ff8f963fe8b61e3694b0fb7f955df"
    # The etags the live /resolve returns are these same hashes (resolve_etag_datapoints).
    datapoints = json.loads((RECORDINGS / "resolve_etag_datapoints_huggingface_js.json").read_text())
    lfs_case = next(c for c in datapoints["cases"] if c["url"].endswith("/resolve/"
                    "dd4bc8b21efa05ec961e3efc4ee5e3832a3679c7/tf_model.h5"))
    assert lfs_case["etag"].strip('"') == files["tf_model.h5"].etag


def test_an_unsafe_name_in_a_real_shaped_listing_is_refused() -> None:
    data = json.loads(
        (RECORDINGS / "api_models_mcpotato_42-eicar-street_revision_8b3861f6_blobs_true.json")
        .read_text()
    )
    data["siblings"].append({"rfilename": "../../.bashrc", "size": 1, "blobId": "a" * 40})
    info = ModelInfo(**data)
    with pytest.raises(UnsafePathError, match=r"unsafe file path '../../.bashrc'"):
        files_from_siblings(info.id, info.siblings or [])
