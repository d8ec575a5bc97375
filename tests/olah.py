"""A real Hub mirror on loopback: olah (PyPI `olah`), the open-source pull-through mirror many
teams point HF_ENDPOINT at, in front of the emulator. It runs from a virtualenv of its own
(made once, under the project's `.venv-olah/`): its pins (fastapi, pydantic, its own
huggingface_hub) are not ours, and a mirror is another program on another machine anyway.
Used by tests/integration/test_mirror.py."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv-olah"
OLAH = "olah==0.5.4"


def olah_binary() -> Path:
    """olah-cli from its own virtualenv, installed from PyPI on first use."""
    binary = VENV / "bin" / "olah-cli"
    if not binary.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(VENV / "bin" / "pip"), "install", "-q", OLAH], check=True,
                       timeout=600)
    return binary


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def olah_mirror(upstream: str, block_size: int | None = None) -> Iterator[str]:
    """olah serving `upstream` (http://host:port, the emulator: API and files alike) on a
    port of its own, with an empty cache; yields the mirror's endpoint. `block_size`: its
    cache's blocks (its default: 64 MiB), set through a config file (olah then reads no
    other option)."""
    port = _free_port()
    netloc = upstream.split("://", 1)[1].rstrip("/")
    with tempfile.TemporaryDirectory(prefix="wlock-olah-") as repos:
        log = open(os.path.join(repos, "olah.log"), "w")  # noqa: SIM115 - closed below
        settings = {"host": "127.0.0.1", "port": port, "hf-scheme": "http", "hf-netloc": netloc,
                    "hf-lfs-netloc": netloc, "mirror-scheme": "http",
                    "mirror-netloc": f"127.0.0.1:{port}",
                    "mirror-lfs-netloc": f"127.0.0.1:{port}",
                    "repos-path": os.path.join(repos, "repos")}
        if block_size is None:
            argv = [arg for name, value in settings.items() for arg in (f"--{name}", str(value))]
        else:
            config = os.path.join(repos, "olah.toml")
            with open(config, "w") as f:
                f.write("[basic]\n" + "".join(
                    f"{name} = {value!r}\n".replace("'", '"') for name, value in
                    {**settings, "cache-block-size": block_size}.items()))
            argv = ["--config", config]
        proc = subprocess.Popen([str(olah_binary()), *argv], stdout=log,
                                stderr=subprocess.STDOUT, cwd=repos)  # it writes ./logs/ there
        endpoint = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    urllib.request.urlopen(endpoint + "/", timeout=2).close()
                    break
                except urllib.error.HTTPError:
                    break  # it answers
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        log.flush()
                        raise RuntimeError("olah did not start: "
                                           + Path(log.name).read_text()[-2000:]) from None
                    time.sleep(0.2)
            yield endpoint
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
            log.close()
