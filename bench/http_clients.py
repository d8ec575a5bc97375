"""CPU per request of the HTTP clients a sync could fetch small files with, on one emulator.

    python bench/http_clients.py [--requests 2000] [--concurrency 32] [--latency-ms 0]

Each client GETs the same `--requests` small files (1-2 KiB, kept in git, at the URL the Hub
serves them from after its first redirect) with `--concurrency` in flight, keep-alive on,
and reads every body. CPU is this process's user + system time (the emulator runs in a
process of its own), per request; wall time is printed beside it. The candidates:

(wlock's own HTTP/1.1 reader, retired by issue 38, measured 0.139 ms in the same run as the
others below: src/wlock/cache/engines/curl.py keeps the table.)
- `wlock`: wlock.cache.engines.curl, the client a sync uses (pycurl easy handles, its
  callbacks);
- `http.client`: the standard library, a connection per thread;
- `urllib3`: urllib3 2.x, one PoolManager shared by the threads;
- `pycurl-easy`: libcurl through pycurl, one easy handle (and its connection cache) per
  thread, `perform()` with the GIL released;
- `pycurl-multi`: libcurl's multi interface, one thread driving every transfer;
- `niquests`: a Session per thread (not in the bench extra: its urllib3-future replaces the
  urllib3 the row above measures; run `--clients niquests` from a venv of its own:
  `pip install -e . niquests`);
- `aiohttp`: one asyncio thread, a ClientSession with a connection limit.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from io import BytesIO
from pathlib import Path

from _common import machine

from wlock.hubserver.process import HubProcess
from wlock.hubserver.store import StoreBuilder


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def threaded(make: Callable[[], Callable[[str], bytes]], urls: list[str], n: int) -> int:
    local = threading.local()

    def one(url: str) -> int:
        get = getattr(local, "get", None)
        if get is None:
            get = local.get = make()
        return len(get(url))

    with ThreadPoolExecutor(n) as pool:
        return sum(pool.map(one, urls))


def run_wlock(urls: list[str], n: int) -> int:
    """wlock.cache.engines.curl as a sync uses it: pycurl easy handles, its callbacks and checks."""
    from wlock.cache.engines.curl import Curl

    curl = Curl(connect_timeout=10, read_timeout=30, user_agent="bench")

    def make() -> Callable[[str], bytes]:
        def get(url: str) -> bytes:
            body = bytearray()
            curl.get(url, {"Accept-Encoding": "identity"}, lambda status, headers: body.extend,
                     time.monotonic() + 60)
            return bytes(body)
        return get

    try:
        return threaded(make, urls, n)
    finally:
        curl.close()


def run_http_client(urls: list[str], n: int) -> int:
    import http.client
    from urllib.parse import urlsplit

    def make() -> Callable[[str], bytes]:
        parts = urlsplit(urls[0])
        connection = http.client.HTTPConnection(parts.hostname or "", parts.port)

        def get(url: str) -> bytes:
            connection.request("GET", urlsplit(url).path, headers={
                "Accept-Encoding": "identity"})
            return connection.getresponse().read()
        return get

    return threaded(make, urls, n)


def run_urllib3(urls: list[str], n: int) -> int:
    import urllib3

    pool = urllib3.PoolManager(maxsize=n, retries=False)

    def make() -> Callable[[str], bytes]:
        def get(url: str) -> bytes:
            return pool.request("GET", url, headers={"Accept-Encoding": "identity"},
                                preload_content=True, redirect=False).data
        return get

    return threaded(make, urls, n)


def run_pycurl_easy(urls: list[str], n: int) -> int:
    import pycurl

    def make() -> Callable[[str], bytes]:
        curl = pycurl.Curl()
        curl.setopt(pycurl.HTTPHEADER, ["Accept-Encoding: identity"])

        def get(url: str) -> bytes:
            body = BytesIO()
            curl.setopt(pycurl.URL, url)
            curl.setopt(pycurl.WRITEDATA, body)
            curl.perform()
            return body.getvalue()
        return get

    return threaded(make, urls, n)


def run_pycurl_multi(urls: list[str], n: int) -> int:
    import pycurl

    multi = pycurl.CurlMulti()
    free = []
    for _ in range(n):
        curl = pycurl.Curl()
        curl.setopt(pycurl.HTTPHEADER, ["Accept-Encoding: identity"])
        free.append(curl)
    todo = list(reversed(urls))
    total = 0
    bodies: dict[int, BytesIO] = {}

    def start(curl: pycurl.Curl) -> None:
        body = BytesIO()
        bodies[id(curl)] = body
        curl.setopt(pycurl.URL, todo.pop())
        curl.setopt(pycurl.WRITEDATA, body)
        multi.add_handle(curl)

    while todo and free:
        start(free.pop())
    active = len(bodies)
    while active:
        while multi.perform()[0] == pycurl.E_CALL_MULTI_PERFORM:
            pass
        _, done, failed = multi.info_read()
        for curl in done:
            multi.remove_handle(curl)
            total += len(bodies.pop(id(curl)).getvalue())
            active -= 1
            if todo:
                start(curl)
                active += 1
        if failed:
            raise RuntimeError(failed)
        multi.select(1.0)
    return total


def run_niquests(urls: list[str], n: int) -> int:
    import niquests

    def make() -> Callable[[str], bytes]:
        session = niquests.Session()

        def get(url: str) -> bytes:
            return session.get(url, headers={"Accept-Encoding": "identity"},
                               allow_redirects=False).content or b""
        return get

    return threaded(make, urls, n)


def run_aiohttp(urls: list[str], n: int) -> int:
    import aiohttp

    async def main() -> int:
        limit = asyncio.Semaphore(n)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=n),
                                         auto_decompress=False) as session:
            async def one(url: str) -> int:
                async with limit, session.get(url, allow_redirects=False) as response:
                    return len(await response.read())
            return sum(await asyncio.gather(*(one(u) for u in urls)))

    return asyncio.run(main())


CLIENTS = {"wlock": run_wlock, "http.client": run_http_client, "urllib3": run_urllib3,
           "pycurl-easy": run_pycurl_easy, "pycurl-multi": run_pycurl_multi,
           "niquests": run_niquests, "aiohttp": run_aiohttp}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--latency-ms", type=float, default=0)
    parser.add_argument("--clients", default=",".join(CLIENTS))
    args = parser.parse_args()
    print(f"machine: {machine()}")
    with tempfile.TemporaryDirectory(prefix="wlock-bench-") as tmp:
        root = Path(tmp)
        files = {f"shard/{n:05d}.json": os.urandom(1024 + n % 997) for n in range(500)}
        commit = StoreBuilder(root / "store").commit("model", "bench/http", files, lfs=False)
        with HubProcess(root / "store") as hub:
            if args.latency_ms:
                hub.faults(latency_ms=args.latency_ms)
            names = sorted(files)
            urls = [f"{hub.endpoint}/api/resolve-cache/models/bench/http/{commit}/"
                    f"{names[i % len(names)]}" for i in range(args.requests)]
            expected = sum(len(files[names[i % len(names)]]) for i in range(args.requests))
            print(f"{args.requests} GETs of 1-2 KiB, {args.concurrency} in flight, "
                  f"{args.latency_ms:.0f} ms a request")
            print(f"{'client':<14} {'CPU/request':>12} {'wall':>8}")
            for name in args.clients.split(","):
                before, start = cpu(), time.perf_counter()
                try:
                    got = CLIENTS[name](urls, args.concurrency)
                except ModuleNotFoundError as e:
                    print(f"{name:<14} not installed here ({e.name}; see this script's help)")
                    continue
                wall, spent = time.perf_counter() - start, cpu() - before
                assert got == expected, (name, got, expected)
                print(f"{name:<14} {spent / args.requests * 1000:>9.3f} ms {wall:>7.2f}s")


if __name__ == "__main__":
    main()
