"""The emulator speaks Xet as the Hub does, judged by the real clients: huggingface_hub takes
the Xet path from the listing and the resolve answer's headers, fetches a read token, and
hf_xet downloads byte-identical files from the CAS by xorb ranges, never the bridge."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import hf_xet
import httpx2
import pytest
from huggingface_hub import (
    HfApi,
    constants,
    get_hf_file_metadata,
    hf_hub_download,
    hf_hub_url,
    snapshot_download,
)
from huggingface_hub import errors as hf_errors

from tests.conftest import Hub, random_weights, run_wlock, write_project
from wlock.hubserver.store import StoreBuilder
from wlock.xet import xorb
from wlock.xet.chunking import boundaries
from wlock.xet.hashing import chunk_hash, to_hex
from wlock.xet.xorb import HEADER_LEN


@pytest.fixture
def xet_repo(hub: Hub) -> tuple[str, str, dict[str, bytes]]:
    """A repo stored on Xet: two multi-chunk weights files, one small LFS file, a config."""
    repo_id = hub.unique_id("xet")
    files = {
        "model-00001-of-00002.safetensors": random_weights(3_000_000),
        "model-00002-of-00002.safetensors": random_weights(1_500_000),
        "tokenizer.model": os.urandom(5000),
        "config.json": b'{"model_type": "bert"}',
    }
    sha = StoreBuilder(hub.builder.root, xet=True).commit("model", repo_id, files)
    return repo_id, sha, files


def requests(hub: Hub) -> list[dict[str, Any]]:
    return list(hub.process.stats()["log"])


def cas_answer(hub: Hub, repo_id: str, sha: str, path: str, version: str = "v1",
               headers: dict[str, str] | None = None) -> httpx2.Response:
    token = httpx2.get(f"{hub.endpoint}/api/models/{repo_id}/xet-read-token/{sha}")
    xet_hash = get_hf_file_metadata(hf_hub_url(repo_id, path, revision=sha,
                                               endpoint=hub.endpoint)).xet_file_data
    assert xet_hash is not None
    return httpx2.get(f"{token.headers['X-Xet-Cas-Url']}/{version}/reconstructions/"
                      f"{xet_hash.file_hash}", headers={
                          "Authorization": f"Bearer {token.headers['X-Xet-Access-Token']}",
                          **(headers or {})})


def test_hf_xet_downloads_from_the_cas(hub: Hub, xet_repo: tuple[str, str, dict[str, bytes]],
                                      tmp_path: Path) -> None:
    repo_id, sha, files = xet_repo
    folder = Path(snapshot_download(repo_id, revision=sha, endpoint=hub.endpoint,
                                    cache_dir=tmp_path / "cache"))
    for name, data in files.items():
        assert (folder / name).read_bytes() == data, name
    log = requests(hub)
    paths = [e["path"] for e in log]
    assert any(p.startswith(f"/api/models/{repo_id}/xet-read-token/") for p in paths)
    assert sum(p.startswith("/v2/reconstructions/") for p in paths) == 3
    xorbs = [e for e in log if e["path"].startswith("/xorbs/default/")]
    assert xorbs and all(e["status"] == 206 for e in xorbs)
    # Every LFS byte came from xorb ranges (plus 8 bytes of header a chunk), not the bridge.
    lfs = [d for n, d in files.items() if n != "config.json"]
    chunks = sum(len(boundaries(d)) for d in lfs)
    assert sum(e["bytes"] for e in xorbs) == sum(map(len, lfs)) + HEADER_LEN * chunks
    assert not [p for p in paths if p.startswith("/objects/")], "the bridge was used"


def test_v2_falls_back_to_v1(hub: Hub, xet_repo: tuple[str, str, dict[str, bytes]],
                             tmp_path: Path) -> None:
    repo_id, sha, files = xet_repo
    hub.process.faults({"match": "/v2/reconstructions/", "action": "status",
                        "status": 404, "listener": "cdn"})
    folder = Path(snapshot_download(repo_id, revision=sha, endpoint=hub.endpoint,
                                    cache_dir=tmp_path / "cache"))
    assert all((folder / n).read_bytes() == d for n, d in files.items())
    paths = [e["path"] for e in requests(hub)]
    assert any(p.startswith("/v1/reconstructions/") for p in paths)


def test_the_bridge_refuses_past_its_limit_and_the_cas_serves(
        hub: Hub, xet_repo: tuple[str, str, dict[str, bytes]], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """As the Hub's bridge answers 400 above ~400 GB: plain HTTP fails, hf_xet does not."""
    repo_id, sha, files = xet_repo
    hub.process.faults(bridge_limit=2_000_000)
    folder = Path(snapshot_download(repo_id, revision=sha, endpoint=hub.endpoint,
                                    cache_dir=tmp_path / "xet"))
    assert all((folder / n).read_bytes() == d for n, d in files.items())
    small = "model-00002-of-00002.safetensors"  # 1.5 MB: under the limit
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)  # read at import from the env
    for name, refused in ((small, False), ("model-00001-of-00002.safetensors", True)):
        try:
            got = Path(hf_hub_download(repo_id, name, revision=sha, endpoint=hub.endpoint,
                                       cache_dir=tmp_path / "plain")).read_bytes()
        except hf_errors.BadRequestError as e:
            assert refused and "too large for the bridge" in str(e), e
        else:
            assert not refused and got == files[name]
    assert any(e["path"].startswith("/objects/") for e in requests(hub))


def test_listing_and_headers_carry_the_file_hash(
        hub: Hub, xet_repo: tuple[str, str, dict[str, bytes]], tmp_path: Path) -> None:
    repo_id, sha, files = xet_repo
    tree = {e.path: e for e in HfApi(endpoint=hub.endpoint).list_repo_tree(
        repo_id, revision=sha, recursive=True)}
    for name, data in files.items():
        meta = get_hf_file_metadata(hf_hub_url(repo_id, name, revision=sha,
                                               endpoint=hub.endpoint))
        if name == "config.json":  # kept in git: no Xet
            assert meta.xet_file_data is None
            assert getattr(tree[name], "xet_hash", None) is None
            continue
        (tmp_path / "f").write_bytes(data)
        [info] = hf_xet.hash_files([str(tmp_path / "f")])
        assert meta.xet_file_data is not None
        assert meta.xet_file_data.file_hash == info.hash
        assert meta.xet_file_data.refresh_route.endswith(
            f"/api/models/{repo_id}/xet-read-token/{sha}")
        raw = httpx2.get(f"{hub.endpoint}/api/models/{repo_id}/tree/{sha}").json()
        assert next(e for e in raw if e["path"] == name)["xetHash"] == info.hash


def test_read_token_in_headers_and_body_and_checked(
        hub: Hub, xet_repo: tuple[str, str, dict[str, bytes]]) -> None:
    repo_id, sha, _ = xet_repo
    answer = httpx2.get(f"{hub.endpoint}/api/models/{repo_id}/xet-read-token/{sha}")
    body = answer.json()
    assert body["casUrl"] == answer.headers["X-Xet-Cas-Url"]
    assert body["accessToken"] == answer.headers["X-Xet-Access-Token"]
    assert str(body["exp"]) == answer.headers["X-Xet-Token-Expiration"]
    good = cas_answer(hub, repo_id, sha, "tokenizer.model")
    assert good.status_code == 200
    url = good.json()["fetch_info"]
    xorb_url = next(iter(url.values()))[0]["url"]
    cas = answer.headers["X-Xet-Cas-Url"]
    file_hash = good.url.path.rsplit("/", 1)[-1]
    for auth in ({}, {"Authorization": "Bearer xet.1.SECRET-xet-read"},
                 {"Authorization": f"Bearer {body['accessToken']}x"}):
        refused = httpx2.get(f"{cas}/v1/reconstructions/{file_hash}", headers=auth)
        assert refused.status_code == 401, auth
    assert httpx2.get(xorb_url.split("?")[0]).status_code == 403  # presigned, or nothing
    assert httpx2.get(f"{hub.endpoint}/api/models/{repo_id}/xet-read-token/{'0' * 40}"
                      ).status_code == 404


def fetch_range(answer: dict[str, Any], version: str) -> bytes:
    """A reconstruction assembled as the spec says: each term's chunks from its xorb's
    bytes, headers read, the first term's offset skipped."""
    out = bytearray()
    for term in answer["terms"]:
        if version == "v1":
            [entry] = [f for f in answer["fetch_info"][term["hash"]]
                       if f["range"] == term["range"]]
            url, lo, hi = entry["url"], entry["url_range"]["start"], entry["url_range"]["end"]
        else:
            [group] = answer["xorbs"][term["hash"]]
            [entry] = [r for r in group["ranges"] if r["chunks"] == term["range"]]
            url, lo, hi = group["url"], entry["bytes"]["start"], entry["bytes"]["end"]
        region = httpx2.get(url, headers={"Range": f"bytes={lo}-{hi}"}).content
        assert len(region) == hi - lo + 1
        piece = bytearray()
        at = 0
        while at < len(region):
            assert region[at] == 0 and region[at + 4] == 0  # version 0, no compression
            size = int.from_bytes(region[at + 1:at + 4], "little")
            assert size == int.from_bytes(region[at + 5:at + 8], "little")
            piece += region[at + HEADER_LEN:at + HEADER_LEN + size]
            at += HEADER_LEN + size
        assert len(piece) == term["unpacked_length"]
        out += piece
    return bytes(out[answer["offset_into_first_range"]:])


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_reconstruction_of_a_range(hub: Hub, xet_repo: tuple[str, str, dict[str, bytes]],
                                   version: str) -> None:
    repo_id, sha, files = xet_repo
    name = "model-00001-of-00002.safetensors"
    data = files[name]
    whole = cas_answer(hub, repo_id, sha, name, version).json()
    assert whole["offset_into_first_range"] == 0
    assert fetch_range(whole, version) == data
    rng = random.Random(5)
    cuts = boundaries(data)
    for first, last in [(0, 0), (1, 99), (cuts[0] - 1, cuts[0]), (cuts[1], cuts[2] - 1),
                        (len(data) - 10, len(data) - 1), (len(data) - 10, len(data) + 99),
                        *((a, a + rng.randrange(1, 400_000)) for a in
                          (rng.randrange(len(data)) for _ in range(5)))]:
        answer = cas_answer(hub, repo_id, sha, name, version,
                            {"Range": f"bytes={first}-{last}"}).json()
        got = fetch_range(answer, version)
        assert got[:min(last, len(data) - 1) - first + 1] == data[first:last + 1], (first, last)
        # Only the chunks that hold the range: at most one chunk's worth on either side.
        assert len(got) - (min(last, len(data) - 1) - first + 1) <= 2 * 131072


def test_a_new_revision_shares_the_unchanged_chunks(hub: Hub, tmp_path: Path) -> None:
    """10% of a file's chunks changed: the store keeps 10% more, the new reconstruction
    names the old xorb for the rest, and hf_xet fetches only the changed chunks' xorb
    bytes beyond what both revisions share."""
    repo_id = hub.unique_id("xet-upgrade")
    builder = StoreBuilder(hub.builder.root, xet=True)
    old = bytearray(random_weights(4_000_000))
    first = builder.commit("model", repo_id, {"model.safetensors": bytes(old)})
    cuts = boundaries(bytes(old))
    new = bytearray(old)
    for k in range(0, len(cuts) - 1, 10):  # one chunk in ten: a byte in its middle
        new[(cuts[k] + cuts[k + 1]) // 2] ^= 0xFF
    second = builder.commit("model", repo_id, {"model.safetensors": bytes(new)})
    old_terms = cas_answer(hub, repo_id, first, "model.safetensors").json()["terms"]
    new_terms = cas_answer(hub, repo_id, second, "model.safetensors").json()["terms"]
    old_xorbs = {t["hash"] for t in old_terms}
    shared = sum(t["unpacked_length"] for t in new_terms if t["hash"] in old_xorbs)
    changed = len(range(0, len(cuts) - 1, 10))
    assert len(new) - shared <= (changed + 2) * 131072
    assert shared >= 0.8 * len(new)
    folder = Path(snapshot_download(repo_id, revision=second, endpoint=hub.endpoint,
                                    cache_dir=tmp_path / "cache"))
    assert (folder / "model.safetensors").read_bytes() == bytes(new)


def test_wlock_syncs_a_xet_repo_through_the_bridge(
        hub: Hub, xet_repo: tuple[str, str, dict[str, bytes]], tmp_path: Path) -> None:
    """wlock fetches what the bridge serves until it speaks Xet itself: the same bytes."""
    repo_id, sha, files = xet_repo
    project = write_project(tmp_path / "p", f'[[model]]\nid = "{repo_id}"\n'
                            f'ref = "{sha}"\ninclude = ["*"]\n')
    cache = tmp_path / "cache"
    for args in (("lock",), ("sync", "--cache-dir", str(cache)),
                 ("check", "--cache-dir", str(cache))):
        result = run_wlock(*args, "--endpoint", hub.endpoint, cwd=project)
        assert result.code == 0, result.stderr
    snapshot = next(cache.glob(f"models--*/snapshots/{sha}"))
    assert all((snapshot / n).read_bytes() == d for n, d in files.items())


def test_compressed_chunks_as_hf_xet_reads_them(hub: Hub, tmp_path: Path) -> None:
    """Chunks stored with LZ4 and with byte grouping + LZ4 (what uploads choose for text and
    for float tensors): hf_xet, xet-core's own decoder, downloads them byte-identical, and
    wlock.xet.xorb decodes every xorb of the store to the same chunks."""
    import numpy as np

    repo_id = hub.unique_id("xet-lz4")
    rng = np.random.default_rng(3)
    files = {
        "vocab.safetensors": b"".join(f"token {n} {n * 7919 % 1000}\n".encode()
                                      for n in range(120_000)),
        "model.safetensors": rng.normal(0, 0.02, 600_000).astype(np.float32).tobytes(),
        "noise.safetensors": random_weights(400_000),
    }
    builder = StoreBuilder(hub.builder.root, xet=True)
    sha = builder.commit("model", repo_id, files)
    schemes: set[int] = set()
    xorbs = builder.root / "xet" / "xorbs"
    for path in xorbs.iterdir():
        if path.suffix:
            continue
        region = path.read_bytes()
        at = 0
        while at < len(region):
            schemes.add(region[at + 4])
            at += HEADER_LEN + int.from_bytes(region[at + 1:at + 4], "little")
        hashes = json.loads(path.with_name(f"{path.name}.json").read_bytes())["hashes"]
        assert [to_hex(chunk_hash(c)) for c in xorb.decode(region)] == hashes
    assert {xorb.NONE, xorb.LZ4, xorb.BG4_LZ4} <= schemes
    folder = Path(snapshot_download(repo_id, revision=sha, endpoint=hub.endpoint,
                                    cache_dir=tmp_path / "cache"))
    for name, data in files.items():
        assert (folder / name).read_bytes() == data, name
    assert not [e for e in requests(hub) if e["path"].startswith("/objects/")]


def test_xorb_decoding_refuses_what_is_not_the_format() -> None:
    data = os.urandom(3000) + b"a" * 5000
    good = xorb.encode(data, xorb.BG4_LZ4) + xorb.encode(data, xorb.LZ4)
    assert list(xorb.decode(good)) == [data, data]
    assert xorb.bg4_regroup(xorb.bg4_split(data[:4003])) == data[:4003]
    cut = good[:-1]
    with pytest.raises(xorb.XorbFormatError, match="cut short"):
        list(xorb.decode(cut))
    bad_size = bytearray(xorb.encode(data, xorb.NONE))
    bad_size[5] ^= 1  # the unpacked size
    with pytest.raises(xorb.XorbFormatError, match="unpacks to"):
        list(xorb.decode(bytes(bad_size)))
    bad_frame = bytearray(xorb.encode(data, xorb.LZ4))
    bad_frame[12] ^= 0xFF
    with pytest.raises(xorb.XorbFormatError):
        list(xorb.decode(bytes(bad_frame)))
    with pytest.raises(xorb.XorbFormatError, match="scheme 7"):
        list(xorb.decode(xorb.header(1, 7, 1) + b"x"))
