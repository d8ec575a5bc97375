"""The emulator's shaped link (issue 27), seen with a plain HTTP client: a response is paced
to the cap, each of several at once is paced on its own, every request pays the delay, and a
reset cuts the body. Only floors are asserted (the shaping sleeps; load only adds time); what
the shaping does to a sync is measured in bench/shaped_link.py."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor

import httpx2

from tests.conftest import Hub

MB = 1_000_000


def test_a_shaped_link_caps_each_response_and_delays_each_request(hub: Hub) -> None:
    repo_id = hub.unique_id("shaped")
    hub.builder.commit("model", repo_id, {"model.safetensors": os.urandom(4 * MB)})
    url = f"{hub.endpoint}/{repo_id}/resolve/main/model.safetensors"

    def get(client: httpx2.Client, start: int, size: int) -> int:
        answer = client.get(url, headers={"Range": f"bytes={start}-{start + size - 1}"})
        assert answer.status_code == 206
        return len(answer.content)

    with httpx2.Client(follow_redirects=True, timeout=60) as client:
        hub.process.faults(link={"mb_per_s": 5, "delay_ms": 100, "listener": "cdn"})
        started = time.monotonic()
        assert get(client, 0, 2 * MB) == 2 * MB
        one = time.monotonic() - started

        def timed(n: int) -> float:
            began = time.monotonic()
            assert get(client, n * MB // 2, MB // 2) == MB // 2
            return time.monotonic() - began

        with ThreadPoolExecutor(4) as pool:
            each = list(pool.map(timed, range(4)))
    # Floors only (the pacing and the delay are sleeps; a loaded machine only adds): the
    # server sleeps after each 64 KiB piece, so the last piece arrives (size - 64 KiB) / rate
    # after the first: 2 MB at 5 MB/s is at least 0.387 s, plus the CDN request's 0.1 s;
    # each of four parallel 0.5 MB responses, paced on its own, 0.087 s plus the delay.
    assert one >= 0.45, one
    assert all(t >= 0.15 for t in each), each
    hub.process.faults(link={"reset_every": 1, "listener": "cdn"})
    with httpx2.Client(follow_redirects=True, timeout=60) as client:
        try:
            body = client.get(url).content
        except httpx2.TransportError:
            body = b""
    assert len(body) < 4 * MB  # cut
