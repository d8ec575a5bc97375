"""The only module that talks to the Hub's API; huggingface_hub does the HTTP.

It turns "this repo at this ref" into a commit and the files there, each with the hash the
Hub attests, and turns the Hub's failures into WlockErrors that say what to do.
"""

from __future__ import annotations

import io
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote, urlsplit

from wlock.cancel import sleep as cancellable_sleep
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
from wlock.models import FormatScan, LockedFile, PickleScan, RepoKind
from wlock.ratelimit import RateBudget
from wlock.units import human_size
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
# Repo info's `siblings` are trusted to be whole only below this many: huggingface_hub's
# snapshot_download lists the paged tree for any repo past 1,000 files (PR #3565).
SIBLINGS_TRUSTED = 1000
_HEX64 = re.compile(r"[0-9a-f]{64}")
# What the gguf rule reads of a GGUF file: its header's first keys (general.architecture,
# general.type) come first, well within this.
# How far back `history` looks for a locked commit before it says "more than this".
MAX_HISTORY = 1000
# A tree listing's bounds (issue 59): a page's body (the Hub's 1,000 entries are ~0.2 MB, 50
# expanded ones less: past this a page is not a page, and parsing it would hold GBs; a page of
# 1,000,000 entries held 892 MB), and the entries of one listing, files and folders (the
# largest repos on the Hub list a few million). WLOCK_MAX_PAGE_BYTES and
# WLOCK_MAX_LISTING_ENTRIES change them.
MAX_PAGE_BYTES = 32 * 1024 * 1024
MAX_LISTING_ENTRIES = 5_000_000
GGUF_HEAD = 64 * 1024
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
        sleep: Callable[[float], None] | None = None,
        budget: RateBudget | None = None,
        note: Callable[[str], None] | None = None,
    ) -> None:
        """`budget`: the Hub's rate limits as it states them, shared by every request of
        the command (a default one, with the default bound on waiting, when None). `note`
        shows progress on work that takes more than a second (a listing of many pages)."""
        from huggingface_hub import HfApi
        from huggingface_hub.utils.tqdm import disable_progress_bars

        # Its downloads here are a loader's small reads, drawn by tqdm on a terminal under
        # the URL's tail (`(…)5b1c…%22`): wlock shows its own progress, never these.
        disable_progress_bars()
        self.endpoint = endpoint.rstrip("/")
        # huggingface_hub's own client has no timeout: a hung endpoint would hang `lock`.
        self.timeout = timeout
        # token=None lets huggingface_hub fall back to HF_TOKEN and the stored login, as
        # every other Hub tool does; we never read, print or store the value ourselves.
        self._api: HfApi = HfApi(endpoint=self.endpoint, token=token)
        self._token = token  # for the range reads of pickles; None: huggingface_hub's own
        # Back-offs and rate-limit waits the user's Ctrl-C ends at once (wlock.cancel).
        self._sleep = sleep or cancellable_sleep
        self._note = note or (lambda message: None)
        self.budget = budget or RateBudget(sleep=self._sleep,
                                           authenticated=self._authenticated())
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
        hub_id = str(getattr(info, "id", None) or repo_id)
        files = self._files(kind, hub_id, sha, getattr(info, "siblings", None))
        library = getattr(info, "library_name", None)
        card = _card(info)
        license_id = card.get("license")
        base = card.get("base_model")
        return RemoteSnapshot(
            kind=kind, hub_id=hub_id,
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

    def _files(self, kind: RepoKind, repo_id: str, sha: str, siblings: Any
               ) -> tuple[LockedFile, ...]:
        """Every file of the commit, from the paged tree listing, checked against repo
        info's `siblings`.

        `siblings` alone cannot be trusted to be whole: the live Hub cuts it at 100,000 files,
        and earlier "when server-side caching issues happen" (huggingface_hub #3059, PR
        #3565), with nothing in the answer to say so; a mirror may list it without sizes and
        hashes. The tree listing pages to the end and carries sizes, hashes and Xet hashes,
        for the cost of the paths-info request it replaces. Every sibling must be in it with
        the same size and hash, or the listings disagree and no lock is written (exit 5).
        An endpoint without the tree route is trusted on `siblings` only while they are
        complete beyond doubt: fewer than SIBLINGS_TRUSTED, each with its hash.
        """
        listed = self._tree(kind, repo_id, sha)
        named = [] if siblings is None else list(siblings)
        if listed is None:
            if siblings is None or len(named) >= SIBLINGS_TRUSTED:
                raise HubError(
                    f"{kind} {repo_id}@{sha[:7]}: {self.endpoint} serves no tree listing, "
                    + ("and repo info lists no files" if siblings is None else
                       f"and repo info lists {len(named)} files, where the Hub cuts its list "
                       "(at 100,000 files, or earlier under load)")
                    + ": the lock would not be known to be complete", repo=repo_id,
                    hint="Lock through an endpoint that serves "
                    "/api/{models|datasets}/<id>/tree/<commit> (the Hub itself does).")
            return files_from_siblings(repo_id, named)
        by_path = {f.path: f for f in listed}
        for s in named:
            path = getattr(s, "rfilename", None)
            mine = by_path.get(path) if isinstance(path, str) else None
            lfs, blob, size = getattr(s, "lfs", None), getattr(s, "blob_id", None), \
                getattr(s, "size", None)
            theirs = (lfs.sha256, int(lfs.size)) if lfs is not None else \
                (blob, int(size)) if blob is not None and size is not None else None
            if mine is None or (theirs is not None and theirs != (mine.etag, mine.size)):
                what = "does not list it" if mine is None else (
                    f"lists it as {mine.size} bytes, {mine.etag}, where repo info says "
                    f"{theirs[1]} bytes, {theirs[0]}" if theirs else "")
                raise HubError(
                    f"{kind} {repo_id}@{sha[:7]}: the Hub's two listings of the commit "
                    f"disagree: repo info lists {path!r}, the tree listing {what}",
                    repo=repo_id, hint="A listing was cut short or served from a stale "
                    "cache (a mirror's, or the Hub's under load): retry later, or lock "
                    "through another endpoint.")
        return listed

    def _tree(self, kind: RepoKind, repo_id: str, sha: str) -> tuple[LockedFile, ...] | None:
        """The recursive tree listing at `sha`, every page (the `Link` header's cursor, as
        huggingface_hub's list_repo_tree follows it), 1,000 entries a page; None when the
        endpoint has no such route. A pager that goes wrong (a page listed twice, a page
        that adds nothing, a loop: a mirror that drops the cursor) is never looped on: the
        listing is then asked folder by folder (olah 0.5 asks upstream without the cursor
        and keeps one page a folder, so each folder of fewer than a page's entries is
        whole), and a folder whose own paging is broken ends it. Raises a HubError
        subclass (exit 5) naming the repo."""
        try:
            listed = self._pages(kind, repo_id, sha, "", recursive=True, state=_Listing())
        except _PagingBroken as broken:
            self._note(f"{kind} {repo_id}: {self.endpoint} pages the whole listing wrongly; "
                       "listing it folder by folder")
            return self._walk(kind, repo_id, sha, broken)
        if listed is None:
            return None
        return files_from_tree(repo_id, listed.entries, listed.xet_hashes)

    def _walk(self, kind: RepoKind, repo_id: str, sha: str, first: _PagingBroken
              ) -> tuple[LockedFile, ...]:
        """Every folder's own listing, one after another, from the root down."""
        state = _Listing()
        todo = [""]
        while todo:
            folder = todo.pop()
            before = set(state.folders)
            try:
                listed = self._pages(kind, repo_id, sha, folder, recursive=False, state=state)
            except _PagingBroken as broken:
                raise HubError(f"{first.message}; asked folder by folder, {broken.why}",
                               repo=repo_id, hint=broken.hint) from None
            if listed is None:
                raise first
            todo += sorted(state.folders - before, reverse=True)
        return files_from_tree(repo_id, state.entries, state.xet_hashes)

    def _pages(self, kind: RepoKind, repo_id: str, sha: str, folder: str, *, recursive: bool,
               state: _Listing) -> _Listing | None:
        """The listing of `folder` at `sha`, every page, added to `state` (which holds what
        earlier folders gave); None when the endpoint has no tree route."""
        from urllib.parse import urljoin

        from huggingface_hub.hf_api import RepoFile

        prefix = "datasets" if kind == "dataset" else "models"
        where = f"/{quote(folder)}" if folder else ""
        url: str | None = (f"{self.endpoint}/api/{prefix}/{repo_id}/tree/{sha}{where}"
                           f"?recursive={'true' if recursive else 'false'}&expand=false")
        origin = urlsplit(self.endpoint)[:2]
        asked: set[str] = set()
        budget = int(os.environ.get("WLOCK_MAX_LISTING_ENTRIES") or MAX_LISTING_ENTRIES)
        pages = 0
        where_said = f" of {folder}/" if folder else ""

        def broken(why: str, hint: str) -> _PagingBroken:
            error = _PagingBroken(
                f"{kind} {repo_id}@{sha[:7]}: {self.endpoint}'s file listing{where_said} {why}",
                repo=repo_id, hint=hint)
            error.why = f"its listing{where_said} {why}"
            return error

        while url is not None:
            if time.monotonic() - state.shown >= 1.0:  # a listing of many pages: say how far
                state.shown = time.monotonic()
                self._note(f"{kind} {repo_id}: {len(state.entries):,} files listed "
                           f"({state.pages} pages)")
            asked.add(url)
            response = self._get(url, kind, repo_id, f"{kind} {repo_id}: the file listing",
                                 max_bytes=int(os.environ.get("WLOCK_MAX_PAGE_BYTES")
                                               or MAX_PAGE_BYTES))
            pages += 1
            state.pages += 1
            if response.status_code in (404, 405, 501) and state.pages == 1 and \
                    response.headers.get("X-Error-Code") is None:
                return None
            if response.status_code != 200:
                raise self._refused(response, kind, repo_id, sha)
            try:
                page = response.json()
            except ValueError:
                page = None
            if not isinstance(page, list):
                raise HubError(f"{kind} {repo_id}: {self.endpoint} answered the file listing "
                               "with something other than a list", repo=repo_id)
            new = 0
            for raw in page:
                if not isinstance(raw, dict):
                    continue
                path = raw.get("path")
                if raw.get("type") != "file":
                    if isinstance(path, str) and path not in state.folders:
                        state.folders.add(path)
                        new += 1
                    continue
                if path in state.seen:
                    raise broken(f"listed {path!r} twice (page {pages}): its paging is broken",
                                 "A mirror that drops the listing's cursor serves the first "
                                 "page again: lock through the Hub itself, or a mirror that "
                                 "pages.")
                state.seen.add(str(path))
                new += 1
                if isinstance(raw.get("xetHash"), str):
                    state.xet_hashes[str(path)] = raw["xetHash"]
                try:
                    state.entries.append(RepoFile(**raw))  # type: ignore[no-untyped-call]
                except (TypeError, KeyError, ValueError):
                    raise HubError(f"{kind} {repo_id}: {self.endpoint} listed {path!r} "
                                   "without its size and hash", repo=repo_id) from None
            following = response.links.get("next", {}).get("url")
            url = urljoin(url, following) if following else None
            if url is None:
                break
            if not page:
                raise HubError(f"{kind} {repo_id}: {self.endpoint}'s file listing gave an "
                               "empty page with a next one", repo=repo_id)
            if not new:  # a page of folders listed before (a dropped cursor) adds nothing
                raise broken(f"gave page {pages} with nothing not listed before, and a next "
                             "one: its paging is broken", "A mirror that drops the "
                             "listing's cursor serves the first page again: lock through the "
                             "Hub itself, or a mirror that pages.")
            if len(state.seen) + len(state.folders) > budget:
                raise HubError(
                    f"{kind} {repo_id}@{sha[:7]}: {self.endpoint}'s file listing passed "
                    f"{budget:,} entries ({state.pages} pages) and goes on", repo=repo_id,
                    hint="A repo this large is rare: if it is one, raise "
                    "WLOCK_MAX_LISTING_ENTRIES; else the mirror's paging loops.")
            if urlsplit(url)[:2] != origin:
                # olah passes the Hub's own `Link` through; the same path and cursor asked
                # of the endpoint itself is the next page (a mirror's users often cannot
                # reach the Hub, and the token is the endpoint's).
                moved = urlsplit(url)
                base = urlsplit(self.endpoint).path.rstrip("/")
                tree = f"/api/{prefix}/{repo_id}/tree/"
                if moved.path.startswith(base + tree):
                    path = moved.path
                elif moved.path.startswith(tree):
                    path = base + moved.path
                else:
                    raise HubError(
                        f"{kind} {repo_id}: {self.endpoint}'s file listing points its next "
                        f"page at another host ({moved.netloc}) and another path",
                        repo=repo_id, hint="A mirror that passes the Hub's paging links "
                        "through unchanged: lock through the Hub itself, or a mirror that "
                        "rewrites them.")
                url = urlsplit(self.endpoint)._replace(path=path, query=moved.query,
                                                       fragment="").geturl()
            if url in asked:
                raise broken(f"points page {pages}'s next page at one it gave already: a "
                             "loop", "The mirror's paging loops: lock through the Hub "
                             "itself, or a mirror that pages.")
        return state

    def history(self, kind: RepoKind, repo_id: str, ref: str, until: str,
                limit: int = MAX_HISTORY) -> tuple[list[dict[str, str]], bool]:
        """The commits of `ref`, newest first, down to `until` (not included), as the Hub
        lists them (huggingface_hub's list_repo_commits: id, title, date), page by page
        only as far as needed: one request when `until` is among the newest 50. Returns
        them and whether `until` was found (False: it is not among the newest `limit`, or
        not in the ref's history at all). Raises a HubError subclass (exit 5)."""
        from urllib.parse import quote as quoted
        from urllib.parse import urljoin

        prefix = "datasets" if kind == "dataset" else "models"
        url: str | None = f"{self.endpoint}/api/{prefix}/{repo_id}/commits/{quoted(ref, safe='')}"
        origin = urlsplit(self.endpoint)[:2]
        out: list[dict[str, str]] = []
        while url is not None and len(out) < limit:
            response = self._get(url, kind, repo_id, f"{kind} {repo_id}@{ref}: its history")
            if response.status_code != 200:
                raise self._refused(response, kind, repo_id, ref)
            try:
                page = response.json()
            except ValueError:
                page = None
            if not isinstance(page, list) or not all(
                    isinstance(c, dict) and isinstance(c.get("id"), str) for c in page):
                raise HubError(f"{kind} {repo_id}: {self.endpoint} answered the commit "
                               "listing with something other than a list of commits",
                               repo=repo_id)
            for c in page:
                if c["id"] == until:
                    return out, True
                out.append({"id": c["id"], "title": str(c.get("title", "")),
                            "date": str(c.get("date", ""))})
            following = response.links.get("next", {}).get("url")
            url = urljoin(url, following) if following and page else None
            if url is not None and urlsplit(url)[:2] != origin:
                raise HubError(f"{kind} {repo_id}: {self.endpoint}'s commit listing points "
                               f"its next page at another host ({urlsplit(url).netloc})",
                               repo=repo_id)
        return out, False

    def _get(self, url: str, kind: RepoKind, repo_id: str, what: str,
             max_bytes: int | None = None) -> Any:
        """GET `url` through the rate budget, retrying 5xx and dropped connections; a 429
        waits as the Hub states (RateBudget) and costs no attempt. The answer, whatever its
        status otherwise; a body past `max_bytes` is an error (HubError), read no further."""
        import httpx2

        client = self._range_client()
        attempt = 0
        while True:
            self.budget.before(url, what)
            try:
                response = client.get(url) if max_bytes is None else \
                    self._bounded(client, url, max_bytes, what, repo_id)
            except httpx2.TransportError as e:
                attempt += 1
                if attempt >= MAX_TRANSPORT_ATTEMPTS:
                    raise HubUnreachableError(
                        f"{what}: cannot reach {self.endpoint}: "
                        f"{redact(str(e)) or type(e).__name__}", repo=repo_id,
                        hint="Check the network, or raise --timeout.") from None
                self._sleep(retry_delay(attempt, None))
                continue
            if self.budget.after(url, response.status_code, response.headers, what) is not None:
                continue
            if not is_transient(response.status_code):
                return response
            attempt += 1
            if attempt >= MAX_TRANSPORT_ATTEMPTS:
                return response
            self._sleep(retry_delay(attempt, response.headers.get("Retry-After")))

    def _bounded(self, client: Any, url: str, max_bytes: int, what: str, repo_id: str
                 ) -> Any:
        """The answer to GET `url`, its body read to at most `max_bytes`."""
        import httpx2

        with client.stream("GET", url) as streamed:
            body = bytearray()
            for chunk in streamed.iter_bytes():
                body += chunk
                if len(body) > max_bytes:
                    raise HubError(
                        f"{what}: {self.endpoint} sent a page of more than "
                        f"{human_size(max_bytes)} (WLOCK_MAX_PAGE_BYTES)", repo=repo_id,
                        hint="The Hub pages its listings at 1,000 entries (about 0.2 MB): "
                        "a mirror that answers otherwise cannot be locked through.")
            # The body as decoded: its encoding and framing headers no longer apply.
            headers = [(k, v) for k, v in streamed.headers.multi_items() if k.lower() not in
                       ("content-encoding", "content-length", "transfer-encoding")]
            return httpx2.Response(streamed.status_code, headers=headers,
                                   content=bytes(body), request=streamed.request)

    def _refused(self, response: Any, kind: RepoKind, repo_id: str, ref: str) -> HubError:
        code = response.headers.get("X-Error-Code")
        if code == "RevisionNotFound":
            return RevisionNotFoundError(f"{kind} {repo_id}: revision {ref!r} not found",
                                         repo=repo_id)
        return hub_error(response.status_code, code, kind=kind, repo_id=repo_id,
                         endpoint=self.endpoint, attempts=MAX_TRANSPORT_ATTEMPTS,
                         authenticated=self._authenticated())

    def _authenticated(self) -> bool:
        from huggingface_hub import get_token

        return bool(self._token or get_token())

    def scan_pickle(self, kind: RepoKind, repo_id: str, revision: str, f: LockedFile,
                    limits: ScanLimits | None = None) -> tuple[PickleScan, int]:
        """The judgement of the locked file `f` (wlock.scan), read with HTTP ranges: a zip's
        directory and pickles, a pickle to its STOP, the first block of anything else;
        never the tensors. Returns it and the bytes read. Raises a HubError subclass (exit
        5) naming the file and the host: the Hub failed, or answered a range with bytes
        other than those asked."""
        from wlock.scan import judge_file

        found, read = self._judge_ranges(kind, repo_id, revision, f, limits, judge_file)
        scan: PickleScan = found
        return scan, read

    def scan_formats(self, kind: RepoKind, repo_id: str, revision: str, f: LockedFile,
                     limits: ScanLimits | None = None) -> tuple[FormatScan, ...]:
        """What the file `f` would run or read past its folder in a format other than
        pickle (wlock.scan.judge_formats: a GGUF's chat templates, a Keras config, an ONNX
        model's external data), read with HTTP ranges (a header, a zip's directory and
        config, the fields around the tensors, never their bytes). Raises as scan_pickle
        does."""
        from wlock.scan import judge_formats

        found, _ = self._judge_ranges(kind, repo_id, revision, f, limits, judge_formats)
        scans: tuple[FormatScan, ...] = found
        return scans

    def _judge_ranges(self, kind: RepoKind, repo_id: str, revision: str, f: LockedFile,
                      limits: ScanLimits | None, judge: Callable[..., Any]) -> tuple[Any, int]:
        """`judge(stream, path, limits, size)` over the file read with HTTP ranges (blocks,
        each fetched once, every answer checked), and the bytes read."""
        from urllib.parse import urlsplit

        import httpx2

        from wlock.lock.pickles import BadRangeError, RangeReader, WholeBody, check_content_range
        from wlock.scan import ScanLimits

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
            attempt = 0
            while True:
                self.budget.before(url, subject)
                try:
                    with client.stream("GET", url, headers={
                            "Range": f"bytes={start}-{end - 1}"}) as response:
                        host = urlsplit(str(response.url)).netloc
                        status = response.status_code
                        hub_answer = response.history[0] if response.history else response
                        if self.budget.after(url, hub_answer.status_code, hub_answer.headers,
                                             subject) is not None:
                            continue  # rate limited: the budget waits, no attempt spent
                        attempt += 1
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
                                            endpoint=self.endpoint, attempts=attempt,
                                            about=f"{f.path} from {host}",
                                            authenticated=self._authenticated())
                except httpx2.TransportError as e:
                    attempt += 1
                    if attempt >= MAX_TRANSPORT_ATTEMPTS:
                        raise HubUnreachableError(
                            f"cannot read {subject} from {self.endpoint}: "
                            f"{redact(str(e)) or type(e).__name__}", repo=repo_id,
                            hint="Check the network, or raise --timeout.") from None
                    wait = retry_delay(attempt, None)
                self._sleep(wait)

        reader = RangeReader(f.size, fetch)
        try:
            return judge(io.BufferedReader(reader), f.path, limits, f.size), reader.bytes_read
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
        token kept from other hosts) into a folder that is gone when this returns. Of a GGUF
        file, only its first GGUF_HEAD bytes (its header's metadata, what the gguf rule
        reads), with an HTTP range.

        Raises a HubError subclass (exit 5) naming the repo.
        """
        import tempfile

        if path.endswith(".gguf"):
            return self._head(kind, repo_id, revision, path, GGUF_HEAD)

        with tempfile.TemporaryDirectory(prefix="wlock-read-") as folder:
            local = self._with_retries(
                kind, repo_id, revision,
                lambda: self._api.hf_hub_download(
                    repo_id, path, repo_type=kind, revision=revision, cache_dir=folder,
                    etag_timeout=self.timeout), route="resolvers")
            with open(str(local), "rb") as f:
                return f.read()

    def _head(self, kind: RepoKind, repo_id: str, revision: str, path: str, size: int
              ) -> bytes:
        """The first `size` bytes of a file (fewer for a shorter file), through the rate
        budget: a range the server may ignore (then the body is read no further)."""
        prefix = "datasets/" if kind == "dataset" else ""
        url = f"{self.endpoint}/{prefix}{repo_id}/resolve/{revision}/{quote(path)}"
        what = f"{kind} {repo_id}: {path}"
        attempt = 0
        while True:
            self.budget.before(url, what)
            with self._range_client().stream(
                    "GET", url, headers={"Range": f"bytes=0-{size - 1}"}) as response:
                hub_answer = response.history[0] if response.history else response
                if self.budget.after(url, hub_answer.status_code, hub_answer.headers,
                                     what) is not None:
                    continue
                status = response.status_code
                if status in (200, 206):
                    body = bytearray()
                    for chunk in response.iter_bytes():
                        body += chunk
                        if len(body) >= size:
                            break
                    return bytes(body[:size])
                attempt += 1
                if not is_transient(status) or attempt >= MAX_TRANSPORT_ATTEMPTS:
                    raise hub_error(status, response.headers.get("X-Error-Code"), kind=kind,
                                    repo_id=repo_id, endpoint=self.endpoint, attempts=attempt,
                                    about=path, authenticated=self._authenticated())
            self._sleep(retry_delay(attempt, None))

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

    def _with_retries(self, kind: RepoKind, repo_id: str, ref: str, call: Callable[[], T],
                      route: str = "api") -> T:
        """`call()` (a huggingface_hub request of the `route` budget: "api" or
        "resolvers"), through the rate budget: a 429 waits as the Hub states and costs no
        attempt; 5xx and dropped connections are retried a few times."""
        from huggingface_hub.errors import HfHubHTTPError

        transport, timeouts = _transport_errors()
        url = f"{self.endpoint}/{'api' if route == 'api' else 'resolve/'}"
        what = f"{kind} {repo_id}@{ref}"
        attempt = 0
        while True:
            self.budget.before(url, what)
            try:
                return call()
            except HfHubHTTPError as e:
                status = e.response.status_code if e.response is not None else None
                if status is not None and self.budget.after(
                        url, status, e.response.headers, what) is not None:
                    continue  # rate limited: the budget waits, no attempt spent
                attempt += 1
                if not is_transient(status) or attempt >= MAX_ATTEMPTS:
                    raise self._translate(e, kind, repo_id, ref) from None
                self._sleep(retry_delay(attempt, e.response.headers.get("Retry-After")))
            except transport as e:
                # huggingface_hub lets its transport's errors through (connect, read, timeout).
                # A dropped connection is worth a few quick retries; a refused one rarely
                # heals within seconds, so these stop sooner than 429s and 5xx; a timeout
                # costs `timeout` seconds each, so it is tried twice only.
                attempt += 1
                timed_out = isinstance(e, timeouts)
                if attempt >= (MAX_TIMEOUT_ATTEMPTS if timed_out else MAX_TRANSPORT_ATTEMPTS):
                    reason = (f"no answer within {self.timeout:g}s, {attempt} times"
                              if timed_out else redact(str(e)) or type(e).__name__)
                    raise HubUnreachableError(
                        f"cannot reach {self.endpoint} for {kind} {repo_id}: {reason}",
                        repo=repo_id,
                        hint="Check the network, or the endpoint (--endpoint / HF_ENDPOINT)"
                        + ("; on a slow link raise --timeout." if timed_out else "."),
                    ) from None
                self._sleep(retry_delay(attempt, None))

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
                         attempts=MAX_ATTEMPTS, authenticated=self._authenticated())


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
    # Only where huggingface_hub imported it (its HTTP stack, before 1.0): requests costs a
    # command 50 ms of imports, and a client that never loaded it raises none of its errors.
    requests = sys.modules.get("requests")
    if requests is not None:
        transport.append(requests.exceptions.RequestException)
        timeouts.append(requests.exceptions.Timeout)
    return tuple(transport), tuple(timeouts)


class _PagingBroken(HubError):
    """The endpoint's paging of a listing went wrong (a dropped cursor, a loop)."""

    why = ""  # what went wrong, said of the endpoint: "its listing of data/ gave ..."


@dataclass
class _Listing:
    """What a tree listing gave so far, across its pages (and folders, when walked)."""

    entries: list[Any] = field(default_factory=list)
    xet_hashes: dict[str, str] = field(default_factory=dict)  # RepoFile drops it before 1.0
    seen: set[str] = field(default_factory=set)
    folders: set[str] = field(default_factory=set)
    pages: int = 0
    shown: float = field(default_factory=time.monotonic)


def files_from_siblings(repo_id: str, siblings: Iterable[Any]) -> tuple[LockedFile, ...]:
    """`siblings[]` of repo info with `?blobs=true` -> LockedFiles (sha256 for LFS)."""
    files = []
    for s in siblings:
        path = s.rfilename
        if not isinstance(path, str) or (problem := file_path_problem(path)):
            raise UnsafePathError(repo_id, str(path), None if not isinstance(path, str)
                                  else problem)
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


def files_from_tree(repo_id: str, entries: Iterable[Any],
                    xet_hashes: Mapping[str, str] | None = None) -> tuple[LockedFile, ...]:
    """Entries of the recursive tree listing -> LockedFiles; folders are skipped. The Xet
    hash of a file is its entry's (`xet_hash`) or `xet_hashes[path]`."""
    files = []
    for entry in entries:
        if not hasattr(entry, "blob_id"):
            continue  # a RepoFolder
        if problem := file_path_problem(entry.path):
            raise UnsafePathError(repo_id, entry.path, problem)
        if entry.lfs is not None:
            # The Xet hash, where the listing names one (a hint for chunk-level upgrades,
            # never trusted over the sha256).
            xet = getattr(entry, "xet_hash", None) or (xet_hashes or {}).get(entry.path)
            files.append(LockedFile(path=entry.path, size=int(entry.lfs.size),
                                    sha256=entry.lfs.sha256,
                                    xet=xet if isinstance(xet, str) and _HEX64.fullmatch(xet)
                                    else None))
        else:
            files.append(LockedFile(path=entry.path, size=int(entry.size),
                                    git_sha1=entry.blob_id))
    return _checked(repo_id, files)


def _checked(repo_id: str, files: list[LockedFile]) -> tuple[LockedFile, ...]:
    """`files` sorted, each hash well formed, no path twice, and none a folder of another:
    a listing that would make a lock the reader refuses is the Hub's fault (exit 5)."""
    folders = {p.rsplit("/", i)[0] for p in (f.path for f in files)
               for i in range(1, p.count("/") + 1)}
    for f in files:
        if f.path in folders:
            raise HubError(f"{repo_id}: the Hub listed {f.path!r} both as a file and as a "
                           "folder of other files: no snapshot can hold both", repo=repo_id,
                           hint="The listing is broken: retry later, or lock another "
                           "revision.")
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
