"""wlock.cache.wire reads HTTP/1.1 answers itself: each framing and oddity a server may send,
over real sockets on loopback, from a server that sends exactly the bytes a test scripts
(the real Hub's recorded answers among them)."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import RECORDINGS
from wlock.cache.wire import Wire, WireError


class Scripted:
    """Accepts connections on loopback; for each request read, sends the next scripted
    answer (raw bytes; None: send nothing and keep the connection open; after one saying
    `Connection: close`, closes it). Records the requests' heads and how many connections
    were accepted."""

    def __init__(self, answers: list[bytes | None], tls: ssl.SSLContext | None = None) -> None:
        self.answers = list(answers)
        self.requests: list[bytes] = []
        self.connections = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._tls = tls
        self.port = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def url(self, path: str = "/file") -> str:
        return f"{'https' if self._tls else 'http'}://127.0.0.1:{self.port}{path}"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._talk, args=(conn,), daemon=True).start()

    def _talk(self, conn: socket.socket) -> None:
        try:
            if self._tls:
                conn = self._tls.wrap_socket(conn, server_side=True)
            buffer = b""
            while self.answers:
                while b"\r\n\r\n" not in buffer:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buffer += data
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                self.requests.append(head)
                answer = self.answers.pop(0)
                if answer is None:
                    threading.Event().wait(30)
                    return
                conn.sendall(answer)
                if b"\r\nConnection: close\r\n" in answer.partition(b"\r\n\r\n")[0] + b"\r\n":
                    return  # as a server does after an answer it said would be its last
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self._listener.close()

    def __enter__(self) -> Scripted:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@pytest.fixture
def wire() -> Iterator[Wire]:
    wire = Wire(ssl.create_default_context(), connect_timeout=5, read_timeout=5,
                user_agent="wlock-test")
    yield wire
    wire.close()


def _get(wire: Wire, url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    with wire.get(url, headers or {}) as response:
        return response.status_code, response.read()


def _recorded(name: str) -> bytes:
    """A recorded answer of huggingface.co, as the bytes it came in (status, headers, body)."""
    record = json.loads((RECORDINGS / name).read_text())["response"]
    body = json.dumps(record["json"]).encode() if "json" in record else b"x" * int(
        record["headers"]["Content-Length"][0])
    lines = [f"HTTP/1.1 {record['status']['code']} {record['status']['message']}"]
    for name_, values in record["headers"].items():
        if name_.lower() == "content-length":
            values = [str(len(body))]
        lines += [f"{name_}: {value}" for value in values]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def test_the_real_hubs_answers_are_read_and_the_connection_kept(wire: Wire) -> None:
    redirect = _recorded("api_models_bert-base-uncased_307_rename_redirect.json")
    found = _recorded("api_models_google-bert_bert-base-uncased_200.json")
    with Scripted([redirect, found]) as server:
        with wire.get(server.url("/api/models/bert-base-uncased"), {}) as response:
            assert response.status_code == 307
            assert response.headers["location"] == "/api/models/google-bert/bert-base-uncased"
            assert response.headers.get("LOCATION") == response.headers["Location"]
            response.read()
        with wire.get(server.url("/api/models/google-bert/bert-base-uncased"), {}) as response:
            assert response.headers["Cross-Origin-Opener-Policy"] == "same-origin"
            assert json.loads(response.read())["sha"] == \
                "86b5e0934494bd15c9632b12f734a8a67f723594"
        assert server.connections == 1, "the keep-alive connection was not reused"
        first = server.requests[0].decode()
        assert first.startswith("GET /api/models/bert-base-uncased HTTP/1.1\r\n")
        assert f"\r\nHost: 127.0.0.1:{server.port}" in first
        assert "\r\nUser-Agent: wlock-test" in first


def test_a_chunked_body_with_extensions_and_trailers(wire: Wire) -> None:
    with Scripted([
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5;name=value\r\nhello\r\n7\r\n, world\r\n0\r\nX-Trailer: yes\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    ]) as server:
        assert _get(wire, server.url()) == (200, b"hello, world")
        assert _get(wire, server.url()) == (200, b"ok")
        assert server.connections == 1, "the chunked body was not read to its end"


def test_a_body_without_a_length_ends_with_the_connection(wire: Wire) -> None:
    with Scripted([b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it",
                   b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"]) as server:
        assert _get(wire, server.url()) == (200, b"all of it")
        assert _get(wire, server.url()) == (200, b"ok")
        assert server.connections == 2, "a connection the server closed was used again"


def test_interim_answers_are_skipped(wire: Wire) -> None:
    with Scripted([b"HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\n"
                   b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nbody"]) as server:
        assert _get(wire, server.url()) == (200, b"body")


def test_repeated_and_folded_header_fields(wire: Wire) -> None:
    answer = (b"HTTP/1.1 429 Too Many Requests\r\nX-Error-Code: A\r\nx-error-code: B\r\n"
              b"Retry-After:\t 7\r\nX-Long: one\r\n two\r\nContent-Length: 0\r\n\r\n")
    with Scripted([answer]) as server, wire.get(server.url(), {}) as response:
        assert response.status_code == 429
        assert response.headers.get("X-Error-Code") == "A, B"
        assert response.headers.get("retry-after") == "7"
        assert response.headers.get("X-Long") == "one two"
        assert "x-long" in response.headers and "Absent" not in response.headers
        assert response.read() == b""


@pytest.mark.parametrize("answer", [
    b"SSH-2.0-OpenSSH_9.6\r\n\r\n",  # not HTTP at all
    b"HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 1, 2\r\n\r\nx",  # two lengths: which?
    b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
    b"HTTP/1.1 200 OK\r\n" + b"X: " + b"y" * 70_000 + b"\r\n\r\n",  # a head past MAX_HEAD
    b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",  # then the connection closes
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
    # What int() would read as a number: a negative or prefixed chunk size, a superscript.
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\nhello\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n",
    "HTTP/1.1 200 OK\r\nContent-Length: 1\u00b2\r\n\r\nx".encode("latin-1"),
    "HTTP/1.1 2\u00b200 OK\r\nContent-Length: 0\r\n\r\n".encode("latin-1"),
    b"HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n",
])
def test_what_is_not_a_complete_answer_is_a_cut(wire: Wire, answer: bytes) -> None:
    with Scripted([answer]) as server:
        with pytest.raises(WireError) as caught:
            _get(wire, server.url())
        assert caught.value.kind == "cut"


def test_a_silent_server_is_a_timeout() -> None:
    wire = Wire(ssl.create_default_context(), connect_timeout=5, read_timeout=0.3,
                user_agent="wlock-test")
    try:
        with Scripted([None]) as server, pytest.raises(WireError) as caught:
            _get(wire, server.url())
        assert caught.value.kind == "timeout"
    finally:
        wire.close()


@pytest.mark.parametrize("url, headers", [
    ("/file\r\nX-Smuggled: 1", {}),
    ("/file", {"Range": "bytes=0-1\r\nX-Smuggled: 1"}),
    ("/file", {"Authorization": "Bearer a\nb"}),
])
def test_a_request_that_would_smuggle_another_is_not_sent(
    wire: Wire, url: str, headers: dict[str, str]
) -> None:
    with Scripted([b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"]) as server:
        with pytest.raises(WireError):
            _get(wire, f"http://127.0.0.1:{server.port}{url}", headers)
        assert server.requests == []


def test_a_non_ascii_path_goes_out_percent_encoded(wire: Wire) -> None:
    with Scripted([b"HTTP/1.1 204 No Content\r\n\r\n"]) as server:
        assert _get(wire, server.url("/café.json")) == (204, b"")
        assert server.requests[0].startswith(b"GET /caf%C3%A9.json HTTP/1.1\r\n")


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return cert, key


def test_https_with_the_callers_context(certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    serving = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    serving.load_cert_chain(cert, key)
    trusting = ssl.create_default_context(cafile=str(cert))
    default = ssl.create_default_context()
    with Scripted([b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecret"] * 2,
                  tls=serving) as server:
        wire = Wire(trusting, connect_timeout=5, read_timeout=5, user_agent="wlock-test")
        try:
            assert _get(wire, server.url()) == (200, b"secret")
        finally:
            wire.close()
        # A certificate the caller's context does not trust: refused at the connect.
        wire = Wire(default, connect_timeout=5, read_timeout=5, user_agent="wlock-test")
        try:
            with pytest.raises(WireError) as caught:
                _get(wire, server.url())
            assert caught.value.kind == "connect"
            assert "CERTIFICATE_VERIFY_FAILED" in str(caught.value)
        finally:
            wire.close()


def test_a_context_made_on_demand_is_made_once_and_only_for_tls(
    certificate: tuple[Path, Path],
) -> None:
    """The sync passes what makes its TLS context (loading the CA bundle takes 30-50 ms):
    plain http never asks for it, and TLS connections ask once per connection made."""
    cert, key = certificate
    serving = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    serving.load_cert_chain(cert, key)
    made: list[ssl.SSLContext] = []

    def make() -> ssl.SSLContext:
        made.append(ssl.create_default_context(cafile=str(cert)))
        return made[-1]

    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    wire = Wire(make, connect_timeout=5, read_timeout=5, user_agent="wlock-test")
    try:
        with Scripted([ok] * 2) as plain:
            assert _get(wire, plain.url()) == (200, b"ok")
            assert _get(wire, plain.url()) == (200, b"ok")
        assert made == []
        with Scripted([ok] * 2, tls=serving) as secure:
            assert _get(wire, secure.url()) == (200, b"ok")
            assert _get(wire, secure.url()) == (200, b"ok")  # the same kept-alive connection
        assert len(made) == 1
    finally:
        wire.close()
