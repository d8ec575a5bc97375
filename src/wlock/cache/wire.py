"""A lean HTTP/1.1 GET for many small files: the standard library's `http.client`, one
keep-alive connection per thread and origin.

Why not httpx2 here (it serves everything else): a small file costs a request or two, and
in a sync of thousands of them the client's own Python is the limit, since one thread runs
Python at a time. Measured on the emulator, one thread, 1,000 GETs of a 1 KiB file: httpx2
0.77 ms of CPU a request, urllib3 0.59 ms, http.client 0.22 ms.

What this does not do, the caller does: redirects (it follows them itself, to keep the
token on the endpoint's origin), proxies (a URL a proxy applies to goes through httpx2,
which knows them: see `proxied`), retries (one, only of a request a reused keep-alive
connection lost before any answer, as any HTTP client does). TLS uses the caller's
context, the one its httpx2 clients share.
"""

from __future__ import annotations

import contextlib
import http.client
import ssl
import threading
import urllib.request
from collections.abc import Iterator
from urllib.parse import urlsplit

Origin = tuple[str, str, int]

# What a keep-alive connection the server closed meanwhile raises on the next request.
_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


def origin_of(url: str) -> Origin:
    """(scheme, host, port) of `url`, the port filled in: what a connection is kept per, and
    what the token is kept to."""
    parts = urlsplit(url)
    default = 443 if parts.scheme == "https" else 80
    return parts.scheme, (parts.hostname or "").lower(), parts.port or default


class WireError(Exception):
    """A request that got no complete answer. `kind`: "connect" (nothing listens there, or
    the name does not resolve), "timeout" (no byte for the read timeout), "cut" (the
    connection closed or broke before the answer was complete)."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind


class Response:
    """An answer being read: `status_code`, `headers` (case-insensitive `get`), the body
    by `read()` or `iter_raw(n)`, as the httpx2 responses the caller also handles."""

    def __init__(self, raw: http.client.HTTPResponse) -> None:
        self._raw = raw
        self.status_code = raw.status
        self.headers = raw.headers
        self.complete = False

    def iter_raw(self, size: int) -> Iterator[bytes]:
        try:
            while chunk := self._raw.read(size):
                yield chunk
        except TimeoutError as e:
            raise WireError("timeout", "no data for the read timeout") from e
        except (http.client.HTTPException, OSError) as e:
            raise WireError("cut", _words(e)) from e
        if self._raw.length:  # read(n) ends quietly where Content-Length was not reached
            raise WireError("cut", f"the connection closed {self._raw.length} bytes short "
                            "of the Content-Length")
        self.complete = True

    def read(self) -> bytes:
        return b"".join(self.iter_raw(1024 * 1024))


class Wire:
    """Keep-alive connections, one per thread and origin; close() closes them all."""

    def __init__(self, context: ssl.SSLContext, *, connect_timeout: float,
                 read_timeout: float, user_agent: str) -> None:
        self._context = context
        self._connect_timeout, self._read_timeout = connect_timeout, read_timeout
        self._user_agent = user_agent
        self._local = threading.local()
        self._all: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        # Read once, as httpx2 does for its clients: HTTP(S)_PROXY, ALL_PROXY, NO_PROXY.
        self._proxies = urllib.request.getproxies_environment()

    def proxied(self, url: str) -> bool:
        """Whether the user's proxy settings apply to `url` (then httpx2 takes it)."""
        parts = urlsplit(url)
        if not (self._proxies.get(parts.scheme) or self._proxies.get("all")):
            return False
        bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]
        return not bypass(parts.hostname or "", self._proxies)

    @contextlib.contextmanager
    def get(self, url: str, headers: dict[str, str]) -> Iterator[Response]:
        """GET `url`; the connection goes back to the thread's pool when the body was read
        to its end, and is closed otherwise."""
        parts = urlsplit(url)
        origin = origin_of(url)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        headers = {"User-Agent": self._user_agent, **headers}
        for attempt in (1, 2):
            connection, reused = self._connection(origin)
            try:
                if connection.sock is None:
                    self._connect(connection)
                connection.request("GET", target, headers=headers)
                raw = connection.getresponse()
                break
            except WireError:
                self._drop(origin, connection)
                raise
            except _STALE as e:
                self._drop(origin, connection)
                if reused and attempt == 1:
                    continue  # the server had closed it while it was idle: a new one
                raise WireError("cut", _words(e)) from e
            except TimeoutError as e:
                self._drop(origin, connection)
                raise WireError("timeout", "no answer for the read timeout") from e
            except (http.client.HTTPException, OSError) as e:
                self._drop(origin, connection)
                raise WireError("cut", _words(e)) from e
        response = Response(raw)
        try:
            yield response
        finally:
            if not response.complete or raw.will_close:
                self._drop(origin, connection)

    def close(self) -> None:
        with self._lock:
            connections, self._all = self._all, []
        for connection in connections:
            connection.close()

    # -- the pool ---------------------------------------------------------------------------

    def _connection(self, origin: Origin) -> tuple[http.client.HTTPConnection, bool]:
        pool: dict[Origin, http.client.HTTPConnection] | None = getattr(
            self._local, "pool", None)
        if pool is None:
            pool = self._local.pool = {}
        connection = pool.get(origin)
        if connection is not None:
            return connection, True
        scheme, host, port = origin
        connection = (http.client.HTTPSConnection(host, port, context=self._context,
                                                  timeout=self._connect_timeout)
                      if scheme == "https" else
                      http.client.HTTPConnection(host, port, timeout=self._connect_timeout))
        pool[origin] = connection
        with self._lock:
            self._all.append(connection)
        return connection, False

    def _connect(self, connection: http.client.HTTPConnection) -> None:
        try:
            connection.connect()
        except OSError as e:  # refused, no such name, a timeout, a certificate refused
            raise WireError("connect", _words(e)) from e
        assert connection.sock is not None
        # The connect timeout was for the connect: from here, seconds without a byte.
        connection.sock.settimeout(self._read_timeout)

    def _drop(self, origin: Origin, connection: http.client.HTTPConnection) -> None:
        connection.close()
        pool = getattr(self._local, "pool", {})
        if pool.get(origin) is connection:
            del pool[origin]
        with self._lock, contextlib.suppress(ValueError):
            self._all.remove(connection)


def _words(e: Exception) -> str:
    """What happened on the wire, in words (the system's, where it has them)."""
    if isinstance(e, http.client.RemoteDisconnected):
        return "the server closed the connection without an answer"
    if isinstance(e, http.client.IncompleteRead):
        return f"the connection closed after {len(e.partial)} bytes of the body"
    if isinstance(e, OSError) and e.strerror:
        return e.strerror  # "Connection refused", "Connection reset by peer", ...
    return str(e) or type(e).__name__
