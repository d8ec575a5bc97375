"""Every answer recorded from the live Hub (fixtures/hub-recordings, copied from
../shared/hub-recordings) against the emulator's answer to the same request: the status, the
headers a client reads, and the fields. So the emulator cannot drift from the Hub it stands
in for, and a recording added without a comparison here fails the suite (issue 46)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest

from tests.conftest import RECORDINGS, Hub, random_weights
from wlock.hubserver.store import StoreBuilder


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((RECORDINGS / name).read_text(encoding="utf-8"))
    return data


def header(headers: dict[str, Any], name: str) -> str | None:
    """A recorded header, whatever its case and whether recorded as a list."""
    for key, value in headers.items():
        if key.lower() == name.lower():
            return str(value[0] if isinstance(value, list) else value)
    return None


def get(hub: Hub, path: str, method: str = "GET", **kw: Any) -> httpx2.Response:
    return httpx2.request(method, hub.endpoint + path, follow_redirects=False, **kw)


def renamed(hub: Hub) -> tuple[str, str]:
    old = hub.unique_id("old-name")
    StoreBuilder(hub.builder.root).rename("model", old, "acme/tiny-bert")
    return old, "acme/tiny-bert"


def check_info_with_blobs(hub: Hub) -> None:
    recorded = load("api_models_mcpotato_42-eicar-street_revision_8b3861f6_blobs_true.json")
    sha = get(hub, "/api/models/acme/tiny-bert").json()["sha"]
    ours = get(hub, f"/api/models/acme/tiny-bert/revision/{sha}?blobs=true").json()
    assert set(recorded) <= set(ours)
    for lfs in (True, False):
        theirs = next(s for s in recorded["siblings"] if ("lfs" in s) == lfs)
        mine = next(s for s in ours["siblings"] if ("lfs" in s) == lfs)
        assert set(theirs) == set(mine)
        assert {type(v) for v in theirs.values()} == {type(v) for v in mine.values()}


def check_model_info_headers(hub: Hub, name: str) -> None:
    recorded = load(name)
    response = recorded["response"]
    status = response["status"]["code"] if isinstance(response["status"], dict) \
        else response["status"]
    ours = get(hub, "/api/models/acme/tiny-bert")
    assert ours.status_code == status == 200
    assert header(response["headers"], "Content-Type") == ours.headers["Content-Type"]
    body = response.get("body_json")
    if body is not None:
        wanted = {"_id", "id", "private", "tags", "downloads", "likes", "modelId", "author",
                  "sha", "lastModified", "gated", "disabled", "config", "siblings",
                  "spaces", "createdAt", "usedStorage"}
        assert wanted <= set(body) and wanted <= set(ours.json())


def check_rename(hub: Hub, name: str) -> None:
    """A renamed repo: 307, a relative Location on the same path with the query string
    kept, the body saying where."""
    recorded = load(name)
    response = recorded["response"]
    status = response["status"]["code"] if isinstance(response["status"], dict) \
        else response["status"]
    location = header(response["headers"], "Location")
    asked = urlsplit(recorded["request"].get("uri") or recorded["request"]["url"])
    assert status == 307 and location is not None and location.startswith("/api/models/")
    assert urlsplit(location).query == asked.query  # kept (or none on both)
    old, new = renamed(hub)
    query = f"?{asked.query}" if asked.query else ""
    ours = get(hub, f"/api/models/{old}{query}")
    assert ours.status_code == 307
    assert ours.headers["Location"] == f"/api/models/{new}{query}"
    text = response.get("body") or response.get("body_text") or ""
    assert text.startswith("Temporary Redirect. Redirecting to ")
    assert ours.text == f"Temporary Redirect. Redirecting to /api/models/{new}{query}"


def check_tree_entries(hub: Hub) -> None:
    recorded = load("api_models_google-bert_bert-base-uncased_tree_dd4bc8b2.json")
    repo_id = hub.unique_id("xet-tree")
    sha = StoreBuilder(hub.builder.root, xet=True).commit("model", repo_id, {
        "model.safetensors": random_weights(300_000), "config.json": b"{}"})
    ours = get(hub, f"/api/models/{repo_id}/tree/{sha}").json()
    for lfs in (True, False):
        theirs = next(e for e in recorded["response_json"] if ("lfs" in e) == lfs)
        mine = next(e for e in ours if ("lfs" in e) == lfs)
        assert list(theirs) == list(mine)  # the same fields, in the same order
        if lfs:
            assert set(theirs["lfs"]) == set(mine["lfs"])


def check_gated_info(hub: Hub) -> None:
    recorded = load("hfh_api_models_meta-llama_Llama-3.1-8B-Instruct_gated_200.json")
    assert recorded["response"]["status"] == 200
    assert recorded["response"]["body_json"]["gated"] == "manual"
    ours = get(hub, "/api/models/acme/gated-llama")
    assert ours.status_code == 200 and ours.json()["gated"] == "manual"


def check_xet_reconstruction(hub: Hub) -> None:
    recorded = load("hfjs_xet_v2_reconstruction_celinah_large_text.json")["response"]
    repo_id = hub.unique_id("xet-recon")
    sha = StoreBuilder(hub.builder.root, xet=True).commit("model", repo_id, {
        "model.safetensors": random_weights(300_000)})
    token = get(hub, f"/api/models/{repo_id}/xet-read-token/{sha}").json()
    entry = next(e for e in get(hub, f"/api/models/{repo_id}/tree/{sha}").json()
                 if "xetHash" in e)
    ours = httpx2.get(f"{token['casUrl']}/v2/reconstructions/{entry['xetHash']}",
                      headers={"Authorization": f"Bearer {token['accessToken']}",
                               "Range": "bytes=1000-1999"})
    assert ours.status_code == recorded["status"] == 200
    theirs, mine = recorded["body_json"], ours.json()
    assert set(theirs) == set(mine)
    assert set(theirs["terms"][0]) == set(mine["terms"][0])
    assert set(theirs["terms"][0]["range"]) == set(mine["terms"][0]["range"])
    their_xorb = next(iter(theirs["xorbs"].values()))[0]
    my_xorb = next(iter(mine["xorbs"].values()))[0]
    assert set(their_xorb) == set(my_xorb)
    assert set(their_xorb["ranges"][0]) == set(my_xorb["ranges"][0])


def check_resolve_etags(hub: Hub) -> None:
    """ETag values as the live /resolve gives them: the sha256 (quoted) for an LFS or Xet
    file in X-Linked-Etag, the git blob id for a regular file; paths-info's shape."""
    recorded = load("resolve_etag_datapoints_huggingface_js.json")
    assert all(c["etag"].startswith('"') and c["etag"].endswith('"') for c in recorded["cases"])
    info = get(hub, "/api/models/acme/tiny-bert?blobs=true").json()
    siblings = {s["rfilename"]: s for s in info["siblings"]}
    lfs = get(hub, f"/acme/tiny-bert/resolve/{info['sha']}/model.safetensors", "HEAD")
    assert lfs.headers["X-Linked-Etag"] == f'"{siblings["model.safetensors"]["lfs"]["sha256"]}"'
    regular = get(hub, f"/acme/tiny-bert/resolve/{info['sha']}/config.json", "HEAD")
    assert regular.headers["X-Linked-Etag"] == f'"{siblings["config.json"]["blobId"]}"'
    answer = httpx2.post(f"{hub.endpoint}/api/models/acme/tiny-bert/paths-info/{info['sha']}",
                         json={"paths": ["model.safetensors", "config.json"], "expand": True})
    entries = {e["path"]: e for e in answer.json()}
    theirs = recorded["paths_info"]["tf_model.h5"]
    assert entries["model.safetensors"]["type"] == theirs["type"]
    assert set(entries["model.safetensors"]["lfs"]) == set(theirs["lfs"])
    assert set(entries["model.safetensors"]["lastCommit"]) == set(theirs["lastCommit(expand=true)"])
    assert "lfs" not in entries["config.json"]


def check_errors_and_rate_limits(hub: Hub) -> None:
    recorded = {a["request"]: a for a in load("transcribed_errors_and_ratelimit.json")["answers"]}
    anonymous = next(a for k, a in recorded.items() if "no-such-model" in k)
    ours = get(hub, "/api/models/acme/no-such-model")
    assert ours.status_code == anonymous["status"] == 401
    assert "X-Error-Code" not in ours.headers
    assert ours.headers["X-Error-Message"] == anonymous["headers"]["X-Error-Message"]
    assert ours.json() == {"error": anonymous["body_json"]["error"]}
    # With a token: the Hub names it (404 RepoNotFound).
    named = get(hub, "/api/models/acme/no-such-model", headers={"Authorization": "Bearer x"})
    assert (named.status_code, named.headers.get("X-Error-Code")) == (404, "RepoNotFound")
    gated_info = next(a for k, a in recorded.items() if "Llama-3.1-8B (gated" in k)
    assert get(hub, "/api/models/acme/gated-llama").status_code == gated_info["status"]
    gated_file = get(hub, "/acme/gated-llama/resolve/main/config.json", "HEAD")
    assert (gated_file.status_code, gated_file.headers["X-Error-Code"]) == (401, "GatedRepo")
    revision = next(a for k, a in recorded.items() if "no-such-branch" in k)
    ours = get(hub, "/api/models/acme/tiny-bert/revision/no-such-branch")
    assert ours.status_code == revision["status"]
    assert ours.headers["X-Error-Code"] == revision["headers"]["X-Error-Code"]
    # RateLimit and RateLimit-Policy on every answer, errors and redirects included.
    every = next(a for k, a in recorded.items() if k == "any API request")["headers"]
    pattern = re.sub(r"\d+", r"\\d+", re.escape(every["RateLimit"]))
    policy = re.sub(r"\d+", r"\\d+", re.escape(every["RateLimit-Policy"]))
    old, _ = renamed(hub)
    for answer in (get(hub, "/api/models/acme/tiny-bert"), get(hub, f"/api/models/{old}"),
                   get(hub, "/api/models/acme/no-such-model"),
                   get(hub, "/acme/tiny-bert/resolve/main/config.json", "HEAD")):
        kind = "resolvers" if "/resolve/" in str(answer.url) else "api"
        assert re.fullmatch(pattern.replace("api", kind), answer.headers["RateLimit"])
        assert re.fullmatch(policy.replace("api", kind), answer.headers["RateLimit-Policy"])
    # A 429: the same headers with r=0 and t= the seconds to the reset, no Retry-After.
    hub.process.faults(rate_limits={"api": {"q": 1, "w": 60}})
    get(hub, "/api/models/acme/tiny-bert")
    refused = get(hub, "/api/models/acme/tiny-bert")
    assert refused.status_code == 429 and "Retry-After" not in refused.headers
    assert re.fullmatch(r'"api";r=0;t=(59|60)', refused.headers["RateLimit"])
    assert refused.headers["RateLimit-Policy"] == '"fixed window";"api";q=1;w=60'
    hub.process.faults()


def check_resolve_regular(hub: Hub) -> None:
    recorded = load("transcribed_resolve_gpt2_config_json_307.json")
    theirs = recorded["response"]
    sha = get(hub, "/api/models/acme/tiny-bert").json()["sha"]
    ours = get(hub, "/acme/tiny-bert/resolve/main/config.json", "HEAD")
    assert ours.status_code == theirs["status"] == 307
    location = ours.headers["Location"]
    assert urlsplit(location).path == f"/api/resolve-cache/models/acme/tiny-bert/{sha}/config.json"
    their_location = theirs["headers"]["location"]
    assert urlsplit(their_location).path.startswith("/api/resolve-cache/models/")
    assert parse_qs(urlsplit(location).query)["etag"] == \
        [ours.headers["X-Linked-Etag"]] == [theirs["headers"]["x-linked-etag"].replace(
            "10c66461e4c109db5a2196bff4bb59be30396ed8", ours.headers["X-Linked-Etag"][1:-1])]
    assert ours.headers["X-Repo-Commit"] == sha
    followed = get(hub, location, "HEAD")
    wanted = recorded["followed"]["response"]
    assert followed.status_code == wanted["status"]
    for name in ("content-length", "etag", "x-repo-commit", "accept-ranges"):
        assert name in followed.headers, name
    assert followed.headers["ETag"] == ours.headers["X-Linked-Etag"]


def check_resolve_xet(hub: Hub) -> None:
    theirs = load("transcribed_resolve_gpt2_model_safetensors_302_xet.json")["response"]
    repo_id = hub.unique_id("xet-resolve")
    data = random_weights(300_000)
    sha = StoreBuilder(hub.builder.root, xet=True).commit("model", repo_id, {
        "model.safetensors": data})
    ours = get(hub, f"/{repo_id}/resolve/main/model.safetensors", "HEAD")
    assert ours.status_code == theirs["status"] == 302
    for name in ("x-repo-commit", "x-linked-size", "x-linked-etag", "x-xet-hash", "link"):
        assert name in theirs["headers"] and name in ours.headers, name
    assert ours.headers["X-Repo-Commit"] == sha
    assert ours.headers["X-Linked-Size"] == str(len(data))
    rels = set(re.findall(r'rel="([^"]+)"', ours.headers["Link"]))
    assert rels == set(re.findall(r'rel=\\?"([^"\\]+)', theirs["headers"]["link"])) == {
        "xet-auth", "xet-reconstruction-info"}
    cdn = httpx2.get(ours.headers["Location"], headers={"Range": "bytes=0-99"})
    assert cdn.status_code == 206
    assert cdn.headers["Content-Range"] == f"bytes 0-99/{len(data)}"


def check_tree_paging(hub: Hub) -> None:
    """The Link header's next page: absolute, on the same host, the query kept with an
    opaque cursor; 1,000 entries a page, 50 with expand."""
    theirs = load("transcribed_tree_pagination_link.json")["response"]["headers"]["link"]
    their_next = urlsplit(re.match(r"<([^>]+)>", theirs)[1])  # type: ignore[index]
    assert theirs.endswith('; rel="next"')
    ours = get(hub, "/api/datasets/acme/many-files/tree/main?recursive=true")
    assert len(ours.json()) == 1000
    link = ours.headers["Link"]
    assert link.endswith('; rel="next"')
    my_next = urlsplit(re.match(r"<([^>]+)>", link)[1])  # type: ignore[index]
    assert my_next.netloc == urlsplit(hub.endpoint).netloc
    assert {"recursive", "cursor"} <= set(parse_qs(my_next.query)) <= set(
        parse_qs(their_next.query))
    expanded = get(hub, "/api/datasets/acme/many-files/tree/main?recursive=true&expand=true")
    assert len(expanded.json()) == 50


def check_xet_token(hub: Hub) -> None:
    theirs = load("transcribed_xet_read_token.json")["response"]
    sha = get(hub, "/api/models/acme/tiny-bert").json()["sha"]
    ours = get(hub, f"/api/models/acme/tiny-bert/xet-read-token/{sha}")
    assert ours.status_code == theirs["status"]
    assert all(k in ours.headers for k in theirs["headers"])
    assert set(ours.json()) == set(theirs["body_json_keys"])


CHECKS: dict[str, Callable[[Hub], None]] = {
    "api_models_mcpotato_42-eicar-street_revision_8b3861f6_blobs_true.json":
        check_info_with_blobs,
    "api_models_google-bert_bert-base-uncased_200.json":
        lambda hub: check_model_info_headers(hub, "api_models_google-bert_bert-base-uncased_200.json"),
    "hfh_api_models_google-bert_bert-base-uncased_200.json":
        lambda hub: check_model_info_headers(hub,
                                             "hfh_api_models_google-bert_bert-base-uncased_200.json"),
    "api_models_bert-base-uncased_307_rename_redirect.json":
        lambda hub: check_rename(hub, "api_models_bert-base-uncased_307_rename_redirect.json"),
    "hfh_api_models_bert-base-uncased_307.json":
        lambda hub: check_rename(hub, "hfh_api_models_bert-base-uncased_307.json"),
    "hfh_api_models_t5-small_307.json":
        lambda hub: check_rename(hub, "hfh_api_models_t5-small_307.json"),
    "hfh_api_models_Meta-Llama-3.1-8B-Instruct_expand_307.json":
        lambda hub: check_rename(hub, "hfh_api_models_Meta-Llama-3.1-8B-Instruct_expand_307.json"),
    "api_models_google-bert_bert-base-uncased_tree_dd4bc8b2.json": check_tree_entries,
    "hfh_api_models_meta-llama_Llama-3.1-8B-Instruct_gated_200.json": check_gated_info,
    "hfjs_xet_v2_reconstruction_celinah_large_text.json": check_xet_reconstruction,
    "resolve_etag_datapoints_huggingface_js.json": check_resolve_etags,
    "transcribed_errors_and_ratelimit.json": check_errors_and_rate_limits,
    "transcribed_resolve_gpt2_config_json_307.json": check_resolve_regular,
    "transcribed_resolve_gpt2_model_safetensors_302_xet.json": check_resolve_xet,
    "transcribed_tree_pagination_link.json": check_tree_paging,
    "transcribed_xet_read_token.json": check_xet_token,
}


@pytest.mark.parametrize("recording", sorted(p.name for p in RECORDINGS.glob("*.json")))
def test_the_emulator_answers_as_the_recorded_hub(hub: Hub, recording: str) -> None:
    assert recording in CHECKS, f"{recording}: a recording with no comparison here"
    CHECKS[recording](hub)
