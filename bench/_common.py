"""Shared set-up for the benchmarks: a store with generated repos, the emulator, timings."""

from __future__ import annotations

import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

WLOCK = [sys.executable, "-m", "wlock"]


def machine() -> str:
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (f"{platform.machine()}, {os.cpu_count()} cores, {mem:.0f} GiB, "
            f"Python {platform.python_version()}")


def snapshot_download(repo_id: str, cache: str | Path, endpoint: str,
                      repo_type: str = "model") -> list[str]:
    """The competitor's command: huggingface_hub.snapshot_download of `repo_id` into
    `cache`, in a process of its own as a user would run it."""
    code = ("import sys; from huggingface_hub import snapshot_download; "
            "snapshot_download(sys.argv[1], cache_dir=sys.argv[2], endpoint=sys.argv[3], "
            "repo_type=sys.argv[4])")
    return [sys.executable, "-c", code, repo_id, str(cache), endpoint, repo_type]


def random_file(path: Path, size: int) -> Path:
    """Incompressible bytes, written in 16 MiB pieces."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, 16 * 2**20)
            f.write(os.urandom(n))
            left -= n
    return path


# How snapshot_download fetches a Xet store's files: through hf_xet as huggingface_hub 1.0+
# does by default, the same with hf_xet's high-performance mode, or by plain HTTP through the
# bridge (hf_xet turned off, as where it is not installed).
HF_XET_MODES = {
    "hf_xet": {},
    "hf_xet high-perf": {"HF_XET_HIGH_PERFORMANCE": "1"},
    "plain HTTP": {"HF_HUB_DISABLE_XET": "1"},
}


def snapshot_env(home: Path, mode: str = "hf_xet") -> dict[str, str]:
    """The variables snapshot_download runs with in a bench: no progress bars, `home` as its
    HF_HOME (where hf_xet keeps its own caches: a fresh one per contender), and those of
    `mode` (HF_XET_MODES)."""
    return {"HF_HUB_DISABLE_PROGRESS_BARS": "1", "HF_HOME": str(home), **HF_XET_MODES[mode]}


def shards_repo(root: Path, shards: int, shard_mb: int, small: int, *,
                xet: bool = False) -> Path:
    """A store at `root/store` holding model `bench/shards`: `shards` shards of `shard_mb` MiB
    of random bytes plus `small` small JSON files and a config.json. Returns the store. With
    `xet`, its LFS files are on Xet as well (the Hub's CAS, for hf_xet)."""
    from wlock.hubserver.store import StoreBuilder

    files: dict[str, bytes | Path] = {}
    for n in range(shards):
        name = f"model-{n + 1:05d}-of-{shards:05d}.safetensors"
        files[name] = random_file(root / "gen" / name, shard_mb * 2**20)
    for n in range(small):
        files[f"extra/file-{n:03d}.json"] = os.urandom(2048 + n)
    files["config.json"] = b'{"model_type": "bench"}\n'
    StoreBuilder(root / "store", xet=xet).commit("model", "bench/shards", files)
    for generated in (root / "gen").glob("*"):
        generated.unlink()  # the store holds its own copy (or a hard link)
    return root / "store"


def synced_shards(root: Path, shards: int, shard_mb: int, small: int,
                  name: str = "") -> tuple[Path, Path]:
    """`shards_repo` under `root/name`, locked by a project `root/name-project` and synced
    into `root/name-cache` from the emulator, which is stopped again: (project, cache)."""
    from wlock.hubserver.process import HubProcess

    prefix = f"{name}-" if name else ""
    store = shards_repo(root / name if name else root, shards, shard_mb, small)
    project, cache = root / f"{prefix}project", root / f"{prefix}cache"
    project.mkdir()
    (project / "weights.toml").write_text('[[model]]\nid = "bench/shards"\n')
    with HubProcess(store) as hub:
        run([*WLOCK, "lock", "--endpoint", hub.endpoint], cwd=project)
        run([*WLOCK, "sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache)],
            cwd=project)
    return project, cache


def tree_rss(pid: int) -> int:
    """Memory of `pid` and all its descendants now (0 once it is gone): their proportional
    set size (PSS: a shared library's pages counted once across the processes that map
    them, as `smem` does), or their resident size where PSS is not available."""
    total = 0
    try:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                total += sum(int(line.split()[1]) * 1024 for line in f
                             if line.startswith("Pss:"))
        except FileNotFoundError:
            with open(f"/proc/{pid}/status") as f:
                total += sum(int(line.split()[1]) * 1024 for line in f
                             if line.startswith("VmRSS:"))
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                total += sum(tree_rss(int(child)) for child in f.read().split())
    except (OSError, ValueError):
        pass
    return total


def measured(argv: list[str], cwd: Path | None = None, env: dict[str, str] | None = None,
             ) -> tuple[float, int]:
    """Run `argv` like run(); returns (seconds, peak memory of its whole process tree, as
    tree_rss(), sampled every 20 ms: the parent and its workers together)."""
    with tempfile.TemporaryFile() as stderr:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=cwd, env={**os.environ, **(env or {})},
                                stdout=subprocess.DEVNULL, stderr=stderr)
        peak = 0
        while proc.poll() is None:
            peak = max(peak, tree_rss(proc.pid))
            time.sleep(0.02)
        seconds = time.perf_counter() - started
        if proc.returncode != 0:
            stderr.seek(0)
            raise subprocess.CalledProcessError(proc.returncode, argv, stderr=stderr.read())
    return seconds, peak


def process_cpu(pid: int) -> float:
    """User and system seconds process `pid` has used so far (Linux's /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu() -> float:
    """User and system seconds of every child process run and waited for so far (their own
    children, waited for by them, included: wlock's workers)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def sha256_speed(seconds: float = 1.0) -> float:
    """Bytes per second one core hashes with SHA-256 (hashlib, OpenSSL's code: SHA-NI
    where the CPU has it), from memory: what verifying a download costs at the least."""
    import hashlib

    block, done, started = os.urandom(64 * 2**20), 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        hashlib.sha256(block).digest()
        done += len(block)
    return done / (time.perf_counter() - started)


def timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def run(argv: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> None:
    subprocess.run(argv, cwd=cwd, check=True, env={**os.environ, **(env or {})},
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def compile_wlock() -> None:
    """Byte-compile wlock as `pip install` does for a wheel. An editable install under
    PYTHONDONTWRITEBYTECODE (set on our CI machines) would otherwise recompile every module
    on every run, which doubles start-up and is not what users run."""
    import compileall

    import wlock

    compileall.compile_dir(Path(wlock.__file__).parent, quiet=1, force=False)


def median(values: list[float]) -> float:
    return statistics.median(values)
