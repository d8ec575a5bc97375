"""The only module that talks to the Hub's API; huggingface_hub does the HTTP.

It turns "this repo at this ref" into a commit and the files there, each with the hash the
Hub attests, and turns the Hub's failures into WlockErrors that say what to do.
"""

from __future__ import annotations

import io
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote

from wlock.errors import (
    HubError,
    HubUnreachableError,
    RepoNotFoundError,
    RevisionNotFoundError,
    UnsafePathError,
    redact,
)
from wlock.hubstatus import hub_error, is_transient, retry_delay
from wlock.lock.lockfile import is_commit
from wlock.lock.names import file_path_problem, repo_id_problem
from wlock.models import LockedFile, PickleScan, RepoKind
from wlock.version import __version__

if TYPE_CHECKING:
    from huggingface_hub import HfApi

    from wlock.scan import ScanLimits

T = TypeVar("T")

MAX_ATTEMPTS = 6
MAX_TRANSPORT_ATTEMPTS = 4
# A request that times out is tried twice: an API that accepted the connection and never
# answered will not answer the third time either. So `lock` against a hung endpoint ends
# within about 2 x timeout.
MAX_TIMEOUT_ATTEMPTS = 2
# Paths asked of paths-info in one request (huggingface_hub's own uploads ask 1,000 a time).
PATHS_PER_REQUEST = 1000
_HEX64 = re.compile(r"[0-9a-f]{64}")
DEFAULT_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True)
class RemoteSnapshot:
    """A repo at one commit, as the Hub lists it."""

    kind: RepoKind
    hub_id: str  # differs from requested_id when the Hub redirected a renamed repo
    revision: str
    files: tuple[LockedFile, ...]
    library_name: str | None = None  # the Hub's guess of the library that loads it
    # From the card's front matter (cardData): SPDX id or "other", its name for "other",
    # and the models it says it was made from (provenance, never a dependency).
    licenses: tuple[str, ...] = ()
    license_name: str | None = None
    base_models: tuple[str, ...] = ()


class HubClient:
    """Metadata requests to one endpoint, with the retries huggingface_hub leaves to us.

    `model_info`/`dataset_info` do not retry a 429 or a 5xx by themselves, so every call here
    goes through `_with_retries`, which honours Retry-After.
    """

    def __init__(
        self,
        endpoint: str,
        token: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        from huggingface_hub import HfApi

        self.endpoint = endpoint.rstrip("/")
        # huggingface_hub's own client has no timeout: a hung endpoint would hang `lock`.
        self.timeout = timeout
        # token=None lets huggingface_hub fall back to HF_TOKEN and the stored login, as
        # every other Hub tool does; we never read, print or store the value ourselves.
        self._api: HfApi = HfApi(endpoint=self.endpoint, token=token)
        self._token = token  # for the range reads of pickles; None: huggingface_hub's own
        self._sleep = sleep
        self._lock = threading.Lock()
        self._ranges: Any = None  # the httpx client of the range reads, made on first use

    def snapshot(self, kind: RepoKind, repo_id: str, ref: str) -> RemoteSnapshot:
        """Resolve `ref` to a commit and list its files in one request where the API allows.

        Raises a HubError subclass (exit 5) naming the repo.
        """
        info_call = self._api.model_info if kind == "model" else self._api.dataset_info
        try:
            info = self._with_retries(
                kind, repo_id, ref, lambda: info_call(repo_id, revision=ref,
                                                  files_metadata=True, timeout=self.timeout)
            )
        except RepoNotFoundError as e:
            raise self._other_kind(kind, repo_id, e) from None
        sha = getattr(info, "sha", None)
        if not isinstance(sha, str) or not is_commit(sha):
            raise HubError(
                f"{kind} {repo_id}@{ref}: the Hub answered without a commit id", repo=repo_id
            )
        siblings = getattr(info, "siblings", None)
        if siblings is not None:
            files = files_from_siblings(repo_id, siblings)
        else:
            # Some answers omit siblings; the paginated tree listing always has them.
            entries = self._with_retries(
                kind, repo_id, ref,
                lambda: list(self._api.list_repo_tree(
                    repo_id, revision=sha, repo_type=kind, recursive=True
                )),
            )
            files = files_from_tree(repo_id, entries)
        files = self._with_xet(kind, repo_id, sha, files)
        library = getattr(info, "library_name", None)
        card = _card(info)
        license_id = card.get("license")
        base = card.get("base_model")
        return RemoteSnapshot(
            kind=kind, hub_id=str(getattr(info, "id", repo_id)),
            revision=sha, files=files, library_name=library if isinstance(library, str) else None,
            # `license: mit` or a list (`license: [mit, apache-2.0]`): each is recorded.
            licenses=tuple(x for x in ([license_id] if isinstance(license_id, str)
                                       else license_id if isinstance(license_id, list)
                                       else []) if isinstance(x, str) and x),
            license_name=card["license_name"] if isinstance(card.get("license_name"), str)
            else None,
            # Repo ids only: a card written by a local save names a folder (provenance that
            # means nothing on another machine).
            base_models=tuple(b for b in ([base] if isinstance(base, str) else base or ())
                              if isinstance(b, str) and repo_id_problem(b) is None),
        )

    def _with_xet(self, kind: RepoKind, repo_id: str, sha: str,
                  files: tuple[LockedFile, ...]) -> tuple[LockedFile, ...]:
        """`files` with the Xet hash the Hub lists for each LFS file (`xetHash` in
        paths-info; the siblings of repo info carry none). An endpoint that answers no
        paths-info at all (a plain mirror, `wlock serve`) gives none; one that fails is
        retried, then an error: the lock never depends on a moment's failure."""
        lfs = [f.path for f in files if f.sha256 is not None]
        if not lfs:
            return files
        found: dict[str, str] = {}
        for start in range(0, len(lfs), PATHS_PER_REQUEST):
            batch = lfs[start:start + PATHS_PER_REQUEST]
            answer = self._paths_info(kind, repo_id, sha, batch)
            if answer is None:
                return files
            wanted = {f.path: f.sha256 for f in files if f.sha256 is not None}
            for entry in answer:
                if not isinstance(entry, dict):
                    continue
                path, xet, lfs_info = entry.get("path"), entry.get("xetHash"), entry.get("lfs")
                oid = lfs_info.get("oid") if isinstance(lfs_info, dict) else None
                # Only for a file asked for, and only when the listing names the same
                # content (its sha256) as the file locked.
                if isinstance(path, str) and path in wanted and oid == wanted[path] and \
                        isinstance(xet, str) and _HEX64.fullmatch(xet):
                    found[path] = xet
        return tuple(LockedFile(f.path, f.size, f.sha256, f.git_sha1, found.get(f.path))
                     if f.path in found else f for f in files)

    def _paths_info(self, kind: RepoKind, repo_id: str, sha: str,
                    paths: list[str]) -> list[Any] | None:
        """POST paths-info, as huggingface_hub's get_paths_info sends it (form fields), read
        as JSON; None where the endpoint has no such route."""
        import httpx2

        prefix = "datasets" if kind == "dataset" else "models"
        url = f"{self.endpoint}/api/{prefix}/{repo_id}/paths-info/{sha}"
        client = self._range_client()
        for attempt in range(1, MAX_TRANSPORT_ATTEMPTS + 1):
            wait: float = retry_delay(attempt, None)
            try:
                response = client.post(url, data={"paths": paths, "expand": "false"})
                status = response.status_code
                if status == 200:
                    try:
                        answer = response.json()
                    except ValueError:
                        answer = None
                    if not isinstance(answer, list):
                        raise HubError(f"{kind} {repo_id}: {self.endpoint} answered paths-info "
                                       "with something other than a list", repo=repo_id)
                    return answer
                if status in (404, 405, 501):
                    return None
                if not is_transient(status) or attempt == MAX_TRANSPORT_ATTEMPTS:
                    raise hub_error(status, response.headers.get("X-Error-Code"), kind=kind,
                                    repo_id=repo_id, endpoint=self.endpoint, attempts=attempt)
                wait = retry_delay(attempt, response.headers.get("Retry-After"))
            except httpx2.TransportError as e:
                if attempt == MAX_TRANSPORT_ATTEMPTS:
                    raise HubUnreachableError(
                        f"cannot list the Xet hashes of {kind} {repo_id} from "
                        f"{self.endpoint}: {redact(str(e)) or type(e).__name__}",
                        repo=repo_id, hint="Check the network, or raise --timeout.") from None
            self._sleep(wait)
        raise AssertionError("unreachable")

    def scan_pickle(self, kind: RepoKind, repo_id: str, revision: str, f: LockedFile,
                    limits: ScanLimits | None = None) -> tuple[PickleScan, int]:
        """The judgement of the locked file `f` (wlock.scan), read with HTTP ranges: a zip's
        directory and pickles, a pickle to its STOP, the first block of anything else;
        never the tensors. Returns it and the bytes read. Raises a HubError subclass (exit
        5) naming the file and the host: the Hub failed, or answered a range with bytes
        other than those asked."""
        from urllib.parse import urlsplit

        import httpx2

        from wlock.lock.pickles import BadRangeError, RangeReader, WholeBody, check_content_range
        from wlock.scan import ScanLimits, judge_file

        limits = limits or ScanLimits()
        prefix = "datasets/" if kind == "dataset" else ""
        url = f"{self.endpoint}/{prefix}{repo_id}/resolve/{revision}/{quote(f.path)}"
        client = self._range_client()
        whole = WholeBody()
        subject = f"{repo_id}: {f.path}"

        def refused(host: str, problem: str) -> BadRangeError:
            return BadRangeError(
                f"cannot judge {subject}: {host} answered a range request with {problem}",
                repo=repo_id, subject=subject,
                hint="The server (or a proxy before it) does not serve ranges as HTTP "
                "says; nothing from it was judged. Retry, or lock through another endpoint.")

        def fetch(start: int, end: int) -> bytes:
            if whole.file is not None:
                return whole.cut(start, end)
            for attempt in range(1, MAX_TRANSPORT_ATTEMPTS + 1):
                try:
                    with client.stream("GET", url, headers={
                            "Range": f"bytes={start}-{end - 1}"}) as response:
                        host = urlsplit(str(response.url)).netloc
                        status = response.status_code
                        if is_transient(status) and attempt < MAX_TRANSPORT_ATTEMPTS:
                            wait = retry_delay(attempt, response.headers.get("Retry-After"))
                        elif status == 200:
                            # Range ignored: the whole file, once, if the bound allows it.
                            if f.size > limits.max_inflated:
                                raise refused(host, f"the whole file ({f.size} bytes), past "
                                              "the judgement's bound max-inflated (raise it "
                                              "with [tool.wlock.policy.scan] max-inflated)")
                            problem = whole.keep(response.iter_bytes, f.size)
                            if problem:
                                raise refused(host, problem)
                            return whole.cut(start, end)
                        elif status == 206:
                            body = bytearray()
                            for chunk in response.iter_bytes():
                                body += chunk
                                if len(body) > end - start:
                                    break
                            problem = check_content_range(
                                response.headers.get("Content-Range"), start, end, f.size,
                                len(body))
                            if problem:
                                raise refused(host, problem)
                            return bytes(body)
                        else:
                            raise hub_error(status, response.headers.get("X-Error-Code"),
                                            kind=kind, repo_id=repo_id,
                                            endpoint=self.endpoint, attempts=attempt)
                except httpx2.TransportError as e:
                    if attempt == MAX_TRANSPORT_ATTEMPTS:
                        raise HubUnreachableError(
                            f"cannot read {subject} from {self.endpoint}: "
                            f"{redact(str(e)) or type(e).__name__}", repo=repo_id,
                            hint="Check the network, or raise --timeout.") from None
                    wait = retry_delay(attempt, None)
                self._sleep(wait)
            raise AssertionError("unreachable")

        reader = RangeReader(f.size, fetch)
        try:
            return judge_file(io.BufferedReader(reader), f.path, limits, f.size), \
                reader.bytes_read
        finally:
            whole.close()

    def _range_client(self) -> Any:
        """One httpx client for every range read of this lock (connections kept alive; it is
        safe across threads). httpx drops Authorization on a redirect to another origin (the
        CDN): the token never leaves the endpoint."""
        import httpx2
        from huggingface_hub import get_token

        with self._lock:
            if self._ranges is None:
                headers = {"User-Agent": f"wlock/{__version__}"}
                token = self._token or get_token()
                if token:
                    headers["Authorization"] = f"Bearer {token}"
                self._ranges = httpx2.Client(
                    follow_redirects=True, timeout=self.timeout, headers=headers,
                    limits=httpx2.Limits(max_connections=32, max_keepalive_connections=32))
            return self._ranges

    def read_file(self, kind: RepoKind, repo_id: str, revision: str, path: str) -> bytes:
        """The bytes of one small file at a commit (an index, modules.json): what a loader's
        rule reads to choose. Through huggingface_hub's own download (its redirects, and the
        token kept from other hosts) into a folder that is gone when this returns.

        Raises a HubError subclass (exit 5) naming the repo.
        """
        import tempfile

        with tempfile.TemporaryDirectory(prefix="wlock-read-") as folder:
            local = self._with_retries(
                kind, repo_id, revision,
                lambda: self._api.hf_hub_download(
                    repo_id, path, repo_type=kind, revision=revision, cache_dir=folder,
                    etag_timeout=self.timeout))
            with open(str(local), "rb") as f:
                return f.read()

    def _other_kind(self, kind: RepoKind, repo_id: str, error: RepoNotFoundError
                    ) -> RepoNotFoundError:
        """A repo not found as a model may be a dataset (and the other way round): one more
        request, made only on this failure, turns "not found" into "did you mean"."""
        other: RepoKind = "dataset" if kind == "model" else "model"
        try:
            self._api.repo_info(repo_id, repo_type=other, timeout=self.timeout)
        except Exception:  # noqa: BLE001 - not there either (or unreachable): as it was
            return error
        flag = "--dataset " if other == "dataset" else ""
        return RepoNotFoundError(
            f"{kind} {repo_id} was not found on {self.endpoint}, but a {other} {repo_id} "
            f"exists: did you mean the {other}?", repo=repo_id,
            hint=f"Move it to a [[{other}]] table in weights.toml, or `wlock remove "
            f"{repo_id}{' --dataset' if kind == 'dataset' else ''}` and `wlock add "
            f"{flag}{repo_id}`.")

    def _with_retries(self, kind: RepoKind, repo_id: str, ref: str, call: Callable[[], T]) -> T:
        from huggingface_hub.errors import HfHubHTTPError

        transport, timeouts = _transport_errors()

        for attempt in range(1, MAX_ATTEMPTS + 1):
            try:
                return call()
            except HfHubHTTPError as e:
                status = e.response.status_code if e.response is not None else None
                if not is_transient(status) or attempt == MAX_ATTEMPTS:
                    raise self._translate(e, kind, repo_id, ref) from None
                self._sleep(retry_delay(attempt, e.response.headers.get("Retry-After")))
            except transport as e:
                # huggingface_hub lets its transport's errors through (connect, read, timeout).
                # A dropped connection is worth a few quick retries; a refused one rarely
                # heals within seconds, so these stop sooner than 429s and 5xx; a timeout
                # costs `timeout` seconds each, so it is tried twice only.
                timed_out = isinstance(e, timeouts)
                if attempt >= (MAX_TIMEOUT_ATTEMPTS if timed_out else MAX_TRANSPORT_ATTEMPTS):
                    what = (f"no answer within {self.timeout:g}s, {attempt} times" if timed_out
                            else redact(str(e)) or type(e).__name__)
                    raise HubUnreachableError(
                        f"cannot reach {self.endpoint} for {kind} {repo_id}: {what}",
                        repo=repo_id,
                        hint="Check the network, or the endpoint (--endpoint / HF_ENDPOINT)"
                        + ("; on a slow link raise --timeout." if timed_out else "."),
                    ) from None
                self._sleep(retry_delay(attempt, None))
        raise AssertionError("unreachable")

    def _translate(self, e: Exception, kind: RepoKind, repo_id: str, ref: str) -> HubError:
        from huggingface_hub import errors as hf

        response: Any = getattr(e, "response", None)
        status = response.status_code if response is not None else None
        code = response.headers.get("X-Error-Code") if response is not None else None
        # huggingface_hub's classes first: it knows answers that carry no X-Error-Code.
        if isinstance(e, hf.GatedRepoError):
            code = "GatedRepo"
        elif isinstance(e, hf.RepositoryNotFoundError):
            code = "RepoNotFound"
        elif isinstance(e, hf.RevisionNotFoundError) or code == "RevisionNotFound":
            return RevisionNotFoundError(
                f"{kind} {repo_id}: revision {ref!r} not found",
                repo=repo_id,
                hint="Check `ref` in weights.toml: a branch, a tag or a 40-hex commit.",
            )
        return hub_error(status, code, kind=kind, repo_id=repo_id, endpoint=self.endpoint,
                         attempts=MAX_ATTEMPTS)


def _card(info: Any) -> dict[str, Any]:
    """The card's front matter as a dict, from huggingface_hub's ModelInfo (`card_data`, a
    CardData in 1.x, a dict in some answers), or {}."""
    card = getattr(info, "card_data", None) or getattr(info, "cardData", None)
    if card is None:
        return {}
    if hasattr(card, "to_dict"):
        card = card.to_dict()
    return card if isinstance(card, dict) else {}


def _transport_errors() -> tuple[tuple[type[Exception], ...], tuple[type[Exception], ...]]:
    """The exceptions huggingface_hub's HTTP stack raises for a failed connection, and those
    of them that are timeouts: httpx2's from 1.0 on, requests' before (0.3x, the releases
    transformers 4.x requires). Both are accepted, whichever is installed."""
    transport: list[type[Exception]] = []
    timeouts: list[type[Exception]] = []
    try:
        import httpx2

        transport.append(httpx2.TransportError)
        timeouts.append(httpx2.TimeoutException)
    except ImportError:  # pragma: no cover - httpx2 is a dependency of ours
        pass
    try:
        import requests

        transport.append(requests.exceptions.RequestException)
        timeouts.append(requests.exceptions.Timeout)
    except ImportError:
        pass
    return tuple(transport), tuple(timeouts)


def files_from_siblings(repo_id: str, siblings: Iterable[Any]) -> tuple[LockedFile, ...]:
    """`siblings[]` of repo info with `?blobs=true` -> LockedFiles (sha256 for LFS)."""
    files = []
    for s in siblings:
        path = s.rfilename
        if not isinstance(path, str) or file_path_problem(path):
            raise UnsafePathError(repo_id, str(path))
        if s.lfs is not None:
            files.append(LockedFile(path=path, size=int(s.lfs.size), sha256=s.lfs.sha256))
        elif s.blob_id is not None and s.size is not None:
            files.append(LockedFile(path=path, size=int(s.size), git_sha1=s.blob_id))
        else:
            raise HubError(
                f"{repo_id}: the Hub listed {path!r} without its size and hash",
                repo=repo_id, hint="The endpoint must support `?blobs=true` on repo info.",
            )
    return _checked(repo_id, files)


def files_from_tree(repo_id: str, entries: Iterable[Any]) -> tuple[LockedFile, ...]:
    """Entries of the recursive tree listing -> LockedFiles; folders are skipped."""
    files = []
    for entry in entries:
        if not hasattr(entry, "blob_id"):
            continue  # a RepoFolder
        if file_path_problem(entry.path):
            raise UnsafePathError(repo_id, entry.path)
        if entry.lfs is not None:
            files.append(LockedFile(path=entry.path, size=int(entry.lfs.size),
                                    sha256=entry.lfs.sha256))
        else:
            files.append(LockedFile(path=entry.path, size=int(entry.size),
                                    git_sha1=entry.blob_id))
    return _checked(repo_id, files)


def _checked(repo_id: str, files: list[LockedFile]) -> tuple[LockedFile, ...]:
    seen: set[str] = set()
    for f in files:
        digest = f.sha256 if f.sha256 is not None else f.git_sha1
        expected = 64 if f.sha256 is not None else 40
        if digest is None or len(digest) != expected or not all(
            c in "0123456789abcdef" for c in digest
        ):
            raise HubError(f"{repo_id}: malformed hash for {f.path!r}", repo=repo_id)
        if f.path in seen:
            raise HubError(f"{repo_id}: the Hub listed {f.path!r} twice", repo=repo_id)
        seen.add(f.path)
    return tuple(sorted(files, key=lambda f: f.path))
