"""Shared fixtures: one Hub emulator process per test session (per xdist worker).

The emulator runs in its own process (hf_transfer holds the GIL; see DESIGN.md) and serves a
store built from fixtures/hub. Tests that need repos of their own write them into that same
store with a StoreBuilder under unique ids; the server notices the change on its next request.
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from wlock.hubserver.fixtures import build_fixture_store
from wlock.hubserver.process import HubProcess
from wlock.hubserver.store import StoreBuilder

# Keras (the formats corpus) runs on the torch the suite already has, not TensorFlow.
os.environ.setdefault("KERAS_BACKEND", "torch")

ROOT = Path(__file__).resolve().parents[1]
# Real answers of huggingface.co, copied from ../shared/hub-recordings (see its README.md).
RECORDINGS = ROOT / "fixtures" / "hub-recordings"
GATED_TOKEN = "hf_demo_gated_access"  # granted in fixtures/hub/models/acme/gated-llama

_ids = itertools.count()


def pytest_configure(config: pytest.Config) -> None:
    """wlock's modules byte-compiled once, before any test starts a `wlock` (each of the
    suite's ~2,000 commands compiled them anew, ~40 ms of CPU each, where the environment
    sets PYTHONDONTWRITEBYTECODE, as CI's does): what `pip install` of the wheel does for a
    user. Where the source changes later, Python sees it and compiles it again."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        import compileall

        compileall.compile_dir(ROOT / "src" / "wlock", quiet=2)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test kept off the oldest stack says why (`newest_only("...")`): the reason is what
    docs/contributing/tests.md and a reviewer hold it to."""
    for item in items:
        for mark in item.iter_markers("newest_only"):
            if not (mark.args and isinstance(mark.args[0], str) and mark.args[0].strip()):
                raise pytest.UsageError(f"{item.nodeid}: newest_only needs its reason")


@pytest.fixture(autouse=True)
def _isolated_hf_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test may see the developer's token, cache or endpoint, or reach huggingface.co."""
    for name in ("HF_TOKEN", "HF_ENDPOINT", "HF_HUB_CACHE", "WLOCK_DEBUG", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")


def needs(*modules: str) -> pytest.MarkDecorator:
    """A module's tests skipped where a library is missing, found without importing it. A
    module-level `pytest.importorskip` imports the library in every xdist worker as it
    collects (sentence-transformers: 4 s of CPU, keras and onnxruntime 2 s), though only the
    workers that run the module's tests use it (CI's time, issue 59)."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    return pytest.mark.skipif(bool(missing), reason=f"not installed: {', '.join(missing)}")


@dataclass
class Hub:
    process: HubProcess
    builder: StoreBuilder

    @property
    def endpoint(self) -> str:
        return self.process.endpoint

    def unique_id(self, stem: str) -> str:
        return f"test/{stem}-{os.getpid()}-{next(_ids)}"


@pytest.fixture(scope="session")
def _hub_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    store = tmp_path_factory.mktemp("hub-store")
    builder = build_fixture_store(store)
    with HubProcess(store) as process:
        yield Hub(process=process, builder=builder)


@pytest.fixture
def hub(_hub_session: Hub) -> Iterator[Hub]:
    """The session's emulator, with no faults and fresh counters for this test."""
    _hub_session.process.faults()
    _hub_session.process.reset_stats()
    yield _hub_session
    _hub_session.process.faults()


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str


def default_signals() -> None:
    """For child processes: every signal at its default, as a terminal gives them. pytest
    started as a background job of a non-interactive shell has SIGINT ignored, and under
    `nohup` SIGHUP: a child would inherit that (and a Ctrl-C test, or one that a process is
    never signalled, would then test nothing)."""
    for sig in signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP}:
        with contextlib.suppress(OSError, ValueError):
            signal.signal(sig, signal.SIG_DFL)


def run_wlock(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
              timeout: float = 120) -> Result:
    """The real command line, in a child process, as a user or CI would run it."""
    proc = subprocess.run(
        [sys.executable, "-m", "wlock", *args], cwd=cwd, capture_output=True, text=True,
        env={**os.environ, **(env or {})}, timeout=timeout, preexec_fn=default_signals,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def kill_9_mid_sync(args: tuple[str, ...], cwd: Path, progress: Callable[[], int],
                    at_least: int, what: str) -> None:
    """Start `wlock *args` in `cwd` and kill -9 it once `progress()` (bytes the emulator
    served it) reaches `at_least`; fails naming `what` if that does not happen within 60 s.
    The process is gone on return, either way."""
    proc = subprocess.Popen([sys.executable, "-m", "wlock", *args], cwd=cwd,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and progress() < at_least:
            time.sleep(0.05)
        assert progress() >= at_least, f"{what} never started"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)


@contextmanager
def tmpfs(mount: Path, size: str) -> Iterator[Path]:
    """A real small filesystem at `mount` (a full disk, or one to remount read-only).
    Needs root, as CI has; skips with the reason where mounting is not allowed."""
    mount.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
                          capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        # A killed sync's workers may still hold a file open for a moment after it exits.
        for _ in range(50):
            if subprocess.run(["umount", str(mount)], capture_output=True).returncode == 0:
                break
            time.sleep(0.1)
        else:
            subprocess.run(["umount", "-l", str(mount)], check=False)


def read_only(mount: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)


def fill_disk(mount: Path) -> None:
    """Fill the filesystem at `mount` as another program would, to its last block (the
    open itself may find it full already)."""
    try:
        with open(mount / "filler", "wb") as filler:
            while True:
                filler.write(b"\0" * (1024 * 1024))
                filler.flush()
    except OSError:
        pass


def random_weights(size: int) -> bytes:
    """`size` random bytes no scanner takes for a pickle. `wlock lock` scans a file named
    `.bin` (or `.pt`, `.ckpt`, ...) as one when its first byte is a pickle opcode, and about
    1 random file in 200 then reads as a pickle the scanner cannot follow, which the default
    policy refuses (exit 7): a test of something else failing by chance. A first byte that
    is no opcode makes it "not a pickle", as a raw tensor dump is."""
    return b"\0" + os.urandom(size - 1) if size else b""


def write_project(folder: Path, manifest: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "weights.toml").write_text(manifest, encoding="utf-8")
    return folder


def added(hub: Hub, folder: Path, *specs: tuple[str, ...]) -> tuple[Path, Path]:
    """A project in `folder` that adds each spec (`ID`, flags...) and syncs into
    `folder/cache`, each command asserted to exit 0: (project, cache)."""
    project = write_project(folder / "project", "")
    for spec in specs:
        done = run_wlock("add", *spec, "--endpoint", hub.endpoint, cwd=project)
        assert done.code == 0, done.stderr
    cache = folder / "cache"
    synced = run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                       cwd=project)
    assert synced.code == 0, synced.stderr
    return project, cache
