"""`wlock serve`: one node's cache as the Hub for the others, judged by `wlock sync` and by
huggingface_hub's own snapshot_download and hf_hub_download."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx2
import pytest
from huggingface_hub import hf_hub_download, snapshot_download

from tests.conftest import Hub, default_signals, run_wlock, write_project
from wlock.lock.lockfile import read_lock
from wlock.models import LockedRepo

BIG = 12 * 1024 * 1024  # through hf_transfer, with Range requests


@contextmanager
def serving(project: Path, cache: Path, *extra: str, env: dict[str, str] | None = None,
            ) -> Iterator[tuple[str, dict[str, str]]]:
    """`wlock serve` on a free port: yields its endpoint, and a dict that holds its stderr
    once it has stopped."""
    output: dict[str, str] = {}
    proc = subprocess.Popen(
        [sys.executable, "-m", "wlock", "serve", "--port", "0", "--cache-dir", str(cache),
         *extra], cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **(env or {})}, preexec_fn=default_signals)
    try:
        assert proc.stdout is not None
        endpoint = proc.stdout.readline().strip()
        assert endpoint.startswith("http://127.0.0.1:"), proc.communicate(timeout=30)
        yield endpoint, output
    finally:
        proc.send_signal(signal.SIGINT)
        output["stderr"] = proc.communicate(timeout=30)[1]


@dataclass
class Node:
    project: Path
    cache: Path  # holds the project's lock, synced

    def entry(self, kind: str) -> LockedRepo:
        return next(r for r in read_lock(self.project / "weights.lock").repos
                    if r.kind == kind)


@pytest.fixture
def node(hub: Hub, tmp_path: Path) -> Node:
    """A project and a node's cache holding its lock: a model with a large file and small
    ones, and a dataset."""
    repo_id = hub.unique_id("served")
    hub.builder.commit("model", repo_id, {
        "model.safetensors": os.urandom(BIG), "config.json": b'{"served": true}\n',
        "nested/vocab.txt": os.urandom(3000), "empty.txt": b"",
    })
    project = write_project(tmp_path / "project", f'[[model]]\nid = "{repo_id}"\n\n'
                            '[[dataset]]\nid = "acme/tiny-squad"\nref = "v1.0"\n')
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    cache = tmp_path / "node1"
    assert run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                     cwd=project).code == 0
    return Node(project, cache)


def test_a_nodes_cache_feeds_wlock_sync_and_huggingface_hub(
    hub: Hub, tmp_path: Path, node: Node
) -> None:
    project, cache, model = node.project, node.cache, node.entry("model")
    with serving(project, cache) as (endpoint, _):
        hub.process.reset_stats()
        other = tmp_path / "node2"
        result = run_wlock("sync", "--endpoint", endpoint, "--cache-dir", str(other),
                           cwd=project)
        assert result.code == 0, result.stderr
        assert run_wlock("check", "--cache-dir", str(other), cwd=project).code == 0
        # huggingface_hub, by branch and by commit, against the served endpoint.
        folder = snapshot_download(model.id, revision="main", endpoint=endpoint,
                                   cache_dir=tmp_path / "hf")
        for f in model.files:
            data = (Path(folder) / f.path).read_bytes()
            digest = hashlib.sha256(data).hexdigest() if f.sha256 else \
                hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()
            assert digest == f.etag, f.path
        path = hf_hub_download("acme/tiny-squad", "README.md", repo_type="dataset",
                               revision="v1.0", endpoint=endpoint, cache_dir=tmp_path / "hf2")
        assert Path(path).read_bytes()
    assert hub.process.stats()["requests"]["hub"] == 0  # nothing came from the Hub


def test_what_is_not_locked_or_not_complete_is_a_404_with_the_hubs_headers(
    hub: Hub, tmp_path: Path, node: Node
) -> None:
    project, cache = node.project, node.cache
    model, dataset = node.entry("model"), node.entry("dataset")
    # The dataset loses a blob: it is not served at all, and the serve output says why.
    blob = next((cache / f"datasets--{dataset.id.replace('/', '--')}" / "blobs").iterdir())
    blob.unlink()
    with serving(project, cache) as (endpoint, output), \
            httpx2.Client(base_url=endpoint) as client:
        missing = client.get(f"/api/datasets/{dataset.id}/revision/{dataset.revision}")
        assert missing.status_code == 404
        assert missing.headers["X-Error-Code"] == "RepoNotFound"
        other = client.get(f"/api/models/{model.id}/revision/{'0' * 40}")
        assert other.status_code == 404
        assert other.headers["X-Error-Code"] == "RevisionNotFound"
        unlocked = client.head(f"/{model.id}/resolve/{model.revision}/not-locked.txt")
        assert unlocked.status_code == 404
        assert unlocked.headers["X-Error-Code"] == "EntryNotFound"
        faults = client.post("/_emulator/faults", json={"rules": []})
        assert faults.status_code == 405  # no control routes on a real server
        served = client.get(f"/api/models/{model.id}/revision/{model.revision}")
        assert served.status_code == 200 and served.json()["sha"] == model.revision
        shard = next(f for f in model.files if f.size == BIG)
        ranged = client.get(f"/{model.id}/resolve/{model.revision}/{shard.path}",
                            follow_redirects=True, headers={"Range": "bytes=10-19"})
        assert ranged.status_code == 206 and len(ranged.content) == 10
    assert f"not served: dataset {dataset.id} @ {dataset.revision[:7]}: 1 file(s)" \
        in output["stderr"]


def test_a_required_token_guards_every_byte(
    hub: Hub, tmp_path: Path, node: Node
) -> None:
    project, cache = node.project, node.cache
    secret = "serve-secret-42"
    with serving(project, cache, "--require-token",
                 env={"WLOCK_SERVE_TOKEN": secret}) as (endpoint, _):
        refused = run_wlock("sync", "--endpoint", endpoint, "--cache-dir",
                            str(tmp_path / "n2"), cwd=project)
        assert refused.code == 5 and secret not in refused.stderr
        with httpx2.Client(base_url=endpoint) as client:
            model = node.entry("model")
            shard = next(f for f in model.files if f.size == BIG)
            assert client.head(f"/{model.id}/resolve/{model.revision}/{shard.path}"
                               ).status_code == 401
            signed = client.head(f"/{model.id}/resolve/{model.revision}/{shard.path}",
                                 headers={"Authorization": f"Bearer {secret}"})
            cdn = signed.headers["Location"]
            assert secret not in cdn
            assert httpx2.get(cdn).status_code == 200  # signed: no token to the CDN
            assert httpx2.get(cdn.replace("Signature=", "Signature=0")).status_code == 403
            assert httpx2.get(cdn.split("?")[0]).status_code == 403
        accepted = run_wlock("sync", "--endpoint", endpoint, "--cache-dir",
                             str(tmp_path / "n3"), cwd=project, env={"HF_TOKEN": secret})
        assert accepted.code == 0, accepted.stderr
        assert secret not in accepted.stderr + accepted.stdout


@pytest.mark.parametrize("size", ["small", "large"])
def test_a_blob_that_rots_while_served_is_never_sent_whole(
    hub: Hub, tmp_path: Path, node: Node, size: str
) -> None:
    """Issue 28: serve verified the cache once, at start; a blob overwritten afterwards was
    served as it was, and snapshot_download (which verifies nothing) kept the wrong bytes.
    Now a whole file is hashed as it streams and cut short on a mismatch; a range comes only
    from a blob verified as it is now; the blob is refused until it is replaced."""
    model = node.entry("model")
    name = "config.json" if size == "small" else "model.safetensors"
    f = next(x for x in model.files if x.path == name)
    blob = next(node.cache.glob(f"models--*/blobs/{f.etag}"))
    with serving(node.project, node.cache) as (endpoint, output):
        # The bytes change under the server, same size (bit rot, or a careless overwrite).
        data = bytearray(blob.read_bytes())
        data[len(data) // 2] ^= 0xFF
        blob.chmod(0o644)
        blob.write_bytes(bytes(data))
        other = tmp_path / "hf-node2"
        with pytest.raises(Exception) as failed:  # whichever error huggingface_hub raises
            hf_hub_download(model.id, name, revision=model.revision, endpoint=endpoint,
                            cache_dir=other)
        assert failed.value is not None
        # Nothing with the wrong bytes was kept under the file's name.
        kept = list(other.rglob(name)) if other.exists() else []
        assert all(hashlib.sha256(p.read_bytes()).hexdigest() != hashlib.sha256(
            bytes(data)).hexdigest() for p in kept)
        assert not list(other.glob(f"models--*/blobs/{f.etag}"))
        # wlock sync on the other node refuses it too (and says which file).
        synced = run_wlock("sync", "--endpoint", endpoint, "--cache-dir",
                           str(tmp_path / "node3"), cwd=node.project)
        assert synced.code != 0 and name in synced.stderr, synced.stderr
        # Repaired on this node, it is served again.
        assert run_wlock("sync", "--verify", "--endpoint", hub.endpoint, "--cache-dir",
                         str(node.cache), cwd=node.project).code == 0
        path = hf_hub_download(model.id, name, revision=model.revision, endpoint=endpoint,
                               cache_dir=tmp_path / "hf-node4")
        got = Path(path).read_bytes()
        assert (hashlib.sha256(got).hexdigest() if f.sha256 else hashlib.sha1(
            b"blob %d\0" % len(got) + got, usedforsecurity=False).hexdigest()) == f.etag
    assert f"blob {blob} is not served" in output["stderr"], output["stderr"]


def test_a_range_is_never_served_from_a_blob_rewritten_after_it_was_verified(
    tmp_path: Path, node: Node
) -> None:
    """Issue 38: a range (how hf_transfer reads) comes only from a blob verified as it is
    now. Verified at start and served, then rewritten in place (same size), the blob's
    next range is refused, never sent with the wrong bytes."""
    import urllib.error
    import urllib.request

    model = node.entry("model")
    f = next(x for x in model.files if x.path == "model.safetensors")
    blob = next(node.cache.glob(f"models--*/blobs/{f.etag}"))
    good = blob.read_bytes()
    with serving(node.project, node.cache) as (endpoint, _):
        url = f"{endpoint}/{model.id}/resolve/{model.revision}/model.safetensors"

        def get_range() -> tuple[int, bytes]:
            request = urllib.request.Request(url, headers={"Range": "bytes=100-199"})
            try:
                with urllib.request.urlopen(request, timeout=30) as answer:
                    return answer.status, answer.read()
            except urllib.error.HTTPError as e:
                return e.code, b""

        assert get_range() == (206, good[100:200])  # verified, and served
        data = bytearray(good)
        data[150] ^= 0xFF  # inside the range asked for
        blob.chmod(0o644)
        with open(blob, "r+b") as out:  # in place: the same inode, the same size
            out.write(bytes(data))
        status, body = get_range()
        assert status == 404 and body != bytes(data[100:200]), status


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_a_signal_ends_serve_while_a_client_stalls_mid_file(node: Node, signame: str) -> None:
    """A client that asked for the large file and reads nothing (the server's send waits on
    it): Ctrl-C or SIGTERM ends `serve` within seconds, exit 130 / 143, no traceback (issue
    59: every command that waits)."""
    import socket
    from urllib.parse import urlsplit

    model = node.entry("model")
    proc = subprocess.Popen(
        [sys.executable, "-m", "wlock", "serve", "--port", "0", "--cache-dir",
         str(node.cache)], cwd=node.project, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, preexec_fn=default_signals)
    try:
        assert proc.stdout is not None
        endpoint = proc.stdout.readline().strip()
        where = urlsplit(endpoint)
        stalled = socket.create_connection((where.hostname, where.port))
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.sendall(f"GET /{model.id}/resolve/{model.revision}/model.safetensors HTTP/1.1"
                        f"\r\nHost: {where.netloc}\r\n\r\n".encode())
        assert stalled.recv(1)  # the answer has begun; the rest waits on this reader
        time.sleep(1.0)
        asked = time.monotonic()
        proc.send_signal(getattr(signal, signame))
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - asked
        stalled.close()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == (130 if signame == "SIGINT" else 143), err
    assert "Traceback" not in err, err
    assert took < 10, (took, err)  # a stalled reader holds it no longer than the signal
