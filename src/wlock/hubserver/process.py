"""Run the emulator in a child process and talk to its control routes.

The tests, the demo and the benchmarks all start it this way: hf_transfer holds the GIL for
a whole download, so the server must never share a process with the downloader.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any


class HubProcess:
    """`with HubProcess(store) as hub:` gives `hub.endpoint`, `hub.faults(...)`, `hub.stats()`."""

    def __init__(
        self, store: Path, *, fixtures: bool = False, verbose: bool = False,
        startup_timeout: float = 30.0,
    ) -> None:
        self.store = store
        self._argv = [sys.executable, "-m", "wlock.hubserver", "--store", str(store)]
        if fixtures:
            self._argv.append("--fixtures")
        if verbose:
            self._argv.append("--verbose")
        self._timeout = startup_timeout
        self._proc: subprocess.Popen[str] | None = None
        self.endpoint = ""
        self.cdn = ""

    def start(self) -> HubProcess:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self._proc = subprocess.Popen(
            self._argv, stdout=subprocess.PIPE, stderr=None, text=True, env=env
        )
        line: list[str] = []
        reader = threading.Thread(
            target=lambda: line.append(self._proc.stdout.readline())  # type: ignore[union-attr]
        )
        reader.start()
        reader.join(self._timeout)
        if not line or not line[0].strip():
            self.stop()
            raise RuntimeError(f"the Hub emulator did not start: {' '.join(self._argv)}")
        ready = json.loads(line[0])
        self.endpoint, self.cdn = ready["endpoint"], ready["cdn"]
        return self

    @property
    def pid(self) -> int | None:
        """The emulator's process id (benchmarks read its CPU time), None before start()."""
        return self._proc.pid if self._proc else None

    def stop(self) -> None:
        if self._proc and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._proc and self._proc.stdout:
            self._proc.stdout.close()

    def __enter__(self) -> HubProcess:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _call(self, method: str, route: str, data: Any = None) -> Any:
        body = json.dumps(data).encode() if data is not None else None
        request = urllib.request.Request(  # noqa: S310 - our own loopback http:// URL
            f"{self.endpoint}/_emulator/{route}", data=body, method=method,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
            return json.loads(response.read())

    def faults(self, *rules: dict[str, Any], latency_ms: float = 0,
               tree_page_size: int = 1000, link: dict[str, Any] | None = None,
               bridge_limit: int | None = None, **more: Any) -> None:
        """Replace the fault configuration (no arguments: no faults). `link` shapes the
        link (wlock.hubserver.faults.Link): {"mb_per_s": 20, "delay_ms": 20}.
        `bridge_limit`: the bridge refuses files above that many bytes (the CAS does not).
        `more`: the other settings of wlock.hubserver.faults (siblings_cap, rate_limits,
        tree_paging, tree_hide)."""
        self._call("POST", "faults", {"rules": list(rules), "latency_ms": latency_ms,
                                      "tree_page_size": tree_page_size, "link": link or {},
                                      "bridge_limit": bridge_limit, **more})

    def stats(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", "stats")
        return result

    def reset_stats(self) -> None:
        self._call("POST", "stats/reset", {})
