"""A lean HTTP/1.1 GET for many small files: one keep-alive socket per thread and origin,
and an answer read by a few lines of this module.

Why not httpx2 here (it serves everything else): a small file costs a request or two, and
in a sync of thousands of them the client's own Python is the limit. Measured on the
emulator, one thread, 1,000 GETs of a 1 KiB file: httpx2 0.77 ms of CPU a request, urllib3
0.59 ms, the standard library's http.client 0.22 ms. With 64 threads fetching 1,000 small
LFS files (two requests each): http.client 1.5 s of CPU, h11 (the sans-IO parser httpx's
core uses) 1.6 s, this reader 0.7 s, as little as one asyncio thread reading the same bytes.
A whole `wlock sync` of them (bench/small_files.py's LFS case) went from 2.7-3.3 s of CPU
to 2.2-2.4 s. http.client parses every header block with the `email` package and reads
through a buffered file object made per answer; here the answer's head is split on CRLF
and its body read straight from the socket.

What it reads (RFC 9112): a status line and header fields (names in any case, repeated
fields joined with ", ", obsolete line folding unfolded), interim 1xx answers skipped (103
Early Hints), a body framed by Content-Length, by chunked transfer coding, or by the end of
the connection, none for 204 and 304. Anything else is an answer cut short (WireError).

What this does not do, the caller does: redirects (it follows them itself, to keep the
token on the endpoint's origin), proxies (a URL a proxy applies to goes through httpx2,
which knows them: see `proxied`), retries (one, only of a request a reused keep-alive
connection lost before any answer, as any HTTP client does). TLS uses the caller's
context, the one its httpx2 clients share.
"""

from __future__ import annotations

import contextlib
import re
import socket
import ssl
import threading
import urllib.request
from collections.abc import Callable, Iterator
from urllib.parse import SplitResult, quote, urlsplit

Origin = tuple[str, str, int]

RECV = 64 * 1024
# An answer's head larger than this is refused (httpx's h11 allows 16 KiB; the Hub's, a CDN's
# are about 1-2 KiB).
MAX_HEAD = 64 * 1024
_PRINTABLE = "".join(map(chr, range(33, 127)))
# What would split a request line or a header field (a request smuggled into another).
_NOT_IN_TARGET = re.compile("[\x00-\x20\x7f]")
_NOT_IN_FIELD = re.compile("[\r\n\x00]")
# A status code, a Content-Length, a chunk's size: ASCII digits only (str.isdigit() and int()
# also take "²", signs, underscores, "0x").
_DIGITS = re.compile("[0-9]{1,19}")
_HEX = re.compile(b"[0-9A-Fa-f]{1,16}")


class _Stale(Exception):
    """A reused keep-alive connection the server had closed: no byte of an answer came."""


def origin_of(url: str | SplitResult) -> Origin:
    """(scheme, host, port) of `url` (or of its parts, already split), the port filled in:
    what a connection is kept per, and what the token is kept to."""
    parts = urlsplit(url) if isinstance(url, str) else url
    default = 443 if parts.scheme == "https" else 80
    return parts.scheme, (parts.hostname or "").lower(), parts.port or default


class WireError(Exception):
    """A request that got no complete answer. `kind`: "connect" (nothing listens there, or
    the name does not resolve), "timeout" (no byte for the read timeout), "cut" (the
    connection closed or broke before the answer was complete, or the answer was not
    HTTP/1.1 this module reads), "slow" (the caller's deadline for the file passed)."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind


class Headers:
    """An answer's header fields, looked up by name in any case."""

    def __init__(self, fields: dict[str, str]) -> None:
        self._fields = fields  # lower-case name -> value

    def get(self, name: str, default: str | None = None) -> str | None:
        return self._fields.get(name.lower(), default)

    def __getitem__(self, name: str) -> str:
        return self._fields[name.lower()]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._fields


class _Connection:
    """A socket to one origin and the bytes received past what was read of it."""

    def __init__(self, origin: Origin) -> None:
        self.origin = origin
        self.sock: socket.socket | None = None
        self.pending = b""

    def close(self) -> None:
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.close()
            self.sock = None
        self.pending = b""

    def recv(self, size: int) -> bytes:
        """What is pending, else up to `size` bytes from the socket (b"" at its end)."""
        if self.pending:
            data, self.pending = self.pending[:size], self.pending[size:]
            return data
        assert self.sock is not None
        return self.sock.recv(size)

    def line(self, limit: int = MAX_HEAD) -> bytes:
        """One CRLF-ended line, without its CRLF (a chunk's size, a trailer)."""
        while (end := self.pending.find(b"\r\n")) < 0:
            if len(self.pending) > limit:
                raise WireError("cut", "a line of the answer is too long")
            data = self._more()
            if not data:
                raise WireError("cut", "the connection closed in the middle of the answer")
        line, self.pending = self.pending[:end], self.pending[end + 2:]
        return line

    def head(self) -> tuple[int, str, Headers]:
        """The next answer's status, its HTTP version and its header fields."""
        while (end := self.pending.find(b"\r\n\r\n")) < 0 or end > MAX_HEAD:
            if end > MAX_HEAD or len(self.pending) > MAX_HEAD:
                raise WireError("cut", f"the answer's head is larger than {MAX_HEAD} bytes")
            data = self._more()
            if not data:
                if not self.pending:
                    raise _Stale
                raise WireError("cut", "the connection closed in the middle of the answer's "
                                "head")
        head, self.pending = self.pending[:end], self.pending[end + 4:]
        lines = head.decode("latin-1").split("\r\n")
        version, _, rest = lines[0].partition(" ")
        code = rest[:3]
        if not version.startswith("HTTP/1.") or not _DIGITS.fullmatch(code) or \
                rest[3:4] not in ("", " "):
            raise WireError("cut", f"not an HTTP/1.1 answer: {lines[0][:80]!r}")
        fields: dict[str, str] = {}
        name = ""
        for line in lines[1:]:
            if line[:1] in (" ", "\t") and name:  # obsolete folding: part of the last one
                fields[name] += " " + line.strip()
                continue
            name, colon, value = line.partition(":")
            if not colon or not name or name != name.strip():
                raise WireError("cut", f"a malformed header field: {line[:80]!r}")
            name = name.lower()
            value = value.strip(" \t")
            fields[name] = f"{fields[name]}, {value}" if name in fields else value
        return int(code), version, Headers(fields)

    def _more(self) -> bytes:
        assert self.sock is not None
        data = self.sock.recv(RECV)
        self.pending += data
        return data


class Response:
    """An answer being read: `status_code`, `headers` (case-insensitive `get`), the body
    by `read()` or `iter_raw(n)`, as the httpx2 responses the caller also handles.
    `complete`: the body was read to its end; `will_close`: the connection cannot carry
    another request after it."""

    def __init__(self, connection: _Connection, status: int, version: str,
                 headers: Headers) -> None:
        self._connection = connection
        self.status_code = status
        self.headers = headers
        self.complete = False
        tokens = {t.strip().lower() for t in (headers.get("Connection") or "").split(",")}
        self.will_close = "close" in tokens or (
            version == "HTTP/1.0" and "keep-alive" not in tokens)
        self._length: int | None = None  # bytes of the body left, when it has a length
        self._chunked = False
        coding = headers.get("Transfer-Encoding")
        if status in (204, 304):
            self._length = 0
        elif coding is not None:
            # RFC 9112 6.3: chunked, when it is the last coding; else to the connection's end
            self._chunked = coding.rsplit(",", 1)[-1].strip().lower() == "chunked"
            self.will_close = self.will_close or not self._chunked
        elif (length := headers.get("Content-Length")) is not None:
            values = {v.strip() for v in length.split(",")}
            if len(values) != 1 or not _DIGITS.fullmatch(value := values.pop()):
                raise WireError("cut", f"an invalid Content-Length: {length[:40]!r}")
            self._length = int(value)
        else:
            self.will_close = True  # the body ends where the connection does

    def iter_raw(self, size: int) -> Iterator[bytes]:
        try:
            if self._chunked:
                yield from self._chunks(size)
            elif self._length is not None:
                while self._length:
                    chunk = self._connection.recv(min(size, self._length))
                    if not chunk:
                        raise WireError("cut", f"the connection closed {self._length} bytes "
                                        "short of the Content-Length")
                    self._length -= len(chunk)
                    yield chunk
            else:
                while chunk := self._connection.recv(size):
                    yield chunk
        except TimeoutError as e:
            raise WireError("timeout", "no data for the read timeout") from e
        except OSError as e:
            raise WireError("cut", _words(e)) from e
        self.complete = True

    def read(self) -> bytes:
        return b"".join(self.iter_raw(1024 * 1024))

    def _chunks(self, size: int) -> Iterator[bytes]:
        connection = self._connection
        while True:
            line = connection.line()
            digits = line.split(b";", 1)[0].strip(b" \t")
            if not _HEX.fullmatch(digits):  # int() would take "-1", "0x10", "1_0"
                raise WireError("cut", f"a malformed chunk size: {line[:40]!r}")
            left = int(digits, 16)
            if left == 0:
                while connection.line():  # trailer fields, up to the empty line
                    pass
                return
            while left:
                chunk = connection.recv(min(size, left))
                if not chunk:
                    raise WireError("cut", "the connection closed in the middle of a chunk")
                left -= len(chunk)
                yield chunk
            if connection.line(2):
                raise WireError("cut", "a chunk longer than its size")


class Wire:
    """Keep-alive connections, one per thread and origin; close() closes them all."""

    def __init__(self, context: ssl.SSLContext | Callable[[], ssl.SSLContext], *,
                 connect_timeout: float, read_timeout: float, user_agent: str) -> None:
        # What makes the TLS context, asked at each TLS connection (the caller's may make
        # it on first use only).
        self._context: Callable[[], ssl.SSLContext] = (
            (lambda: context) if isinstance(context, ssl.SSLContext) else context)
        self._connect_timeout, self._read_timeout = connect_timeout, read_timeout
        self._user_agent = user_agent
        self._local = threading.local()
        self._all: list[_Connection] = []
        self._lock = threading.Lock()
        self._aborted = False
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
        origin = origin_of(parts)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        host = parts.netloc.rpartition("@")[2]
        if not target.isascii():  # a redirect's raw UTF-8: sent percent-encoded, as browsers do
            target = quote(target, safe=_PRINTABLE)
        if not host.isascii():
            host = host.encode("idna").decode("ascii")
        fields = {"Host": host, "User-Agent": self._user_agent, **headers}
        if _NOT_IN_TARGET.search(target) or any(
                _NOT_IN_FIELD.search(text) for field in fields.items() for text in field):
            raise WireError("cut", f"a URL or header that cannot be sent: {url[:200]!r}")
        try:
            request = (f"GET {target} HTTP/1.1\r\n" + "".join(
                f"{name}: {value}\r\n" for name, value in fields.items()) + "\r\n"
            ).encode("latin-1")
        except UnicodeEncodeError:
            raise WireError("cut", f"a header that cannot be sent: {url[:200]!r}") from None
        for attempt in (1, 2):
            connection, reused = self._connection(origin)
            try:
                if connection.sock is None:
                    self._connect(connection)
                assert connection.sock is not None
                connection.sock.sendall(request)
                status, version, answer = connection.head()
                while 100 <= status < 200:  # interim answers (103 Early Hints): the next
                    status, version, answer = connection.head()
                response = Response(connection, status, version, answer)
                break
            except WireError:
                self._drop(connection)
                raise
            except (_Stale, ConnectionResetError, BrokenPipeError) as e:
                self._drop(connection)
                if reused and attempt == 1:
                    continue  # the server had closed it while it was idle: a new one
                raise WireError("cut", "the server closed the connection without an answer"
                                if isinstance(e, _Stale) else _words(e)) from e
            except TimeoutError as e:
                self._drop(connection)
                raise WireError("timeout", "no answer for the read timeout") from e
            except OSError as e:
                self._drop(connection)
                raise WireError("cut", _words(e)) from e
        try:
            yield response
        finally:
            if not response.complete or response.will_close:
                self._drop(connection)

    def close(self) -> None:
        with self._lock:
            connections, self._all = self._all, []
        for connection in connections:
            connection.close()

    def abort(self) -> None:
        """Wake every thread blocked on a socket of this client now (Ctrl-C): each socket is
        shut down, so a recv() waiting on a silent server returns at once (its thread sees
        the answer cut and stops); no new connection is made. Seen before: a sync took the
        whole read timeout (27 s of 30) to end after Ctrl-C, its threads in recv()."""
        with self._lock:
            self._aborted = True
            connections = list(self._all)
        for connection in connections:
            sock = connection.sock
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    # -- the pool ---------------------------------------------------------------------------

    def _connection(self, origin: Origin) -> tuple[_Connection, bool]:
        pool: dict[Origin, _Connection] | None = getattr(self._local, "pool", None)
        if pool is None:
            pool = self._local.pool = {}
        connection = pool.get(origin)
        if connection is not None:
            return connection, True
        connection = pool[origin] = _Connection(origin)
        with self._lock:
            self._all.append(connection)
        return connection, False

    def _connect(self, connection: _Connection) -> None:
        scheme, host, port = connection.origin
        if self._aborted:
            raise WireError("cut", "stopped (Ctrl-C)")
        try:
            sock = socket.create_connection((host, port), timeout=self._connect_timeout)
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if scheme == "https":
                    sock = self._context().wrap_socket(sock, server_hostname=host)
            except BaseException:
                sock.close()
                raise
        except OSError as e:  # refused, no such name, a timeout, a certificate refused
            raise WireError("connect", _words(e)) from e
        # The connect timeout was for the connect: from here, seconds without a byte.
        sock.settimeout(self._read_timeout)
        connection.sock = sock

    def _drop(self, connection: _Connection) -> None:
        connection.close()
        pool = getattr(self._local, "pool", {})
        if pool.get(connection.origin) is connection:
            del pool[connection.origin]
        with self._lock, contextlib.suppress(ValueError):
            self._all.remove(connection)


def _words(e: Exception) -> str:
    """What happened on the wire, in words (the system's, where it has them)."""
    if isinstance(e, ssl.SSLError):
        return f"TLS: {e.reason or e}"
    if isinstance(e, OSError) and e.strerror:
        return e.strerror  # "Connection refused", "Connection reset by peer", ...
    return str(e) or type(e).__name__
