"""The client side of the Hub's CAS: a file's Xet hash and read token from the endpoint, its
reconstruction from the CAS, and xorb ranges from their presigned URLs.

As huggingface_hub and hf_xet speak it: a resolve answer (HEAD, not followed) names the file's
hash in `X-Xet-Hash` and the token's URL in `Link: <...>; rel="xet-auth"`; the token endpoint
answers the CAS's URL and an access token (in its JSON body, and in `X-Xet-*` headers); the CAS
answers `GET /v2/reconstructions/{hash}` (or `/v1`, which older deployments speak) with the
file's terms and where each xorb's chunk ranges are served. HTTP is httpx2's; the Hub's token
goes to the endpoint's origin only, the CAS's token to the CAS only, and a xorb URL carries
its own signature and gets neither.

Anything not in this shape is a CasError: the caller then takes the plain path (the bridge),
it never guesses at a reconstruction.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import httpx2


class CasError(Exception):
    """The Xet path cannot be taken for this file (said why)."""


@dataclass(frozen=True, slots=True)
class Term:
    xorb: str
    start: int  # chunk indices in the xorb, end exclusive
    end: int
    length: int  # unpacked bytes


@dataclass(frozen=True, slots=True)
class Fetch:
    """Where chunks [start, end) of a xorb are served: a URL and its byte range (inclusive)."""

    url: str
    start: int
    end: int
    first: int
    last: int


@dataclass(frozen=True, slots=True)
class Reconstruction:
    terms: tuple[Term, ...]
    fetches: dict[str, tuple[Fetch, ...]]  # per xorb
    skip: int  # offset_into_first_range

    @property
    def size(self) -> int:
        return sum(t.length for t in self.terms) - self.skip

    def fetch_for(self, term: Term) -> Fetch:
        for f in self.fetches.get(term.xorb, ()):
            if f.start <= term.start and term.end <= f.end:
                return f
        raise CasError(f"the reconstruction names no URL for chunks {term.start}-{term.end} "
                       f"of xorb {term.xorb}")


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CasError(f"a reconstruction with {value!r} where a count belongs")
    return value


def _hash(value: Any) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"[0-9a-f]{64}", value):
        raise CasError(f"a reconstruction naming {value!r} as a xorb")
    return value


def parse_reconstruction(answer: Any) -> Reconstruction:
    """A /v2 (`xorbs`) or /v1 (`fetch_info`) answer, checked field by field."""
    try:
        terms = tuple(Term(_hash(t["hash"]), _int(t["range"]["start"]), _int(t["range"]["end"]),
                           _int(t["unpacked_length"])) for t in answer["terms"])
        fetches: dict[str, list[Fetch]] = {}
        if "xorbs" in answer:
            for xorb, groups in answer["xorbs"].items():
                for group in groups:
                    for r in group["ranges"]:
                        fetches.setdefault(_hash(xorb), []).append(Fetch(
                            str(group["url"]), _int(r["chunks"]["start"]),
                            _int(r["chunks"]["end"]), _int(r["bytes"]["start"]),
                            _int(r["bytes"]["end"])))
        else:
            for xorb, entries in answer["fetch_info"].items():
                for e in entries:
                    fetches.setdefault(_hash(xorb), []).append(Fetch(
                        str(e["url"]), _int(e["range"]["start"]), _int(e["range"]["end"]),
                        _int(e["url_range"]["start"]), _int(e["url_range"]["end"])))
        skip = _int(answer.get("offset_into_first_range", 0))
    except (KeyError, TypeError, AttributeError) as e:
        raise CasError(f"a reconstruction without its fields ({e!r})") from None
    if any(t.end <= t.start for t in terms) or any(f.last < f.first for fs in fetches.values()
                                                    for f in fs):
        raise CasError("a reconstruction with an empty or reversed range")
    return Reconstruction(terms, {x: tuple(fs) for x, fs in fetches.items()}, skip)


@dataclass(frozen=True, slots=True)
class XetFile:
    """What a resolve answer says of a file stored on Xet."""

    file_hash: str
    token_url: str


def xet_file(response: httpx2.Response) -> XetFile | None:
    """The Xet hash and token URL of a resolve answer; None for a file not on Xet."""
    file_hash = response.headers.get("X-Xet-Hash")
    # httpx's parser of the Link header: the live Hub sends the token route beside the
    # reconstruction's (rel="xet-auth", rel="xet-reconstruction-info").
    found = response.links.get("xet-auth", {}).get("url")
    if not file_hash or not found or not re.fullmatch(r"[0-9a-f]{64}", file_hash):
        return None
    return XetFile(file_hash, str(response.url.join(found)))


def read_token(answer: httpx2.Response) -> tuple[str, str, int]:
    """The CAS's URL, the access token and its expiry (Unix seconds, 0 when not given) of the
    endpoint's token answer: its JSON body, else its `X-Xet-*` headers."""
    try:
        body = answer.json()
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    url = body.get("casUrl") or answer.headers.get("X-Xet-Cas-Url")
    token = body.get("accessToken") or answer.headers.get("X-Xet-Access-Token")
    exp: Any = body.get("exp") or answer.headers.get("X-Xet-Token-Expiration")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")) or not (
            isinstance(token, str) and token):
        raise CasError("the Xet token answer names no CAS URL or token")
    try:
        expiry = int(exp)
    except (TypeError, ValueError):
        expiry = 0
    return url.rstrip("/"), token, expiry


class Cas:
    """One CAS session: its URL and token, from the endpoint's token answer."""

    def __init__(self, http: httpx2.Client, token_answer: httpx2.Response) -> None:
        self._http = http
        self.url, self._token, _ = read_token(token_answer)

    def reconstruction(self, file_hash: str) -> Reconstruction:
        """The whole file's reconstruction: /v2, else /v1 where the CAS has no /v2."""
        for version in ("v2", "v1"):
            try:
                response = self._http.get(
                    f"{self.url}/{version}/reconstructions/{file_hash}",
                    headers={"Authorization": f"Bearer {self._token}"})
            except httpx2.HTTPError as e:
                raise CasError(f"the CAS at {self.url} did not answer ({e})") from None
            if response.status_code == 404 and version == "v2":
                continue
            if response.status_code != 200:
                raise CasError(f"the CAS at {self.url} answered {response.status_code} for "
                               f"file {file_hash}")
            try:
                return parse_reconstruction(response.json())
            except ValueError:
                raise CasError(f"the CAS at {self.url} answered no JSON") from None
        raise AssertionError("unreachable")
