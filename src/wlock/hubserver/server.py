"""The emulator's two HTTP listeners: the Hub itself, and a "CDN" on another origin.

Protocol shapes follow the live Hub (recorded in ../shared/hub-recordings/) and what
huggingface_hub 2.x expects of it:
- a regular file's /resolve answers a same-host 307 to /api/resolve-cache/..., whose 200
  carries ETag (the git oid), Content-Length and X-Repo-Commit;
- an LFS file's /resolve answers a 302 to the CDN, carrying X-Repo-Commit, X-Linked-Etag (the
  sha256) and X-Linked-Size; Content-Length there is the redirect body's;
- every error carries X-Error-Code (huggingface_hub cannot tell a bare 401 on http:// apart);
- a file the store keeps on Xet (StoreBuilder(xet=True)) is listed with `xetHash` and its
  resolve answer carries `X-Xet-Hash` and a `Link: <...xet-read-token/...>; rel="xet-auth"`;
  `/api/{type}s/{id}/xet-read-token/{rev}` answers the CAS's URL, a read token and its
  expiry in headers and body; the CAS (on the CDN's listener, so the link's shaping and the
  faults apply to it as to the bridge) answers `/v2/reconstructions/{hash}` and
  `/v1/reconstructions/{hash}` (whole or for a `Range`), `/xorbs/default/{hash}` by byte
  range, `/v1/telemetry`. Other files carry no Xet header, so clients take plain HTTP.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import os
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping
from http import HTTPStatus
from http.client import HTTPMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

from wlock.hubserver.faults import Faults
from wlock.hubserver.store import Commit, Repo, RepoStore, StoredFile

_API_VERBS = frozenset({"revision", "tree", "refs", "paths-info", "xet-read-token",
                        "commits"})
# How long a Xet read token lives (the Hub's: about an hour).
XET_TOKEN_S = 3600
_BODY_ACTIONS = frozenset({"truncate", "corrupt", "stall", "trickle"})
_RANGE_ACTIONS = frozenset({"range"})
_EARLY_ACTIONS = frozenset({"status", "drop", "delay", "raw"})
# A shaped body goes out in pieces of PACE_S seconds at its rate (at least 64 KiB), as a stream
# held to a window by a long path delivers a window's bytes at a time. 64 KiB pieces at any
# rate cost the emulator 0.9 s of CPU for 537 MB at 20 MB/s, taken from the client on a
# 2-core machine; 10 ms pieces, 0.6 s.
PACE_S = 0.01
# A body this small goes out with its headers, in one write (the rest through sendfile).
SMALL_BODY = 64 * 1024
# A request's header fields: http.client's limits, which http.server applies.
MAX_FIELD_LINE = 65536
MAX_FIELDS = 100


class Stats:
    """What each listener saw, for tests that count requests or look for a leaked token, or
    see how many a client keeps in flight (`peak`: the most at once, on each listener and on
    both, over the requests the log holds)."""

    requests: dict[str, int]
    authorized: dict[str, int]
    log: deque[dict[str, Any]]

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()

    def record(self, listener: str, method: str, path: str, authorized: bool,
               asked: str | None = None) -> dict[str, Any]:
        """Log a request as it arrives (`asked`: its Range header); the returned entry gets
        its `status` once sent (a test can then tell that a fault fired), the file `bytes`
        it served, and its `end` once answered (Stats.done)."""
        entry = {"listener": listener, "method": method, "path": path, "auth": authorized,
                 "range": asked, "status": None, "bytes": 0, "start": time.monotonic(),
                 "end": None}
        with self._lock:
            self.requests[listener] += 1
            self.authorized[listener] += int(authorized)
            self.log.append(entry)
        return entry

    @staticmethod
    def done(entry: dict[str, Any]) -> None:
        # One store, no lock: a lock taken by the listeners' threads at every answer was 9%
        # of the emulator's CPU.
        entry["end"] = time.monotonic()

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            log = [dict(entry) for entry in self.log]
            return {
                "requests": dict(self.requests),
                "authorized": dict(self.authorized),
                "peak": {name: _peak([e for e in log if name in ("both", e["listener"])])
                         for name in ("hub", "cdn", "both")},
                "log": log,
            }

    def reset(self) -> None:
        with self._lock:
            self.requests = {"hub": 0, "cdn": 0}
            self.authorized = {"hub": 0, "cdn": 0}
            self.log = deque(maxlen=5000)


def _peak(entries: list[dict[str, Any]]) -> int:
    """The most of `entries` in flight at once (one still in flight ends now)."""
    now = time.monotonic()
    # (time, +1 or -1), sorted as tuples: at a tie, an end (-1) before a start.
    events = sorted([(e["start"], 1) for e in entries]
                    + [(e["end"] if e["end"] is not None else now, -1) for e in entries])
    most = current = 0
    for _, step in events:
        current += step
        most = max(most, current)
    return most


class _Listener(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # hf_transfer opens many connections at once; the default backlog of 5 drops SYNs and
    # turns into one-second client retransmits.
    request_queue_size = 256

    def __init__(self, address: tuple[str, int], app: HubServer, name: str) -> None:
        super().__init__(address, _Handler)
        self.app = app
        self.name = name

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client closing a kept-alive connection (a pool shutting down, a killed sync)
        # is routine, not an error worth a traceback.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class HubServer:
    """Both listeners over one store; `serve_forever()` blocks."""

    def __init__(
        self, store: RepoStore, *, host: str = "127.0.0.1", port: int = 0, cdn_port: int = 0,
        verbose: bool = False, emulator: bool = True, token: str | None = None,
    ) -> None:
        """`emulator=False` is `wlock serve`: no control routes (faults, stats). With
        `token`, a request to the endpoint without it gets 401, and the CDN listener serves
        only URLs the endpoint signed with it (HMAC, with an expiry), as the Hub's CDN does:
        clients send no token to another origin."""
        self.store = store
        self.faults = Faults()
        self.stats = Stats()
        self.verbose = verbose
        self.emulator = emulator
        self.token = token
        # What a commit's listing works out (its folders, its sorted tree), kept per commit.
        self._derived_lock = threading.Lock()
        self._folders: dict[str, set[str]] = {}
        self._trees: dict[str, list[tuple[str, bool]]] = {}
        self.hub = _Listener((host, port), self, "hub")
        self.cdn = _Listener((host, cdn_port), self, "cdn")

    @property
    def endpoint(self) -> str:
        host, port = self.hub.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def cdn_url(self) -> str:
        host, port = self.cdn.server_address[:2]
        return f"http://{host!s}:{port}"

    def signature(self, sha256: str, expires: int) -> str:
        if self.token is None:  # the emulator: a fake secret that no message may print
            return f"SECRET-{sha256[:12]}"
        return hmac.new(self.token.encode(), f"{sha256}:{expires}".encode(),
                        hashlib.sha256).hexdigest()

    def xet_token(self, expires: int) -> str:
        """A Xet read token: its expiry and a signature of it, checked by the CAS."""
        return f"xet.{expires}.{self.signature('xet-read', expires)}"

    def xet_token_valid(self, token: str) -> bool:
        try:
            _, expires, signature = token.split(".")
            when = int(expires)
        except ValueError:
            return False
        return when >= time.time() and hmac.compare_digest(
            signature, self.signature("xet-read", when))

    def folders(self, commit: Commit) -> set[str]:
        """The folders of a commit, worked out once (a commit never changes)."""
        with self._derived_lock:
            found = self._folders.get(commit.sha)
        if found is None:
            found = _folders(commit.files)
            with self._derived_lock:
                self._folders[commit.sha] = found
        return found

    def whole_tree(self, commit: Commit) -> list[tuple[str, bool]]:
        """Every folder and file of a commit, sorted as the recursive listing pages them:
        sorted once, not once per page of a 100,000-file listing."""
        with self._derived_lock:
            found = self._trees.get(commit.sha)
        if found is None:
            found = sorted([(p, True) for p in self.folders(commit)]
                           + [(p, False) for p in commit.files])
            with self._derived_lock:
                self._trees[commit.sha] = found
        return found

    def serve_forever(self) -> None:
        threading.Thread(target=self.cdn.serve_forever, daemon=True).start()
        self.hub.serve_forever()

    def shutdown(self) -> None:
        self.cdn.shutdown()
        self.hub.shutdown()


class _HttpError(Exception):
    def __init__(
        self, status: int, code: str | None, message: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.headers = headers or {}


def _folders(files: Mapping[str, StoredFile]) -> set[str]:
    return {p.rsplit("/", i)[0] for p in files for i in range(1, p.count("/") + 1)}


def _dir_oid(commit: str, path: str) -> str:
    return hashlib.sha1(f"tree {commit} {path}".encode(), usedforsecurity=False).hexdigest()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Listener
    server_version = "wlock-hub-emulator"
    # Headers and body go out in two writes: with Nagle's algorithm on, a keep-alive client
    # then waits ~40 ms (its delayed ACK) for every body. The Hub's servers answer at once.
    disable_nagle_algorithm = True

    _logged: dict[str, Any] | None = None
    _rate: tuple[str, int, int, int, int] | None = None  # this answer's RateLimit
    raw_requestline: bytes  # read by http.server's handle_one_request

    # -- plumbing --------------------------------------------------------------------------

    def parse_request(self) -> bool:
        """http.server's, for what real clients send: an HTTP/1.0 or 1.1 request line and
        header fields, split here instead of by the `email` package, which took 30% of the
        emulator's CPU per request (on two cores shared with the client, time a benchmark
        charges to the client). Any other request line (HTTP/0.9, HTTP/2, a malformed one)
        gets http.server's own answer; a folded field is refused (400), as RFC 9112
        allows."""
        words = self.raw_requestline.rstrip(b"\r\n").split()
        if len(words) != 3 or words[2] not in (b"HTTP/1.1", b"HTTP/1.0") \
                or words[1].startswith(b"//"):
            return super().parse_request()
        self.requestline = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
        self.command, self.path, self.request_version = (str(w, "iso-8859-1") for w in words)
        self.close_connection = self.request_version != "HTTP/1.1"
        headers = HTTPMessage()
        for _ in range(MAX_FIELDS + 1):
            line = self.rfile.readline(MAX_FIELD_LINE + 1)
            if len(line) > MAX_FIELD_LINE:
                self.send_error(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "Line too long")
                return False
            if line in (b"\r\n", b"\n", b""):
                break
            name, colon, value = str(line, "iso-8859-1").partition(":")
            if not colon or not name or name != name.strip():
                self.send_error(HTTPStatus.BAD_REQUEST, f"Bad header field ({line[:80]!r})")
                return False
            headers[name] = value.strip(" \t\r\n")
        else:
            self.send_error(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "Too many headers")
            return False
        self.headers = headers
        connection = headers.get("Connection", "").lower()
        if connection == "close":
            self.close_connection = True
        elif connection == "keep-alive":
            self.close_connection = False
        if headers.get("Expect", "").lower() == "100-continue" \
                and self.request_version == "HTTP/1.1":
            return self.handle_expect_100()
        return True

    def send_response(self, code: int, message: str | None = None) -> None:
        if self._logged is not None:
            self._logged["status"] = code
        super().send_response(code, message)
        if self._rate is not None:
            kind, left, reset, quota, window = self._rate
            self.send_header("RateLimit", f'"{kind}";r={left};t={reset}')
            self.send_header("RateLimit-Policy", f'"fixed window";"{kind}";q={quota};w={window}')

    def _rate_limit(self, path: str) -> None:
        """Count this request against its budget, as the Hub does: its answer carries what
        is left (`RateLimit`, `RateLimit-Policy`), and past the quota it is a 429 with
        `r=0` and the seconds to the reset in `t=`, without Retry-After."""
        kind = "resolvers" if "/resolve/" in path or path.startswith("/api/resolve-cache/") \
            else "api"
        left, reset, quota, window, refused = self.server.app.faults.rate_take(kind)
        self._rate = (kind, left, reset, quota, window)
        if self._logged is not None:  # for tests: what the answer said of its budget
            self._logged["rate"] = {"kind": kind, "left": left, "reset": reset}
        if refused:
            raise _HttpError(429, None, "You have exceeded our rate limit of requests "
                             f"({quota} per {window} s for {kind}). Please retry later.")

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.app.verbose:
            super().log_message(format, *args)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def _token(self) -> str | None:
        auth = self.headers.get("Authorization", "")
        return auth[7:].strip() if auth.lower().startswith("bearer ") else None

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _dispatch(self, method: str) -> None:
        app = self.server.app
        listener = self.server.name
        url = urlsplit(self.path)
        body = self._body() if method == "POST" else b""
        self._logged = None
        self._rate = None
        try:
            if listener == "hub" and url.path.startswith("/_emulator/") and app.emulator:
                self._control(method, url.path, body)
                return
            if app.token is not None and listener == "hub" and not hmac.compare_digest(
                    (self._token() or "").encode(), app.token.encode()):
                raise _HttpError(401, None, "Invalid credentials in Authorization header")
            self._logged = app.stats.record(
                listener, method, self.path, "Authorization" in self.headers,
                self.headers.get("Range"))
            if listener == "hub":
                self._rate_limit(url.path)
        except _HttpError as e:
            self._send_error(e)
            if self._logged is not None:
                app.stats.done(self._logged)
            return
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
            return
        try:  # recorded: in flight until answered
            if app.faults.latency_ms:
                time.sleep(app.faults.latency_ms / 1000)
            link = app.faults.link
            if link.delay_ms and link.applies(listener):
                time.sleep(link.delay_ms / 1000)
            rule = app.faults.take(listener, method, url.path, _EARLY_ACTIONS, url.query)
            if rule and rule.action == "delay":
                time.sleep(float(rule.params.get("delay_ms", 0)) / 1000)
            elif rule and rule.action == "drop":
                self.close_connection = True
                return
            elif rule and rule.action == "raw":
                self._send_raw(rule.params)
                return
            elif rule and rule.action == "status":
                headers = {}
                if "retry_after" in rule.params:
                    headers["Retry-After"] = str(rule.params["retry_after"])
                if "location" in rule.params:  # a redirect (a mirror's 301), sent verbatim
                    headers["Location"] = str(rule.params["location"])
                if "body_bytes" in rule.params:  # a long (or, 10**15, endless) body
                    self._send_long(int(rule.params.get("status", 500)), headers,
                                    int(rule.params["body_bytes"]))
                    return
                raise _HttpError(
                    int(rule.params.get("status", 500)), rule.params.get("error_code"),
                    str(rule.params.get("message", "Injected fault")), headers,
                )
            if listener == "cdn":
                self._cdn(method, url.path, parse_qs(url.query))
            else:
                self._hub(method, url.path, parse_qs(url.query), body)
        except _HttpError as e:
            self._send_error(e)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            if self._logged is not None:
                app.stats.done(self._logged)

    def _send_long(self, status: int, headers: dict[str, str], size: int) -> None:
        """An answer with a body of `size` zero bytes, sent until done or the client goes
        (a hostile redirect or error whose body a client must not read to its end)."""
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(size))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        piece, sent = bytes(64 * 1024), 0
        try:
            while sent < size:
                n = min(len(piece), size - sent)
                self.wfile.write(piece[:n])
                sent += n
        except OSError:
            pass
        finally:
            self.close_connection = True
            if self._logged is not None:
                self._logged["bytes"] = sent

    def _send(
        self, status: int, body: bytes, headers: dict[str, str], content_type: str
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in headers.items():
            self.send_header(key, value)
        self._end_headers_with(b"" if self.command == "HEAD" else body)

    def _end_headers_with(self, body: bytes) -> None:
        """End the headers and send them and `body` in one write: one segment and one
        wakeup of the client per small answer, not two. Measured: 1,000 small LFS files
        (2,000 requests) by one asyncio client without added latency, where the emulator is
        the limit: 2.14 s -> 1.24-1.33 s. On two cores shared with the client, the
        emulator's time is time a benchmark charges to the client."""
        # The header lines send_header() gathered and end_headers() would send alone
        # (BaseHTTPRequestHandler's own list, since Python 3.3).
        pending: list[bytes] = getattr(self, "_headers_buffer")  # noqa: B009
        pending += (b"\r\n", body)
        self.flush_headers()

    def _send_json(self, data: Any, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(data).encode()
        self._send(200, body, headers or {}, "application/json; charset=utf-8")

    def _send_error(self, e: _HttpError) -> None:
        headers = dict(e.headers)
        if e.code:
            headers["X-Error-Code"] = e.code
        headers["X-Error-Message"] = e.message
        body = json.dumps({"error": e.message}).encode()
        self._send(e.status, body, headers, "application/json; charset=utf-8")

    def _redirect(self, status: int, location: str, headers: dict[str, str]) -> None:
        reason = "Temporary Redirect" if status == 307 else "Found"
        body = f"{reason}. Redirecting to {location}".encode()
        self._send(status, body, {"Location": location, **headers}, "text/plain; charset=utf-8")

    def _send_file(self, path: Path, size: int, headers: dict[str, str],
                   key: str | None = None) -> None:
        """Serve bytes with Range support, through sendfile: the emulator is never the limit.
        A store with a `guard` (`wlock serve`: wlock.cache.serve.BlobGuard) has them checked
        against `key`, the blob's hash: a whole file is hashed as it streams and its last
        chunk sent only if it matches; a range only from a blob verified as it is now."""
        start, end, status = 0, size - 1, 200
        range_header = self.headers.get("Range")
        if range_header and self.command == "GET" and (rule := self.server.app.faults.take(
                self.server.name, "GET", urlsplit(self.path).path, _RANGE_ACTIONS,
                urlsplit(self.path).query)) is not None:
            self._send_bad_range(path, size, headers, rule)
            return
        if range_header:
            start, end = self._parse_range(range_header, size)
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end}/{size}"
        length = max(0, end - start + 1)
        guard = getattr(self.server.app.store, "guard", None)
        if guard is not None and key is not None and self.command == "GET":
            whole = start == 0 and length == size
            # A whole file is checked as it streams; anything else must be verified first.
            if (problem := guard.refused(key, path, verify=not whole)) is not None:
                raise _HttpError(404, "EntryNotFound", problem)
            if whole and length:
                self._send_guarded(path, size, headers, guard, key)
                return
        self._file_head(status, length, headers)
        if self.command == "HEAD" or length == 0:
            self.end_headers()
            return
        url = urlsplit(self.path)
        rule = self.server.app.faults.take(
            self.server.name, self.command, url.path, _BODY_ACTIONS, url.query
        )
        if self._logged is not None:
            self._logged["bytes"] = length
        link = self.server.app.faults.link
        shaped = link.applies(self.server.name) and (link.shaped() or link.reset_every)
        with open(path, "rb") as f:
            if rule is None and not shaped and length <= SMALL_BODY:
                self._end_headers_with(os.pread(f.fileno(), length, start))
                return
            self.end_headers()
            if rule is None and shaped:
                self._send_shaped(f, start, length, link)
            elif rule is None:
                self.connection.sendfile(f, start, length)
            elif rule.action == "trickle":
                # A byte at a time, `interval` seconds apart: never silent for long, never
                # done (what the silence timeout alone cannot end).
                pause = float(rule.params.get("interval", 0.5))
                try:
                    for offset in range(start, start + length):
                        self.connection.sendfile(f, offset, 1)
                        time.sleep(pause)
                except OSError:
                    pass
                self.close_connection = True
            elif rule.action in ("truncate", "stall"):
                cut = min(length, int(rule.params.get("bytes", length // 2)))
                self.connection.sendfile(f, start, cut)
                if rule.action == "stall":
                    # The connection stays open and silent: only a client's own read
                    # timeout can end the wait.
                    time.sleep(float(rule.params.get("seconds", 600)))
                self.close_connection = True
            else:  # corrupt: same length, one byte flipped, so only a hash can tell
                f.seek(start)
                data = bytearray(f.read(length))
                data[len(data) // 2] ^= 0xFF
                self.wfile.write(bytes(data))

    def _send_raw(self, params: dict[str, Any]) -> None:
        """`data_b64` sent as the whole answer, byte for byte (a hostile one: stray bytes
        after a complete answer, Content-Length with Transfer-Encoding, a NUL in a field);
        with `repeat_every`, sent again that many seconds apart for `seconds` (interim
        answers without end). The connection then closes, unless `keep_open`."""
        data = base64.b64decode(str(params.get("data_b64", "")))
        interval = params.get("repeat_every")
        try:
            self.wfile.write(data)
            self.wfile.flush()
            if interval:
                until = time.monotonic() + float(params.get("seconds", 600))
                while time.monotonic() < until:
                    time.sleep(float(interval))
                    self.wfile.write(data)
                    self.wfile.flush()
        except OSError:
            pass
        self.close_connection = not params.get("keep_open", False)

    def _send_bad_range(self, path: Path, size: int, headers: dict[str, str],
                        rule: Any) -> None:
        """A range answered as a hostile or broken server answers it (`mode`): `short` (half
        the bytes asked, with a Content-Range that says so), `wrong` (the bytes asked under
        a Content-Range naming others), `total` (the bytes asked, the Content-Range naming
        another size of the whole), `bare` (the bytes asked, 206 without a Content-Range),
        `ignore` (200 and the whole file), `decoy` (the
        ranges cut from `data_b64` instead of the file, padded with zeros to its size: what
        a server shows a scanner that reads ranges, and not a download)."""
        mode = rule.params.get("mode", "short")
        start, end = self._parse_range(self.headers["Range"], size)
        with open(path, "rb") as f:
            content = f.read()
        if mode == "decoy":
            decoy = base64.b64decode(rule.params["data_b64"])
            content = (decoy + bytes(size))[:size]
        if mode == "ignore":
            if self._logged is not None:
                self._logged["bytes"] = size
            self._file_head(200, size, headers)
            self._end_headers_with(content)
            return
        if mode == "short":
            end = start + (end - start) // 2
        shown = f"bytes {start}-{end}/{size}"
        if mode == "wrong":
            shown = f"bytes {start + 1}-{end + 1}/{size}"
        if mode == "total":
            shown = f"bytes {start}-{end}/{size + 1}"
        body = content[start:end + 1]
        if self._logged is not None:
            self._logged["bytes"] = len(body)
        self._file_head(206, len(body), {**headers} if mode == "bare" else
                        {**headers, "Content-Range": shown})
        self._end_headers_with(body)

    def _file_head(self, status: int, length: int, headers: dict[str, str]) -> None:
        """The status and header lines of an answer carrying a file's bytes (not yet sent:
        the caller ends them, alone or with a small body)."""
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        self.send_header("Accept-Ranges", "bytes")
        for name, value in headers.items():
            self.send_header(name, value)

    def _send_shaped(self, f: Any, start: int, length: int, link: Any) -> None:
        """The body paced by the link's models (faults.Link: per connection, burst then pace,
        slow start, an aggregate shared by every body in flight), in pieces of PACE_S; or
        cut half-way when it is the body the link resets."""
        faults = self.server.app.faults
        with faults._lock:
            cut = link.reset_now()
        end = start + (length // 2 if cut else length)
        rate = max(link.mb_per_s, link.total_mb_per_s) * 1e6
        piece = max(65536, int(rate * PACE_S)) if rate else 65536
        began, sent, offset = time.monotonic(), 0, start
        while offset < end:
            n = min(piece, end - offset)
            with faults._lock:
                queued = link.take(n, time.monotonic())
            if queued > 0:
                time.sleep(queued)
            self.connection.sendfile(f, offset, n)
            offset += n
            sent += n
            wait = link.stream_wait(sent, time.monotonic() - began)
            if wait > 0:
                time.sleep(wait)
        if cut:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)

    @staticmethod
    def _parse_range(header: str, size: int) -> tuple[int, int]:
        unit, _, spec = header.partition("=")
        first, _, last = spec.split(",")[0].strip().partition("-")
        try:
            if unit.strip() != "bytes":
                raise ValueError(unit)
            if first == "":
                start, end = max(0, size - int(last)), size - 1
            else:
                start = int(first)
                end = min(int(last), size - 1) if last else size - 1
        except ValueError:
            start, end = size, size
        if start >= size or start > end:
            raise _HttpError(
                416, None, "Range Not Satisfiable", {"Content-Range": f"bytes */{size}"}
            )
        return start, end

    # -- control ---------------------------------------------------------------------------

    def _control(self, method: str, path: str, body: bytes) -> None:
        app = self.server.app
        if path == "/_emulator/faults" and method == "POST":
            try:
                app.faults.configure(json.loads(body or b"{}"))
            except (ValueError, KeyError, TypeError) as e:
                raise _HttpError(400, None, f"bad fault configuration: {e}") from e
            self._send_json({"ok": True})
        elif path == "/_emulator/stats" and method == "GET":
            self._send_json(app.stats.snapshot())
        elif path == "/_emulator/stats/reset" and method == "POST":
            app.stats.reset()
            self._send_json({"ok": True})
        else:
            raise _HttpError(404, None, f"no control route {method} {path}")

    # -- the Hub ---------------------------------------------------------------------------

    def _hub(self, method: str, path: str, query: dict[str, list[str]], body: bytes) -> None:
        raw = path.split("/")[1:]
        segments = [unquote(s) for s in raw]
        if segments[:1] == ["api"] and segments[1:2] in (["models"], ["datasets"]):
            self._api(method, segments[1][:-1], segments[2:], raw[2:], query, body)
        elif segments[:2] == ["api", "resolve-cache"] and len(segments) > 3:
            self._resolve_cache(segments[2][:-1], segments[3:])
        elif method in ("GET", "HEAD"):
            kind, rest = ("dataset", segments[1:]) if segments[:1] == ["datasets"] else (
                "model", segments
            )
            for i in (2, 1):
                if len(rest) > i + 2 and rest[i] == "resolve":
                    self._resolve(kind, "/".join(rest[:i]), rest[i + 1], "/".join(rest[i + 2:]))
                    return
            raise _HttpError(404, None, "Not Found")
        else:
            raise _HttpError(405, None, "Method Not Allowed")

    def _split_id(self, kind: str, segments: list[str], verbs: frozenset[str]) -> int:
        """How many leading segments form the repo id (`name` or `org/name`)."""
        store = self.server.app.store
        if len(segments) >= 2:
            two = "/".join(segments[:2])
            if store.get_repo(kind, two) or store.renamed(kind, two):
                return 2
            if segments[1] in verbs:
                return 1
            return 2
        return 1

    def _repo(self, kind: str, repo_id: str, rename_from: str | None = None) -> Repo:
        store = self.server.app.store
        repo = store.get_repo(kind, repo_id)
        if repo is None:
            target = store.renamed(kind, repo_id)
            if target and rename_from is not None:
                location = self.path.replace(quote(repo_id), quote(target), 1)
                raise _Redirect(307, location)
            raise self._not_found()
        if repo.private and self._token() not in repo.granted:
            raise self._not_found()
        return repo

    def _not_found(self) -> _HttpError:
        """A repo that is missing, or private to others. As the live Hub answers: to an
        anonymous request a bare 401 (no X-Error-Code; the same for a repo that does not
        exist and one that is private), to one with a token 404 RepoNotFound
        (hub-recordings/transcribed_errors_and_ratelimit.json). `wlock serve` names it
        always: huggingface_hub reads a bare 401 as "not found" on https only."""
        if self._token() is None and self.server.app.emulator:
            return _HttpError(401, None, "Invalid username or password.")
        return _HttpError(
            404, "RepoNotFound",
            "Repository not found. If the repo is private, make sure you are authenticated.")

    def _check_gate(self, repo: Repo) -> None:
        if not repo.gated:
            return
        token = self._token()
        what = f"Access to {repo.kind} {repo.id} is restricted"
        if token is None:
            raise _HttpError(
                401, "GatedRepo", f"{what}. You must be authenticated to access it."
            )
        if token not in repo.granted:
            raise _HttpError(
                403, "GatedRepo",
                f"{what} and you are not in the authorized list. Visit the repo to ask for access.",
            )

    def _commit(self, repo: Repo, revision: str) -> Commit:
        commit = repo.resolve(revision)
        if commit is None:
            raise _HttpError(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return commit

    def _api(
        self, method: str, kind: str, segments: list[str], raw: list[str],
        query: dict[str, list[str]], body: bytes,
    ) -> None:
        n = self._split_id(kind, segments, _API_VERBS)
        repo_id, rest = "/".join(segments[:n]), segments[n:]
        try:
            repo = self._repo(kind, repo_id, rename_from=repo_id)
        except _Redirect as r:
            self._redirect(r.status, r.location, {})
            return
        verb = rest[0] if rest else None
        read = method in ("GET", "HEAD")  # HEAD: the same answer without its body
        if verb is None and read:
            self._info(repo, self._commit(repo, "main"), query)
        elif verb == "revision" and len(rest) >= 2 and read:
            # A revision may hold a slash (refs/pr/1); the client sends it quoted.
            self._info(repo, self._commit(repo, "/".join(rest[1:])), query)
        elif verb == "tree" and len(rest) >= 2 and read:
            self._tree(repo, self._commit(repo, rest[1]), "/".join(rest[2:]), query)
        elif verb == "refs" and read:
            self._refs(repo)
        elif verb == "commits" and len(rest) >= 2 and read:
            self._commits(repo, self._commit(repo, "/".join(rest[1:])), query)
        elif verb == "paths-info" and len(rest) >= 2 and method == "POST":
            self._paths_info(repo, self._commit(repo, rest[1]), body)
        elif verb == "xet-read-token" and len(rest) >= 2 and method == "GET":
            self._check_gate(repo)
            self._commit(repo, "/".join(rest[1:]))
            self._xet_read_token()
        else:
            raise _HttpError(404, None, f"Not Found: {method} {self.path}")

    def _files(self, repo: Repo, commit: Commit) -> Mapping[str, StoredFile]:
        injected = self.server.app.faults.injected_files(f"/{repo.kind}s/{repo.id}/")
        if not injected:
            return commit.files  # not copied: a 100,000-file commit is asked per request
        files = dict(commit.files)
        for name in injected:
            files[name] = StoredFile(
                path=name, size=1, sha256=hashlib.sha256(b"x").hexdigest(),
                blob_id=hashlib.sha1(b"blob 1\x00x", usedforsecurity=False).hexdigest(),
                lfs=False,
            )
        return files

    def _info(self, repo: Repo, commit: Commit, query: dict[str, list[str]]) -> None:
        blobs = query.get("blobs", ["false"])[0].lower() == "true"
        siblings = []
        # Cut as the live Hub cuts it (Faults.siblings_cap): the tree listing has the rest.
        listed = sorted(self._files(repo, commit).items())[:self.server.app.faults.siblings_cap]
        for path, f in listed:
            sibling: dict[str, Any] = {"rfilename": path}
            if blobs:
                sibling["blobId"] = f.blob_id
                if self.server.app.faults.siblings_sizes:
                    sibling["size"] = f.size
                if f.lfs:
                    sibling["lfs"] = {
                        "sha256": f.sha256, "size": f.size, "pointerSize": f.pointer_size
                    }
            siblings.append(sibling)
        author = repo.id.split("/")[0] if "/" in repo.id else None
        data: dict[str, Any] = {
            "_id": hashlib.md5(repo.id.encode(), usedforsecurity=False).hexdigest()[:24],
            "id": repo.id,
            "author": author,
            "sha": commit.sha,
            "lastModified": commit.date,
            "createdAt": repo.created,
            "private": repo.private,
            "gated": "manual" if repo.gated else False,
            "disabled": False,
            "downloads": 0,
            "likes": 0,
            "tags": [],
            "siblings": siblings,
            "usedStorage": sum(f.size for f in commit.files.values()),
        }
        if repo.kind == "model":
            data["modelId"] = repo.id
            data["spaces"] = []
            data["config"] = {}
        card = self._card_data(commit)
        if card is not None:
            # As the Hub: the README's YAML front matter is `cardData`, and its licence is
            # also a `license:` tag.
            data["cardData"] = card
            if isinstance(card.get("license"), str):
                data["tags"] = [f"license:{card['license']}"]
        data.update(repo.extra)
        self._send_json(data)

    def _card_data(self, commit: Commit) -> dict[str, Any] | None:
        """The front matter of the commit's README.md (between `---` lines), or None."""
        readme = commit.files.get("README.md")
        path = self.server.app.store.object_path(readme.sha256) if readme else None
        if path is None or readme is None or readme.size > 1_000_000:
            return None
        # huggingface_hub's own reader of card front matter (what the Hub parses too).
        from huggingface_hub.repocard import metadata_load

        try:
            card = metadata_load(path)
        except Exception:  # noqa: BLE001 - a card that is not YAML has no cardData
            return None
        return card if isinstance(card, dict) else None

    def _entry(
        self, repo: Repo, commit: Commit, f: StoredFile, expand: bool
    ) -> dict[str, Any]:
        entry: dict[str, Any] = {"type": "file", "oid": f.blob_id, "size": f.size}
        if f.lfs:
            entry["lfs"] = {"oid": f.sha256, "size": f.size, "pointerSize": f.pointer_size}
        if f.xet_hash:
            entry["xetHash"] = f.xet_hash
        entry["path"] = f.path
        if expand:
            entry["lastCommit"] = {"id": commit.sha, "title": commit.message, "date": commit.date}
        return entry

    def _dir_entry(self, commit: Commit, path: str, expand: bool) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "type": "directory", "oid": _dir_oid(commit.sha, path), "size": 0, "path": path
        }
        if expand:
            entry["lastCommit"] = {"id": commit.sha, "title": commit.message, "date": commit.date}
        return entry

    def _listing(self, repo: Repo, commit: Commit) -> tuple[Mapping[str, StoredFile], set[str]]:
        files = self._files(repo, commit)
        if files is commit.files:  # the commit's own: its folders are worked out once
            return files, self.server.app.folders(commit)
        return files, _folders(files)

    def _tree(
        self, repo: Repo, commit: Commit, base: str, query: dict[str, list[str]]
    ) -> None:
        recursive = query.get("recursive", ["false"])[0].lower() == "true"
        expand = query.get("expand", ["false"])[0].lower() == "true"
        files, dirs = self._listing(repo, commit)
        base = base.strip("/")
        if base and base not in dirs:
            raise _HttpError(404, "EntryNotFound", f"{base} does not exist on {commit.sha}")
        prefix = f"{base}/" if base else ""

        def wanted(path: str) -> bool:
            return path.startswith(prefix) and (recursive or "/" not in path[len(prefix):])

        faults = self.server.app.faults
        if files is commit.files and recursive and not base and not faults.tree_hide:
            entries = self.server.app.whole_tree(commit)  # sorted once per commit
        else:
            entries = sorted(
                [(p, True) for p in dirs if wanted(p)]
                + [(p, False) for p in files if wanted(p) and p not in faults.tree_hide]
            )
        # The live Hub: 1,000 entries a page, 50 with expand (transcribed_tree_pagination_link);
        # `limit` honoured below that.
        page_size = min(faults.tree_page_size, 50 if expand else 1000)
        if (limit := query.get("limit", [""])[0]).isdigit() and int(limit) > 0:
            page_size = min(page_size, int(limit))
        cursor = query.get("cursor", [""])[0]
        offset = _cursor_offset(cursor) if faults.tree_paging != "ignore_cursor" else 0
        page = entries[offset : offset + page_size]
        headers = {}
        if offset + page_size < len(entries):
            params = {k: v[0] for k, v in query.items()}
            # Opaque, as the Hub's (base64 of JSON naming where the next page starts).
            params["cursor"] = base64.urlsafe_b64encode(json.dumps(
                {"file_name": entries[offset + page_size][0], "offset": offset + page_size}
            ).encode()).decode()
            if faults.tree_paging == "loop":  # the next page is the first again
                del params["cursor"]
            host = self.headers.get("Host", "127.0.0.1")
            if faults.tree_paging == "foreign_link":
                host = "upstream.invalid"
            url = f"http://{host}{urlsplit(self.path).path}?{urlencode(params)}"
            headers["Link"] = f'<{url}>; rel="next"'
        self._send_json(
            [
                self._dir_entry(commit, p, expand) if is_dir
                else self._entry(repo, commit, files[p], expand)
                for p, is_dir in page
            ],
            headers,
        )

    def _commits(self, repo: Repo, commit: Commit, query: dict[str, list[str]]) -> None:
        """The history of a revision, newest first, as huggingface_hub's list_repo_commits
        reads it (id, title, message, authors, date), 50 a page, the next page in `Link`
        (`?p=N`, as the Hub pages its commit listing). Not in the recordings: the shape is
        the client's parser's."""
        page_size = 50
        raw_page = query.get("p", ["0"])[0]
        page = int(raw_page) if raw_page.isdigit() else 0
        chain: list[Commit] = []
        at: Commit | None = commit
        while at is not None and len(chain) < (page + 1) * page_size + 1:
            chain.append(at)
            at = repo.commits.get(at.parent) if at.parent else None
        items = chain[page * page_size:(page + 1) * page_size]
        headers = {}
        if len(chain) > (page + 1) * page_size:
            host = self.headers.get("Host", "127.0.0.1")
            headers["Link"] = (f'<http://{host}{urlsplit(self.path).path}?p={page + 1}>; '
                               'rel="next"')
        self._send_json([{"id": c.sha, "title": c.message.split("\n", 1)[0],
                          "message": c.message, "date": c.date,
                          "authors": [{"user": "emulator", "avatar": ""}]} for c in items],
                        headers)

    def _refs(self, repo: Repo) -> None:
        def ref(kind: str, name: str, sha: str) -> dict[str, str]:
            return {"name": name, "ref": f"refs/{kind}/{name}", "targetCommit": sha}

        # A branch committed as `refs/convert/parquet` is the Hub's parquet conversion: a
        # `convert` ref, resolved by its full name (`revision=refs/convert/parquet`).
        converts = {n: s for n, s in repo.branches.items() if n.startswith("refs/convert/")}
        self._send_json({
            "branches": [ref("heads", n, s) for n, s in sorted(repo.branches.items())
                         if n not in converts],
            "tags": [ref("tags", n, s) for n, s in sorted(repo.tags.items())],
            "converts": [ref("convert", n.removeprefix("refs/convert/"), s)
                         for n, s in sorted(converts.items())],
        })

    def _paths_info(self, repo: Repo, commit: Commit, body: bytes) -> None:
        if self.headers.get("Content-Type", "").startswith("application/json"):
            raw = json.loads(body or b"{}")
            paths, expand = raw.get("paths", []), bool(raw.get("expand"))
        else:
            form = parse_qs(body.decode())
            paths = form.get("paths", [])
            expand = form.get("expand", ["false"])[0].lower() == "true"
        files, dirs = self._listing(repo, commit)
        out = []
        for p in paths:
            p = p.strip("/")
            if p in files:
                out.append(self._entry(repo, commit, files[p], expand))
            elif p in dirs:
                out.append(self._dir_entry(commit, p, expand))
        self._send_json(out)

    def _resolve(self, kind: str, repo_id: str, revision: str, path: str) -> None:
        try:
            repo = self._repo(kind, repo_id, rename_from=repo_id)
        except _Redirect as r:
            self._redirect(r.status, r.location, {})
            return
        self._check_gate(repo)
        commit = self._commit(repo, revision)
        files = self._files(repo, commit)
        f = files.get(path)
        if f is None:
            raise _HttpError(
                404, "EntryNotFound", f"Entry not found: {path}", {"X-Repo-Commit": commit.sha}
            )
        headers = {"X-Repo-Commit": commit.sha}
        if f.lfs and self.server.app.faults.lfs_served == "hub":
            # A mirror's or a proxy's way (Faults.lfs_served): the bytes, here.
            headers.update({"ETag": f'"{f.sha256}"', "X-Linked-Etag": f'"{f.sha256}"',
                            "X-Linked-Size": str(f.size)})
            if (blob := self.server.app.store.object_path(f.sha256)) is None:
                raise _HttpError(404, "EntryNotFound", f"No bytes for {path}")
            self._send_file(blob, f.size, headers, key=f.sha256)
            return
        if f.lfs:
            cdn = self.server.app.cdn_url
            expires = int(time.time()) + 3600
            # Signed like the live Hub's CDN URLs: the signature is a secret that no message
            # of a client may print.
            location = f"{cdn}/objects/{f.sha256}?Expires={expires}&response-content-disposition=" \
                + quote(f"inline; filename*=UTF-8''{quote(path.rsplit('/', 1)[-1])};") \
                + f"&Signature={self.server.app.signature(f.sha256, expires)}" \
                + "&Key-Pair-Id=EMULATOR"
            headers["X-Linked-Etag"] = f'"{f.sha256}"'
            headers["X-Linked-Size"] = str(f.size)
            if f.xet_hash:
                headers["X-Xet-Hash"] = f.xet_hash
                # Both rels as the live Hub sends them (transcribed_resolve_gpt2_model_
                # safetensors_302_xet.json): the token route, and the CAS's reconstruction.
                auth_base = (cdn if self.server.app.faults.xet_auth_listener == "cdn"
                             else self.server.app.endpoint)
                headers["Link"] = (f"<{auth_base}/api/{kind}s/{repo.id}/"
                                   f'xet-read-token/{commit.sha}>; rel="xet-auth", '
                                   f"<{cdn}/v1/reconstructions/{f.xet_hash}>; "
                                   'rel="xet-reconstruction-info"')
            self._redirect(302, location, headers)
            return
        prefix = "datasets/" if kind == "dataset" else "models/"
        location = (
            f"/api/resolve-cache/{prefix}{quote(repo.id)}/{commit.sha}/{quote(path)}"
            f"?etag=%22{f.blob_id}%22"
        )
        headers["X-Linked-Etag"] = f'"{f.blob_id}"'
        self._redirect(307, location, headers)

    def _send_guarded(self, path: Path, size: int, headers: dict[str, str], guard: Any,
                      key: str) -> None:
        """The whole file, hashed as it goes; the last chunk only once the hash is the
        blob's name. On a mismatch the connection ends short: the client sees a truncated
        body (Content-Length says more), never a complete file with the wrong bytes."""
        self._file_head(200, size, headers)
        self.end_headers()
        if self._logged is not None:
            self._logged["bytes"] = size
        digest = guard.hasher(key)
        held = b""
        with open(path, "rb") as f:
            while True:
                chunk = f.read(1 << 20)
                if not chunk:
                    break
                digest.update(chunk)
                if held:
                    self.wfile.write(held)
                held = chunk
        if guard.finished(key, path, digest.hexdigest()):
            self.wfile.write(held)
        else:
            if self._logged is not None:
                self._logged["status"] = "cut"
            self.close_connection = True
            self.wfile.flush()
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)

    def _resolve_cache(self, kind: str, segments: list[str]) -> None:
        commit_at = next(
            (i for i, s in enumerate(segments) if len(s) == 40 and i in (1, 2)), None
        )
        if commit_at is None:
            raise _HttpError(404, None, "Not Found")
        repo = self._repo(kind, "/".join(segments[:commit_at]))
        self._check_gate(repo)
        commit = self._commit(repo, segments[commit_at])
        path = "/".join(segments[commit_at + 1:])
        f = self._files(repo, commit).get(path)
        store_path = self.server.app.store.object_path(f.sha256) if f else None
        if f is None or f.lfs or store_path is None:
            raise _HttpError(404, "EntryNotFound", f"Entry not found: {path}")
        self._send_file(
            store_path, f.size, {"ETag": f'"{f.blob_id}"', "X-Repo-Commit": commit.sha},
            key=f.sha256,
        )

    # -- the CDN ---------------------------------------------------------------------------

    def _xet_read_token(self) -> None:
        app = self.server.app
        expires = int(time.time()) + (app.faults.xet_token_seconds or XET_TOKEN_S)
        token = app.xet_token(expires)
        self._send_json({"casUrl": app.cdn_url, "accessToken": token, "exp": expires},
                        {"X-Xet-Cas-Url": app.cdn_url, "X-Xet-Access-Token": token,
                         "X-Xet-Token-Expiration": str(expires)})

    def _cdn(self, method: str, path: str, query: dict[str, list[str]]) -> None:
        parts = path.strip("/").split("/")
        if "xet-read-token" in parts and parts[0] == "api" and method == "GET" and \
                self.server.app.faults.xet_auth_listener == "cdn":
            # The token route moved to another origin (Faults.xet_token): it answers any
            # caller, as a host that is not the Hub would; what matters is what it was sent.
            self._xet_read_token()
            return
        if parts[0] in ("v1", "v2", "xorbs"):
            self._cas(method, parts, query)
            return
        store_path = None
        if len(parts) == 2 and parts[0] == "objects" and method in ("GET", "HEAD"):
            if self.server.app.token is not None:
                self._check_signature(parts[1], query)
            store_path = self.server.app.store.object_path(parts[1])
        if store_path is None:
            raise _HttpError(404, None, "NoSuchKey")
        size = os.stat(store_path).st_size
        limit = self.server.app.faults.bridge_limit
        if limit is not None and size > limit:
            raise _HttpError(400, None, f"File too large for the bridge ({size} bytes, the "
                             f"limit is {limit}): download it through a Xet client")
        self._send_file(store_path, size, {"ETag": f'"{parts[1]}"'}, key=parts[1])


    # -- the CAS (Xet) --------------------------------------------------------------------

    def _cas(self, method: str, parts: list[str], query: dict[str, list[str]]) -> None:
        app = self.server.app
        xet = getattr(app.store, "xet", None)
        if parts == ["v1", "telemetry"] and method == "POST":
            self._send_json({})
            return
        if len(parts) == 3 and parts[:2] == ["xorbs", "default"] and method in ("GET", "HEAD"):
            # A xorb's URL is presigned, as the CAS's are: no token comes with it.
            self._check_signature(f"xorb:{parts[2]}", query)
            path = xet.xorb_path(parts[2]) if xet is not None else None
            if path is None:
                raise _HttpError(404, None, f"no xorb {parts[2]}")
            self._send_file(path, os.stat(path).st_size, {})
            return
        auth = self.headers.get("Authorization", "")
        if xet is None or not app.xet_token_valid(auth.removeprefix("Bearer ")):
            raise _HttpError(401, None, "Unauthorized: a Xet read token is needed")
        if len(parts) == 3 and parts[1] == "reconstructions" and method == "GET":
            self._reconstruction(xet, parts[0], parts[2])
        else:
            raise _HttpError(404, None, f"Not Found: {method} {self.path}")

    def _reconstruction(self, xet: Any, version: str, file_hash: str) -> None:
        found = xet.terms(file_hash)
        if found is None:
            raise _HttpError(404, None, f"no file {file_hash}")
        first = last = None
        if (header := self.headers.get("Range")) is not None:
            if found[0] == 0:
                raise _HttpError(416, None, "Range Not Satisfiable")
            first, last = self._parse_range(header, found[0])
        skip, terms = xet.reconstruction(file_hash, first, last)
        app = self.server.app
        expires = int(time.time()) + XET_TOKEN_S

        def url_of(xorb: str) -> str:
            signature = app.signature(f"xorb:{xorb}", expires)
            return f"{app.cdn_url}/xorbs/default/{xorb}?Expires={expires}&Signature={signature}"
        ranges: dict[str, dict[tuple[int, int], tuple[int, int]]] = {}
        for t in terms:
            ranges.setdefault(t.xorb, {})[(t.start, t.end)] = xet.xorb(t.xorb).byte_range(
                t.start, t.end)
        answer: dict[str, Any] = {
            "offset_into_first_range": skip,
            "terms": [{"hash": t.xorb, "unpacked_length": t.length,
                       "range": {"start": t.start, "end": t.end}} for t in terms],
        }
        if version == "v2":
            answer["xorbs"] = {xorb: [{"url": url_of(xorb), "ranges": [
                {"chunks": {"start": a, "end": b}, "bytes": {"start": lo, "end": hi}}
                for (a, b), (lo, hi) in sorted(by.items())]}] for xorb, by in ranges.items()}
        else:
            answer["fetch_info"] = {xorb: [
                {"range": {"start": a, "end": b}, "url": url_of(xorb),
                 "url_range": {"start": lo, "end": hi}}
                for (a, b), (lo, hi) in sorted(by.items())] for xorb, by in ranges.items()}
        self._send_json(answer)

    def _check_signature(self, sha256: str, query: dict[str, list[str]]) -> None:
        try:
            expires = int(query["Expires"][0])
            signature = query["Signature"][0]
        except (KeyError, ValueError, IndexError):
            raise _HttpError(403, None, "AccessDenied") from None
        expected = self.server.app.signature(sha256, expires)
        if expires < time.time() or not hmac.compare_digest(signature, expected):
            raise _HttpError(403, None, "AccessDenied")


def _cursor_offset(cursor: str) -> int:
    """Where the page a tree listing's `cursor` names starts (0 without one)."""
    if not cursor:
        return 0
    try:
        return int(json.loads(base64.urlsafe_b64decode(cursor.encode()))["offset"])
    except (ValueError, KeyError, TypeError):
        raise _HttpError(400, None, f"Invalid cursor: {cursor[:40]}") from None


class _Redirect(Exception):
    def __init__(self, status: int, location: str) -> None:
        super().__init__(location)
        self.status, self.location = status, location
