"""The Hub's hops for one endpoint and token: the resolve URL, its redirects (followed by
hand: the token goes only to the endpoint's origin, never to the CDN a large file is served
from), the rate budget before each request to the endpoint, and what each failure means
(an error to give up with, or a Retryable).

Every engine goes through one Route, so the token's scope and the error classes are the same
whatever fetches the bytes.
"""

from __future__ import annotations

import ssl
import threading
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urljoin, urlsplit

from wlock.cache.engines import MAX_ATTEMPTS, FetchJob, Retryable
from wlock.cache.engines.curl import MAX_SIDE_BODY, Answer, WireError, origin_of
from wlock.errors import HubError, HubUnreachableError, RevisionNotFoundError, redact
from wlock.hubstatus import hub_error, is_transient, retry_delay
from wlock.models import RepoKind
from wlock.ratelimit import RateBudget
from wlock.version import __version__
from wlock.xet.cas import XetFile, xet_file

if TYPE_CHECKING:
    import httpx2

    Reply = httpx2.Response | Answer  # a HEAD's answer (httpx2) or a small file's (libcurl)

MAX_REDIRECTS = 10
DEFAULT_TIMEOUT = 30.0
CONNECT_TIMEOUT = 10.0
NETWORK_HINT = "Check the network, or the endpoint (--endpoint / HF_ENDPOINT)."


class TLSContext:
    """The TLS context every connection of a sync shares, made when the first one needs it.

    One for all: each httpx2 client would otherwise load the CA bundle again (measured: 32
    threads spent 0.4 s of CPU there on every sync, and a megabyte or two of memory each).
    On first use: loading it takes 30-50 ms of a sync's start, which an endpoint on http (a
    mirror on the LAN, `wlock serve`) never needs."""

    def __init__(self) -> None:
        self._context: ssl.SSLContext | None = None
        self._lock = threading.Lock()

    def get(self) -> ssl.SSLContext:
        with self._lock:
            if self._context is None:
                import httpx2

                self._context = httpx2.create_ssl_context()
            return self._context



class Route:
    """One endpoint, one token, an HTTP client per thread, and the Hub's rate budget."""

    def __init__(self, endpoint: str, token: str | None, *, timeout: float,
                 budget: RateBudget) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.origin = origin_of(self.endpoint)
        self.timeout = timeout
        # The Hub's rate limits (resolvers for the files, api for Xet tokens), shared by
        # every thread: a 429 holds them all until the reset it states, and costs no
        # attempt; the waits add up against --rate-limit-wait (wlock.ratelimit).
        self.budget = budget
        self._token = token
        # One TLS context for every connection (TLSContext says why), made on first use.
        self._tls = TLSContext()
        self._local = threading.local()
        self._clients: list[Any] = []  # httpx2.Client
        self._clients_lock = threading.Lock()

    @property
    def authenticated(self) -> bool:
        return self._token is not None

    @property
    def http(self) -> httpx2.Client:
        """This thread's HTTP client (no redirects followed)."""
        client: httpx2.Client | None = getattr(self._local, "client", None)
        if client is None:
            import httpx2

            # One client (one small connection pool) per thread: a single pool shared by
            # dozens of threads spends more time in its lock than on the wire (measured:
            # 1,000 small files took 4.7 s with one shared pool and no latency at all).
            client = httpx2.Client(
                verify=self._tls.get(),
                # The read timeout is the stall timeout: seconds without a byte, not a
                # deadline.
                timeout=httpx2.Timeout(self.timeout,
                                       connect=min(CONNECT_TIMEOUT, self.timeout)),
                # Keep-alive to the endpoint and to the CDN: a new connection per file would
                # add round trips.
                limits=httpx2.Limits(max_connections=4, max_keepalive_connections=4),
                headers={"User-Agent": f"wlock/{__version__}"},
                follow_redirects=False,
            )
            self._local.client = client
            with self._clients_lock:
                self._clients.append(client)
        return client

    def close(self) -> None:
        with self._clients_lock:
            for client in self._clients:
                client.close()
            self._clients.clear()

    def own(self, url: str) -> bool:
        """Whether `url` is on the endpoint's origin (the token goes there, the rate budget
        counts there); a redirect elsewhere is a CDN's."""
        return origin_of(url) == self.origin

    def resolve_url(self, kind: RepoKind, repo_id: str, revision: str, path: str) -> str:
        prefix = "datasets/" if kind == "dataset" else ""
        return f"{self.endpoint}/{prefix}{repo_id}/resolve/{revision}/{quote(path)}"

    def job_url(self, job: FetchJob) -> str:
        return self.resolve_url(job.kind, job.repo_id, job.revision, job.path)

    def xet_token_url(self, kind: RepoKind, repo_id: str, revision: str) -> str:
        """Where the endpoint hands out Xet read tokens for a revision: the Hub's route, the
        one its `xet-auth` links name (huggingface_hub's refresh_route)."""
        prefix = "datasets" if kind == "dataset" else "models"
        return f"{self.endpoint}/api/{prefix}/{repo_id}/xet-read-token/{revision}"

    def headers_for(self, url: str) -> dict[str, str]:
        """The headers of a request to `url`: the token only on the endpoint's origin."""
        headers = {"Accept-Encoding": "identity"}
        if self._token and self.own(url):
            headers["Authorization"] = f"Bearer {self._token}"
        return headers

    def before(self, url: str, job: FetchJob) -> None:
        """Hold a request to the endpoint while its rate budget is spent (no budget is
        kept for other hosts: the CDN states none)."""
        if self.own(url):
            self.budget.before(url, job.label)

    def next_hop(self, url: str, response: Reply, job: FetchJob) -> str | None:
        """Where a redirect leads, or None when `response` is the answer. Raises on errors,
        and for a redirect a client cannot follow (HubError, exit 5, naming the hop); a
        429 the rate budget will wait out is a Retryable that costs no attempt."""
        if self.own(url) and self.budget.after(
                url, response.status_code, response.headers, job.label) is not None:
            drain(response)
            # A 429 from the endpoint is always a Retryable (classify): the same error,
            # marked as the budget's to wait out.
            refused = classify(response, job, self.endpoint, url, self.authenticated)
            assert isinstance(refused, Retryable)
            raise Retryable(refused.final, reason="rate")
        if response.status_code in (301, 302, 303, 307, 308):
            drain(response)  # a short body: read, the connection is reused
            location = response.headers.get("Location")
            target, problem = hop(url, location)
            if problem:
                raise HubError(
                    f"{job.label}: {origin_of(url)[1]} answered {response.status_code} "
                    f"with {problem}", repo=job.repo_id, subject=job.label,
                    hint="A redirect wlock cannot follow: the server (or a proxy before it) "
                    "is misconfigured. Retry later, or sync through another endpoint.")
            return target
        if response.status_code >= 400:
            drain(response)
            raise classify(response, job, self.endpoint, url, self.authenticated)
        return None

    def resolve(self, job: FetchJob) -> tuple[str, XetFile | None]:
        """The URL the bytes come from (the endpoint's own, or the CDN it redirects to), and
        the file's Xet hash and token URL when the endpoint's answer names them
        (wlock.xet.cas.xet_file)."""
        import httpx2

        url = self.job_url(job)
        xet = None
        for _ in range(MAX_REDIRECTS):
            self.before(url, job)
            try:
                response = self.http.request("HEAD", url, headers=self.headers_for(url))
            except httpx2.TransportError as e:
                raise transport_failure(self.endpoint, url, job, e, self.timeout) from e
            if self.own(url):
                xet = xet_file(response) or xet
            target = self.next_hop(url, response, job)
            if target is None:
                return url, xet
            if not self.own(target):
                return target, xet  # a CDN: a signed URL, and no token
            url = target
        raise HubError(f"{job.label}: too many redirects from {self.endpoint}", repo=job.repo_id)

    def attested_etag(self, job: FetchJob) -> str | None:
        """The hash the endpoint attests for `job`'s file at its commit (the resolve
        answer's X-Linked-Etag: the sha256 of an LFS file, the git blob id of another), or
        None when it names none or cannot be asked. One HEAD, asked only after a download
        did not match the lock, to tell an edited lock from a bad server."""
        import httpx2

        url = self.job_url(job)
        try:
            self.before(url, job)
            response = self.http.request("HEAD", url, headers=self.headers_for(url))
        except (httpx2.TransportError, HubError):
            return None
        said = response.headers.get("X-Linked-Etag") or response.headers.get("ETag")
        return said.removeprefix("W/").strip('"') if said else None


def drain(response: Reply) -> None:
    """Read what is left of a body up to MAX_SIDE_BODY; a longer one is left unread, so the
    connection it came on is closed instead of reused."""
    if isinstance(response, Answer) or getattr(response, "is_stream_consumed", False):
        return  # libcurl's, bounded already; an httpx2 answer read whole (a HEAD: no body)
    read = 0
    for chunk in response.iter_raw(16 * 1024):
        read += len(chunk)
        if read >= MAX_SIDE_BODY:
            return


def hop(url: str, location: str | None) -> tuple[str, str | None]:
    """Where a redirect from `url` to `location` leads, and what makes it a hop no client
    can follow (None when it is one)."""
    if not location:
        return "", "a redirect without a Location"
    shown = repr(location[:200])
    try:
        target = urljoin(url, location)
        parts = urlsplit(target)
        if parts.scheme not in ("http", "https"):
            return target, f"a redirect to a {parts.scheme or 'schemeless'} URL ({shown})"
        parts.port  # noqa: B018 - urllib raises for a port out of range or not a number
    except ValueError:
        return "", f"a redirect to a host or port that is none ({shown})"
    if not parts.hostname:
        return target, f"a redirect to no host ({shown})"
    if parts.username is not None or parts.password is not None:
        # A redirect's `user:password@` is the server's say, not the user's: libcurl would
        # send it as Basic auth to that host. Dropped, as browsers and requests do.
        target = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
    return target, None


def classify(response: Reply, job: FetchJob, endpoint: str, url: str,
              authenticated: bool) -> Exception:
    """The error `response` (a final or transient failure from `url`) stands for, naming
    the file and, for a host other than the endpoint (the CDN), that host."""
    status, code = response.status_code, response.headers.get("X-Error-Code")
    host = urlsplit(url).netloc
    if origin_of(url) != origin_of(endpoint):
        error: HubError = HubError(
            f"{job.label}: {host} (where {endpoint} sent the download) answered {status}",
            repo=job.repo_id, subject=job.label,
            hint="The file's storage host refused it: retry later; if it persists, the "
            "signed link may have expired or a proxy may be in the way.")
        return Retryable(error, reason="status", status=status) if is_transient(status) \
            else error
    if code in ("RevisionNotFound", "EntryNotFound"):
        what = "commit" if code == "RevisionNotFound" else f"file {job.path!r} at commit"
        return RevisionNotFoundError(
            f"{job.kind} {job.repo_id}: {what} {job.revision[:7]} is no longer on the Hub "
            f"({status})", repo=job.repo_id,
            hint="The history was rewritten upstream: re-lock with "
            f"`wlock lock --upgrade-package {job.repo_id}`.",
        )
    error = hub_error(status, code, kind=job.kind, repo_id=job.repo_id, endpoint=endpoint,
                      attempts=MAX_ATTEMPTS, about=job.path, authenticated=authenticated)
    error.subject = job.label
    if is_transient(status):
        retry_after = response.headers.get("Retry-After")
        return Retryable(error, delay=retry_delay(1, retry_after) if retry_after else None,
                         reason="status")
    return error


def transport_failure(
    endpoint: str, url: str, job: FetchJob, e: Exception, timeout: float
) -> Retryable:
    """What a failed request of `url` means. It names the host that failed (the endpoint,
    the CDN, a redirect's target), and only the endpoint's own refusals mark it down (the
    other files then fail at once): a CDN or mirror that is down says nothing of the Hub."""
    import httpx2

    own = origin_of(url) == origin_of(endpoint)
    where = endpoint if own else f"{origin_of(url)[1]} (a redirect from {endpoint})"

    if isinstance(e, httpx2.ReadTimeout | httpx2.WriteTimeout) or (
            isinstance(e, WireError) and e.kind == "timeout"):
        return stalled(job, timeout)
    if isinstance(e, WireError) and e.kind == "slow":
        cause = f"a trickle: {e}"
        return Retryable(HubUnreachableError(
            f"{job.label}: {cause}", repo=job.repo_id, cause=cause, subject=job.label,
            hint="The server sends too slowly to finish. Retry later; on a link this slow, "
            "raise --timeout (each small file gets --timeout plus its size at 100 kB/s)."),
            reason="slow")
    if isinstance(e, httpx2.ConnectError | httpx2.ConnectTimeout) or (
            isinstance(e, WireError) and e.kind == "connect"):
        cause = f"cannot connect to {where}: {redact(str(e)) or type(e).__name__}"
        return Retryable(HubUnreachableError(
            f"{job.label}: {cause}", repo=job.repo_id, hint=NETWORK_HINT, cause=cause,
            subject=job.label), reason="unreachable" if own else "transient")
    return Retryable(HubUnreachableError(
        f"{job.label}: the connection to {where} failed: "
        f"{redact(str(e)) or type(e).__name__}", repo=job.repo_id, hint=NETWORK_HINT,
        subject=job.label))


def stalled(job: FetchJob, timeout: float, times: int = 1) -> Retryable:
    cause = f"no data for {timeout:g}s (stalled)" + (
        "" if times == 1 else ", twice" if times == 2 else f", {times} times")
    return Retryable(HubUnreachableError(
        f"{job.label}: {cause}", repo=job.repo_id,
        hint="The server stopped sending. Retry later; on a slow link raise --timeout.",
        cause=cause, subject=job.label), reason="stall")

