"""Small files' HTTP: libcurl, through pycurl, one easy handle (and its keep-alive
connections) per thread.

Chosen by measuring (bench/http_clients.py: 2,000 GETs of 1-2 KiB with 32 in flight,
against the emulator on this 2-core machine, CPU of the client process per request):

    wlock's own HTTP/1.1 reader (wire.py, retired)   0.139 ms
    http.client (standard library)                   0.168-0.193 ms
    urllib3 2.8                                      0.335-0.372 ms
    pycurl, an easy handle per thread                0.109-0.129 ms
      the same with this module's checks             0.127-0.158 ms
    pycurl, the multi interface, one thread          0.053-0.056 ms
    niquests 3.x, a Session per thread               0.913-0.991 ms
    aiohttp 3.14, one asyncio thread                 0.263-0.273 ms

libcurl is the client the field trusts with hostile answers (framing, chunking, leftover
bytes, header smuggling: decades of fixes and fuzzing), parses in C with the GIL released, and
costs about what the hand-written reader did. Easy handles keep the sync's thread per small
file (its retries, gate and deadline stay as they are); the multi interface halves the CPU
again but needs its own event loop, which the last measurement of a loop (same wall time)
did not justify.

What wlock keeps doing itself, above libcurl: redirects (never followed by libcurl, so the
token goes only to the endpoint's origin, and every hop is checked: scheme, host, port), the
deadline of a file (`deadline`: a trickle or endless interim answers end as "slow"), the bound
on what is read of a redirect's or an error's body (past MAX_SIDE_BODY the transfer is
stopped and libcurl closes the connection), and proxies as the environment says (urllib's
reading of HTTP(S)_PROXY, ALL_PROXY, NO_PROXY, the same as httpx2's, set per URL). libcurl
retries once, on a fresh connection, a request that a reused keep-alive connection lost
before any answer; nothing else is retried here. TLS trusts what httpx2 trusts: SSL_CERT_FILE
or SSL_CERT_DIR, else the system's store. Ctrl-C (abort()) shuts down every socket libcurl
opened (they are made here, OPENSOCKETFUNCTION), so a transfer waiting on a silent server
ends at once: 0.5 s for a whole sync, measured.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import ssl
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import SplitResult, quote, urlsplit

Origin = tuple[str, str, int]
# A sink for an answer's body: called once the head is in with (status, headers); returns
# where the body goes, or None (a redirect's or an error's: kept up to MAX_SIDE_BODY).
Sink = Callable[[int, "Headers"], "Callable[[bytes], None] | None"]

# What is read of a redirect's or an error's body, at most: they say nothing wlock uses, and
# a hostile one can be endless (a 302 with a 256 MiB body took 543 MB; a 500 with an endless
# body never ended: issue 38). Past it the transfer stops and its connection is closed.
MAX_SIDE_BODY = 64 * 1024
_PRINTABLE = "".join(map(chr, range(33, 127)))
_NOT_IN_FIELD = re.compile("[\r\n\x00]")


def origin_of(url: str | SplitResult) -> Origin:
    """(scheme, host, port) of `url` (or of its parts, already split), the port filled in:
    what the token is kept to."""
    parts = urlsplit(url) if isinstance(url, str) else url
    default = 443 if parts.scheme == "https" else 80
    return parts.scheme, (parts.hostname or "").lower(), parts.port or default


class WireError(Exception):
    """A request that got no complete answer. `kind`: "connect" (nothing listens there, the
    name does not resolve, TLS refused), "timeout" (no byte for the read timeout), "cut" (the
    connection closed or broke before the answer was complete, or the answer was not HTTP),
    "slow" (the file's deadline passed), "stopped" (abort())."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind


class Headers:
    """An answer's header fields, looked up by name in any case (repeated fields joined):
    the lines of the head libcurl read (interim answers' too), parsed when first asked, as
    most answers (a small file's 200) are never asked."""

    def __init__(self, lines: list[bytes] | None = None) -> None:
        self._lines = lines or []
        self._parsed: dict[str, str] | None = None  # lower-case name -> value

    @property
    def _fields(self) -> dict[str, str]:
        if self._parsed is None:
            fields: dict[str, str] = {}
            for line in self._lines:
                if line.startswith(b"HTTP/"):  # a new answer: an interim 1xx, or the final
                    fields = {}
                    continue
                name, colon, value = line.decode("latin-1").rstrip("\r\n").partition(":")
                if colon and name and name == name.strip():
                    key, value = name.lower(), value.strip(" \t")
                    fields[key] = f"{fields[key]}, {value}" if key in fields else value
            self._parsed = fields
        return self._parsed

    def get(self, name: str, default: str | None = None) -> str | None:
        return self._fields.get(name.lower(), default)

    def __getitem__(self, name: str) -> str:
        return self._fields[name.lower()]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._fields


@dataclass
class Answer:
    """What a GET got: the status, the header fields of the final (non-interim) answer, and
    the body when it went to no sink (up to MAX_SIDE_BODY)."""

    status_code: int
    headers: Headers
    body: bytes = b""


def trust_paths() -> tuple[str | None, str | None]:
    """The CA file and folder TLS trusts, as httpx2 chooses them (httpcore2's
    default_ssl_context): SSL_CERT_FILE, else SSL_CERT_DIR, else OpenSSL's compiled-in paths."""
    if cafile := os.environ.get("SSL_CERT_FILE"):
        return cafile, None
    if capath := os.environ.get("SSL_CERT_DIR"):
        return None, capath
    paths = ssl.get_default_verify_paths()
    return (paths.openssl_cafile if os.path.isfile(paths.openssl_cafile) else None,
            paths.openssl_capath if os.path.isdir(paths.openssl_capath) else None)


class _Transfer:
    """One GET's state, as libcurl's callbacks see it."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.last = time.monotonic()  # when a byte last came: a head's line, body bytes
        # The head's lines as libcurl hands them over, interim answers' too, parsed once
        # the head is needed.
        self.lines: list[bytes] = []
        self.writer: Callable[[bytes], None] | None = None
        self.opened = False
        self.side = bytearray()
        self.side_full = False
        self.error: BaseException | None = None  # raised by the sink: re-raised after

    @property
    def status(self) -> int:
        """The status of the last answer whose head came (pycurl cannot be asked while it
        runs)."""
        for line in reversed(self.lines):
            if line.startswith(b"HTTP/"):
                parts = line.split(None, 2)
                return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
        return 0

    @property
    def headers(self) -> Headers:
        return Headers(self.lines)

    def header(self, line: bytes) -> None:
        self.lines.append(line)
        self.last = time.monotonic()

    def open(self, status: int) -> None:
        self.opened = True
        self.writer = self.sink(status, self.headers)

    def write(self, data: bytes) -> int | None:
        self.last = time.monotonic()
        try:
            if not self.opened:
                self.open(self.status)
            if self.writer is not None:
                self.writer(data)
                return None
            room = MAX_SIDE_BODY - len(self.side)
            self.side += data[:room]
            if len(data) > room:
                self.side_full = True
                return 0  # stop: libcurl closes the connection, never reused
            return None
        except BaseException as e:  # noqa: BLE001 - re-raised by get(), not lost in C
            self.error = e
            return 0


class _Slot:
    """The transfer an easy handle is running: its callbacks lead there."""

    transfer: _Transfer | None = None

    def header(self, line: bytes) -> None:
        if self.transfer is not None:
            self.transfer.header(line)

    def write(self, data: bytes) -> int | None:
        if self.transfer is None:
            return 0
        return self.transfer.write(data)


class Curl:
    """libcurl easy handles, one per thread, each with its keep-alive connections."""

    def __init__(self, *, connect_timeout: float, read_timeout: float, user_agent: str) -> None:
        self._connect_timeout, self._read_timeout = connect_timeout, read_timeout
        self._user_agent = user_agent
        self._local = threading.local()
        self._all: list[tuple[Any, _Slot]] = []  # pycurl.Curl, and its slot
        self._lock = threading.Lock()
        self._aborted = threading.Event()
        # Every socket libcurl has open, by inode (pycurl hands libcurl a duplicate of the
        # descriptor we make): abort() shuts them down, which wakes a transfer waiting on a
        # silent server at once. A progress callback would too, at 0.3 ms of CPU a request
        # (libcurl calls it on every turn of its loop: measured on the LFS sync of 1,000
        # small files, 2.4 s of CPU against 1.8 s without it).
        self._sockets: dict[int, socket.socket] = {}
        # Read once, as httpx2 does for its clients: HTTP(S)_PROXY, ALL_PROXY, NO_PROXY.
        self._proxies = urllib.request.getproxies_environment()
        self._trust = trust_paths()

    def proxy_for(self, url: str) -> str:
        """The proxy the environment names for `url`, or "" (none: libcurl then uses none,
        whatever its own reading of the environment would say)."""
        parts = urlsplit(url)
        proxy = self._proxies.get(parts.scheme) or self._proxies.get("all") or ""
        bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]
        if proxy and bypass(parts.hostname or "", self._proxies):
            return ""
        return proxy

    def get(self, url: str, headers: dict[str, str], sink: Sink,
            deadline: float | None = None) -> Answer:
        """GET `url` with `headers` (nothing else is sent but the user agent): the body goes
        where `sink` says once the head is in. Raises WireError when no complete answer
        came, and re-raises what the sink raised."""
        import pycurl

        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise WireError("cut", f"not an http(s) URL: {url[:200]!r}")
        if not url.isascii():  # a redirect's raw UTF-8: sent percent-encoded, as browsers do
            host = parts.hostname or ""
            netloc = parts.netloc.replace(host, host.encode("idna").decode("ascii")) \
                if not host.isascii() else parts.netloc
            url = parts._replace(netloc=netloc).geturl()
            url = quote(url, safe=_PRINTABLE)
        fields = [f"{name}: {value}" for name, value in headers.items()]
        if any(_NOT_IN_FIELD.search(text) for text in (url, *fields)):
            raise WireError("cut", f"a URL or header that cannot be sent: {url[:200]!r}")
        if self._aborted.is_set():
            raise WireError("stopped", "stopped (Ctrl-C)")
        curl, slot = self._handle()
        transfer = slot.transfer = _Transfer(sink)
        curl.setopt(pycurl.URL, url)
        curl.setopt(pycurl.HTTPHEADER, [*fields, "Expect:"])
        curl.setopt(pycurl.PROXY, self.proxy_for(url))
        # The file's deadline besides the silence timeout: a trickle, or interim answers
        # without end, keep bytes coming and would never trip LOW_SPEED_TIME (issue 38).
        curl.setopt(pycurl.TIMEOUT_MS, 0 if deadline is None else max(
            1, int(1000 * (deadline - time.monotonic()))))
        try:
            curl.perform()
        except pycurl.error as e:
            if transfer.error is not None:
                raise transfer.error from None
            if transfer.side_full:  # a side body past the bound: enough of it was read
                return Answer(curl.getinfo_raw(pycurl.RESPONSE_CODE), transfer.headers,
                              bytes(transfer.side))
            raise self._failure(curl, transfer, e) from None
        finally:
            slot.transfer = None  # no reference from the handle to this transfer's objects
        status = curl.getinfo_raw(pycurl.RESPONSE_CODE)
        if not transfer.opened:  # an empty body: the sink is asked all the same
            transfer.open(status)
        return Answer(status, transfer.headers, bytes(transfer.side))

    def _failure(self, curl: Any, transfer: _Transfer, e: Any) -> WireError:
        import pycurl

        code, message = e.args[0], str(e.args[1]) if len(e.args) > 1 else ""
        if self._aborted.is_set():
            return WireError("stopped", "stopped (Ctrl-C)")
        if code == pycurl.E_GOT_NOTHING:
            return WireError("cut", "the server closed the connection without an answer")
        # Past the connect (a reused connection has no CONNECT_TIME, but has this one).
        connected = curl.getinfo(pycurl.PRETRANSFER_TIME) > 0
        errno = curl.getinfo(pycurl.OS_ERRNO)
        if errno:  # the system's words ("Connection refused"), as the user knows them
            message = f"{os.strerror(errno)} ({message})" if message else os.strerror(errno)
        if code == pycurl.E_OPERATION_TIMEDOUT:
            if not connected:
                return WireError("connect", message or "timed out")
            # LOW_SPEED_TIME (no body byte for the read timeout) or TIMEOUT_MS (the file's
            # deadline): which one it was is told by when a byte last came, a head's line
            # included (interim answers without end are bytes, not silence).
            if time.monotonic() - transfer.last >= self._read_timeout * 0.75:
                return WireError("timeout", f"no data for {self._read_timeout:g}s")
            return WireError("slow", "the file's deadline passed")
        if code in (pycurl.E_COULDNT_CONNECT, pycurl.E_COULDNT_RESOLVE_HOST,
                    pycurl.E_COULDNT_RESOLVE_PROXY, pycurl.E_SSL_CONNECT_ERROR,
                    getattr(pycurl, "E_PEER_FAILED_VERIFICATION", 60),
                    pycurl.E_SSL_CACERT_BADFILE):
            return WireError("connect", message or f"libcurl error {code}")
        return WireError("cut", message or f"libcurl error {code}")

    def close(self) -> None:
        with self._lock:
            handles, self._all = self._all, []
        for curl, _slot in handles:
            with contextlib.suppress(Exception):
                # Closing calls _close_socket for each connection kept alive: pycurl runs
                # callbacks outside perform() from 7.46 on (pycurl #926; 7.45 warned
                # "closesocket_callback failed to acquire thread" and leaked the socket).
                curl.close()
        with self._lock:  # any left (a handle that would not close): closed here
            sockets, self._sockets = list(self._sockets.values()), {}
        for sock in sockets:
            sock.close()

    def abort(self) -> None:
        """Stop every GET in flight now (Ctrl-C): each of libcurl's sockets is shut down, so
        a transfer waiting on a silent server ends at once, and no new connection is made.
        Seen before: a sync took the whole read timeout (27 s of 30) to end after Ctrl-C,
        its threads blocked in recv()."""
        self._aborted.set()
        with self._lock:
            sockets = list(self._sockets.values())
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _open_socket(self, purpose: int, address: tuple[Any, ...]) -> Any:
        import pycurl

        if self._aborted.is_set():
            return pycurl.SOCKET_BAD
        sock = socket.socket(address[0], address[1], address[2])
        with self._lock:
            self._sockets[os.fstat(sock.fileno()).st_ino] = sock
        return sock

    def _close_socket(self, fd: int) -> int:
        with contextlib.suppress(OSError):
            inode = os.fstat(fd).st_ino
            with self._lock:
                ours = self._sockets.pop(inode, None)
            if ours is not None:
                ours.close()
        with contextlib.suppress(OSError):
            os.close(fd)
        return 0

    def _handle(self) -> tuple[Any, _Slot]:
        handle = getattr(self._local, "handle", None)
        if handle is not None:
            return handle  # type: ignore[no-any-return]
        import pycurl

        curl, slot = pycurl.Curl(), _Slot()
        # Set once for the handle's life and pointed at each transfer in turn, so the handle
        # never keeps a finished transfer's sink alive (and no setopt per request).
        curl.setopt(pycurl.HEADERFUNCTION, slot.header)
        curl.setopt(pycurl.WRITEFUNCTION, slot.write)
        curl.setopt(pycurl.NOSIGNAL, 1)  # threads: no SIGALRM for name lookups
        curl.setopt(pycurl.FOLLOWLOCATION, 0)  # redirects are checked and followed above
        curl.setopt(pycurl.PROTOCOLS, pycurl.PROTO_HTTP | pycurl.PROTO_HTTPS)
        curl.setopt(pycurl.USERAGENT, self._user_agent)
        curl.setopt(pycurl.CONNECTTIMEOUT_MS, int(self._connect_timeout * 1000))
        # The read timeout is the stall timeout: fewer than 1 byte a second for that long.
        curl.setopt(pycurl.LOW_SPEED_LIMIT, 1)
        curl.setopt(pycurl.LOW_SPEED_TIME, max(1, round(self._read_timeout)))
        curl.setopt(pycurl.OPENSOCKETFUNCTION, self._open_socket)
        curl.setopt(pycurl.CLOSESOCKETFUNCTION, self._close_socket)
        curl.setopt(pycurl.TCP_NODELAY, 1)
        cafile, capath = self._trust
        if cafile:
            curl.setopt(pycurl.CAINFO, cafile)
        if capath:
            curl.setopt(pycurl.CAPATH, capath)
        self._local.handle = curl, slot
        with self._lock:
            self._all.append((curl, slot))
        return curl, slot
