"""Small files go through libcurl (wlock.cache.engines.curl): what it must keep of what httpx2 gave
them. A user's proxy is used (as the environment says, urllib's reading of it); connections
are kept alive; a keep-alive connection the server closed while idle costs nothing but a
reconnect; a body cut short is an error, not a short file."""

from __future__ import annotations

import http.server
import os
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Hub, run_wlock, write_project
from wlock.cache.engines.curl import Answer, Curl, WireError
from wlock.lock.lockfile import read_lock


class _Proxy(http.server.ThreadingHTTPServer):
    """A forward HTTP proxy on loopback that relays GETs (absolute URIs) and counts them."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _ProxyHandler)
        self.seen: list[str] = []


class _ProxyHandler(http.server.BaseHTTPRequestHandler):
    server: _Proxy

    def do_GET(self) -> None:
        self.server.seen.append(self.path)
        request = urllib.request.Request(self.path, headers={
            k: v for k, v in self.headers.items() if k.lower() not in ("host", "proxy-connection")})
        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), _NoRedirect())
        try:
            upstream = opener.open(request, timeout=10)
        except urllib.error.HTTPError as e:
            upstream = e
        body = upstream.read()
        self.send_response(upstream.status if hasattr(upstream, "status") else upstream.code)
        for key, value in upstream.headers.items():
            if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


@pytest.fixture
def proxy() -> Iterator[_Proxy]:
    server = _Proxy()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def small_project(hub: Hub, tmp_path: Path) -> tuple[Path, str]:
    repo_id = hub.unique_id("wire")
    hub.builder.commit("model", repo_id, {
        **{f"cfg/{n:02d}.json": b'{"n": %d}\n' % n for n in range(12)},
        "tokens.parquet": os.urandom(3000),  # LFS: through the CDN
    })
    project = write_project(tmp_path / "p", f'[[model]]\nid = "{repo_id}"\n')
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    return project, repo_id


def _sync_with_proxy(hub: Hub, project: Path, cache: Path, proxy: _Proxy,
                     no_proxy: str) -> None:
    address = f"http://127.0.0.1:{proxy.server_address[1]}"
    result = run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                       cwd=project, env={"HTTP_PROXY": address, "NO_PROXY": no_proxy})
    assert result.code == 0, result.stderr


def test_small_files_go_through_the_users_proxy(
    hub: Hub, tmp_path: Path, small_project: tuple[Path, str], proxy: _Proxy
) -> None:
    project, _ = small_project
    _sync_with_proxy(hub, project, tmp_path / "c", proxy, no_proxy="")
    files = [f.path for f in read_lock(project / "weights.lock").repos[0].files]
    through = " ".join(proxy.seen)
    missing = [path for path in files if path.rsplit("/", 1)[-1] not in through]
    assert not missing, f"fetched around the proxy: {missing}"
    assert run_wlock("check", "--cache-dir", str(tmp_path / "c"), cwd=project).code == 0


def test_no_proxy_bypasses_it(
    hub: Hub, tmp_path: Path, small_project: tuple[Path, str], proxy: _Proxy
) -> None:
    project, _ = small_project
    _sync_with_proxy(hub, project, tmp_path / "c", proxy, no_proxy="127.0.0.1")
    assert proxy.seen == []


def test_a_proxy_that_is_down_is_a_network_error(
    hub: Hub, tmp_path: Path, small_project: tuple[Path, str]
) -> None:
    project, _ = small_project
    result = run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(tmp_path / "c"),
                       "--timeout", "3", cwd=project,
                       env={"HTTP_PROXY": "http://127.0.0.1:9", "NO_PROXY": ""})
    assert result.code == 5, result.stderr


def _curl() -> Curl:
    return Curl(connect_timeout=5, read_timeout=5, user_agent="wlock-test")


def _resolve(hub: Hub, repo_id: str, path: str) -> str:
    return f"{hub.endpoint}/{repo_id}/resolve/main/{path}"


def _get(curl: Curl, url: str) -> tuple[Answer, bytes, int]:
    """The answer, its body, and the connections libcurl opened for it (0: one reused)."""
    import pycurl

    body = bytearray()
    answer = curl.get(url, {}, lambda status, headers: body.extend)
    return answer, bytes(body), curl._handle()[0].getinfo(pycurl.NUM_CONNECTS)


def test_connections_are_kept_alive_and_a_closed_one_is_reopened(
    hub: Hub, small_project: tuple[Path, str]
) -> None:
    _, repo_id = small_project
    curl = _curl()
    try:
        url = _resolve(hub, repo_id, "cfg/00.json")
        answer, _, opened = _get(curl, url)
        assert answer.status_code in (302, 307) and opened == 1
        answer, _, opened = _get(curl, url)
        assert opened == 0, "a second connection where the first was free"
        # The server closes the idle connection (as a keep-alive timeout does): the next
        # request reconnects once, without an error.
        hub.process.faults({"action": "drop", "listener": "hub", "match": "/cfg/00.json",
                            "times": 1})
        answer, _, opened = _get(curl, url)
        assert answer.status_code in (302, 307) and opened == 1
    finally:
        curl.close()
        hub.process.faults()


def test_a_body_cut_short_is_an_error_not_a_short_file(
    hub: Hub, small_project: tuple[Path, str]
) -> None:
    _, repo_id = small_project
    hub.process.faults({"action": "truncate", "listener": "cdn", "match": "/", "bytes": 100})
    curl = _curl()
    try:
        answer, _, _ = _get(curl, _resolve(hub, repo_id, "tokens.parquet"))
        location = answer.headers["Location"]
        assert location is not None
        with pytest.raises(WireError) as caught:
            _get(curl, location)
        assert caught.value.kind == "cut"
    finally:
        curl.close()
        hub.process.faults()


def test_nothing_listening_is_a_connect_error() -> None:
    curl = _curl()
    with pytest.raises(WireError) as caught:
        _get(curl, "http://127.0.0.1:9/x")
    assert caught.value.kind == "connect"
