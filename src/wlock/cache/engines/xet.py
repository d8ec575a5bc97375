"""hf_xet as an engine: a large file fetched from the Hub's CAS by the Hub's own Xet client.

Taken where the bridge cannot serve a file (the plain-HTTP route to a Xet file answers 400
above its size limit, about 400 GB on the Hub: huggingface_hub #4330) and by choice
(`--engine xet`). hf_transfer stays the engine for large files everywhere else (on a link
capped per stream it is ahead: bench/shaped_link.py) and for endpoints without Xet.

hf_xet writes only the sync's temp file, in the cache's staging; the caller hashes it and
publishes it only if its sha256 and size are the lock's, as for every engine: hf_xet does not
check the bytes it writes (a same-size corrupted download is reported as success,
huggingface_hub #3643). What it keeps is bounded unless the user's own `HF_XET_*` variables
say otherwise: no chunk cache on disk, download buffers of 512 MB for the whole sync and
128 MB a file (its defaults: 1.5 GB and 392 MB), the read timeout is `--timeout`, a request
is tried twice a second apart (its default: five times from 3 s apart, for up to 6 minutes),
so a stalled CAS ends a sync within a few timeouts, and `--jobs` files at once.

The token flow is huggingface_hub's: the resolve answer (HEAD, not followed) names the file's
Xet hash and the token's URL (wlock.xet.cas.xet_file); the token answer names the CAS and a
short-lived read token, fetched once per repo revision; hf_xet refreshes it at that URL,
with the Hub's token only when the URL is on the endpoint's origin.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx2

from wlock.cache.engines import Aborted, FetchJob, OnBytes, Retryable, disk_full
from wlock.cache.engines.curl import origin_of
from wlock.errors import HubError, HubUnreachableError, redact
from wlock.hashing import hash_file
from wlock.hubstatus import is_transient
from wlock.version import __version__
from wlock.xet.cas import CasError, XetFile, read_token

ENGINES = ("auto", "xet", "hf_transfer")
HF_XET = "hf_xet"
HF_TRANSFER = "hf_transfer"

# Bounds set unless the user's environment sets them (HF_XET_<GROUP>_<FIELD>).
_BOUNDS: dict[str, Any] = {
    "chunk_cache.size_bytes": 0,
    "reconstruction.download_buffer_size": 512_000_000,
    "reconstruction.download_buffer_perfile_size": 128_000_000,
    "reconstruction.download_buffer_limit": 1_024_000_000,
}
_STATUS = re.compile(r"\((\d{3}) [A-Za-z]")


class XetFailure(Exception):
    """hf_xet could not fetch the file. `status`: the HTTP status it reported, if any."""

    def __init__(self, message: str, status: int | None) -> None:
        super().__init__(message)
        self.status = status


class XetUnavailable(Exception):
    """The Xet path cannot be taken for this file (no token, no CAS): said why."""


def _env_name(key: str) -> str:
    return "HF_XET_" + key.replace(".", "_").upper()


class XetEngine:
    """One hf_xet session for a sync, made when its first file needs it."""

    def __init__(self, *, timeout: float, jobs: int, token: str | None,
                 endpoint: str) -> None:
        self._timeout = timeout
        self._jobs = jobs
        self._token = token
        self._origin = origin_of(endpoint)
        self._session: Any = None
        self._lock = threading.Lock()
        self._tokens: dict[str, dict[str, Any]] = {}  # token URL -> its answer
        self._groups: set[Any] = set()
        self._aborted = False

    def config(self) -> Any:
        """hf_xet's configuration with wlock's bounds, where the environment sets none."""
        import hf_xet

        config = hf_xet.XetConfig()
        bounds = {**_BOUNDS,
                  "client.read_timeout": f"{max(1, round(self._timeout))}s",
                  "client.retry_max_duration": f"{max(1, round(self._timeout))}s",
                  "client.retry_max_attempts": 2,
                  "client.retry_base_delay": "1s",
                  "data.max_concurrent_file_downloads": max(1, self._jobs)}
        chosen = {k: v for k, v in bounds.items() if _env_name(k) not in os.environ}
        return config.with_config(chosen) if chosen else config

    def _get_session(self) -> Any:
        with self._lock:
            if self._aborted:
                raise XetFailure("the transfer was aborted", None)
            if self._session is None:
                import hf_xet

                self._session = hf_xet.XetSession(self.config())
            return self._session

    def _auth_headers(self, url: str) -> dict[str, str]:
        if self._token and origin_of(url) == self._origin:
            return {"Authorization": f"Bearer {self._token}"}
        return {}

    def _connection(self, http: httpx2.Client, xet: XetFile) -> dict[str, Any]:
        """The CAS's URL and a read token for `xet`'s revision (cached while it is valid)."""
        with self._lock:
            known = self._tokens.get(xet.token_url)
        if known is not None and known["exp"] - 60 > time.time():
            return known
        try:
            answer = http.get(xet.token_url, headers={
                **self._auth_headers(xet.token_url), "Accept-Encoding": "identity"})
        except httpx2.HTTPError as e:
            raise XetUnavailable(f"no Xet read token ({redact(str(e)) or type(e).__name__})"
                                 ) from None
        if answer.status_code != 200:
            message = f"the Xet token endpoint answered {answer.status_code}"
            if is_transient(answer.status_code):  # 429, 5xx: worth another attempt
                raise XetFailure(message, answer.status_code)
            raise XetUnavailable(message)
        try:
            url, token, expiry = read_token(answer)
        except CasError as e:
            raise XetUnavailable(str(e)) from None
        if not expiry:
            raise XetUnavailable("the Xet token answer names no expiry")
        found = {"url": url, "token": token, "exp": expiry}
        with self._lock:
            self._tokens[xet.token_url] = found
        return found

    def fetch(self, http: httpx2.Client, xet: XetFile, size: int, temp: str,
              on_bytes: Callable[[int], None]) -> None:
        """Write the file named by `xet` (`size` bytes) into `temp`; the caller verifies it.
        Raises XetUnavailable (no token, no CAS) or XetFailure (hf_xet's error, redacted)."""
        import hf_xet

        connection = self._connection(http, xet)
        session = self._get_session()
        done = [0]

        def progress(group: Any, _items: Any) -> None:
            moved = int(group.total_bytes_completed) - done[0]
            if moved > 0:
                done[0] += moved
                on_bytes(moved)

        try:
            group = session.new_file_download_group(
                endpoint=connection["url"], token=connection["token"],
                token_expiry_unix_secs=connection["exp"], token_refresh_url=xet.token_url,
                token_refresh_headers=self._auth_headers(xet.token_url),
                custom_headers={"User-Agent": f"wlock/{__version__}"},
                progress_callback=progress)
            with self._lock:
                if self._aborted:
                    group.abort()
                    raise XetFailure("the transfer was aborted", None)
                self._groups.add(group)
            try:
                group.start_download_file(hf_xet.XetFileInfo(xet.file_hash, size), temp)
                group.wait_to_finish()
            finally:
                with self._lock:
                    self._groups.discard(group)
        except XetFailure:
            on_bytes(-done[0])
            raise
        except (RuntimeError, OSError, ValueError) as e:
            # hf_xet raises RuntimeError with its chain of causes, and OSErrors for an
            # object the CAS does not have or a token it refuses (and a disk full).
            on_bytes(-done[0])
            message = redact(str(e)) or type(e).__name__
            status = _STATUS.search(message)
            code = int(status.group(1)) if status else None
            if isinstance(e, hf_xet.XetObjectNotFoundError):
                code = code or 404
            elif isinstance(e, hf_xet.XetAuthenticationError):
                code = code or 401
            raise XetFailure(message.removeprefix("Task error: "), code) from None
        if size > done[0]:
            on_bytes(size - done[0])

    def abort(self) -> None:
        """Stop every download in flight (Ctrl-C): each fetch() raises XetFailure."""
        with self._lock:
            self._aborted = True
            groups = list(self._groups)
        for group in groups:
            with contextlib.suppress(RuntimeError, OSError):  # finished already: no matter
                group.abort()

    def fetch_job(self, job: FetchJob, xet: XetFile, http: httpx2.Client,
                  on_bytes: OnBytes) -> tuple[str, int]:
        """`job` through hf_xet into its temp file, then hashed (hf_xet does not check the
        bytes it writes): its digest and size."""
        try:
            self.fetch(http, xet, job.size, str(job.temp), lambda n: on_bytes(job, n))
        except XetUnavailable as e:
            raise HubError(f"{job.label}: hf_xet cannot fetch it: {e}", repo=job.repo_id,
                           subject=job.label, hint="Check the token's access to the repo, "
                           "or sync with --engine hf_transfer where the bridge serves the "
                           "file.") from None
        except XetFailure as e:
            if self._aborted:
                raise Aborted from None
            if (full := disk_full(job, str(e))) is not None:
                raise full from None
            failure = HubUnreachableError(
                f"{job.label}: hf_xet failed: {e}", repo=job.repo_id, subject=job.label,
                cause=f"hf_xet: the CAS answered {e.status}" if e.status else None,
                hint="Retry; check the network and the endpoint.")
            if e.status is not None and 400 <= e.status < 500 and e.status not in (408, 429):
                raise failure from None
            # hf_xet retried already: a failure without a status (a stall, a cut) is tried
            # once more, as a stall is; a 429 or 5xx like any other.
            raise Retryable(failure, reason="status" if e.status else "engine",
                            status=e.status) from None
        try:
            size = os.stat(job.temp).st_size
        except FileNotFoundError:  # hf_xet reported success and wrote nothing
            return "", 0
        return hash_file(job.temp, job.hash_kind), size
