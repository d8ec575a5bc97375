"""A real OCI registry for the tests: Debian's `docker-registry` (CNCF distribution 2.8) on
loopback, its storage in a folder of the test's, its access log kept (what was uploaded is
counted from it); and Debian's `skopeo`, an independent client, to inspect and copy what
wlock pushed. `.ci/run` installs both (apt)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

BINARY = "docker-registry"


@dataclass
class Registry:
    address: str  # 127.0.0.1:PORT
    storage: Path
    log: Path

    def url(self, namespace: str) -> str:
        """What wlock is given: plain HTTP, asked for by name (`oci+http://`)."""
        return f"oci+http://{self.address}/{namespace}"

    def requests(self, method: str, part: str) -> int:
        """How many `method` requests whose path holds `part` the registry logged."""
        text = self.log.read_text(errors="replace")
        return sum(1 for line in text.splitlines()
                   if f'"{method} /v2/' in line and part in line)

    def skopeo(self, *args: str) -> str:
        done = subprocess.run(["skopeo", *args], capture_output=True, text=True, timeout=120,
                              check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def inspect(self, reference: str) -> dict[str, object]:
        raw = self.skopeo("inspect", "--raw", "--tls-verify=false",
                          f"docker://{self.address}/{reference}")
        document: dict[str, object] = json.loads(raw)
        return document


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def registry(folder: Path, user: tuple[str, str] | None = None) -> Iterator[Registry]:
    """The registry, anonymous, or with basic auth for `user` (name, password: an htpasswd
    file of bcrypt hashes, as distribution reads it)."""
    if shutil.which(BINARY) is None or shutil.which("skopeo") is None:
        pytest.fail("docker-registry and skopeo are needed (Debian: apt-get install "
                    "docker-registry skopeo; .ci/run installs them)")
    folder.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    config = folder / "config.yml"
    config.write_text(
        "version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: false\n"
        f"storage:\n  filesystem:\n    rootdirectory: {folder / 'data'}\n"
        f"  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n")
    if user is not None:
        import bcrypt

        (folder / "htpasswd").write_text(
            f"{user[0]}:{bcrypt.hashpw(user[1].encode(), bcrypt.gensalt()).decode()}\n")
        with config.open("a") as f:
            f.write(f"auth:\n  htpasswd:\n    realm: wlock-tests\n"
                    f"    path: {folder / 'htpasswd'}\n")
    log = folder / "registry.log"
    with log.open("wb") as out:
        process = subprocess.Popen([BINARY, "serve", str(config)], stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(log.read_text()) from None
                time.sleep(0.05)
        yield Registry(f"127.0.0.1:{port}", folder / "data", log)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
