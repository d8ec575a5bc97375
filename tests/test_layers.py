"""The architecture as STYLE.md draws it, held by a test: data flows one way, and every
module imports alone (no cycle hidden by import order)."""

from __future__ import annotations

import ast
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytestmark = pytest.mark.newest_only("which of wlock's own modules import which")

SRC = Path(__file__).resolve().parents[1] / "src"
SHARED = ("wlock.models", "wlock.errors", "wlock.atomic", "wlock.hashing", "wlock.units",
          "wlock.hubstatus", "wlock.fastcopy", "wlock.version")
# module prefix -> what it must never import
FORBIDDEN = {
    "wlock.lock.": ("wlock.cache", "wlock.cli", "wlock.lint", "wlock.policy"),  # no tier
    # The policy judges what the resolver made and the lock records: it never resolves, and
    # the resolver never knows it (it is passed in as `accept`).
    "wlock.policy": ("wlock.lock.resolve", "wlock.lock.hub", "wlock.cli", "wlock.lint",
                     "wlock.archive"),
    # A loader is a rule over a listing and the small files the resolver reads for it: it
    # never fetches by itself, nor knows the lock it goes into.
    "wlock.lock.loaders": ("wlock.lock.hub", "wlock.lock.resolve", "wlock.lock.lockfile"),
    # The judgement of bytes reads a stream and knows nothing of where it came from: no
    # tier, no policy, no Hub (the lock, sync and audit hand it their streams).
    "wlock.scan": ("wlock.lock", "wlock.cache", "wlock.cli", "wlock.lint", "wlock.policy",
                   "wlock.archive"),
    # The working tier never resolves: sync reads a lock, it does not make one.
    # The archive tier is a source sync asks through a protocol, never an import.
    "wlock.cache.": ("wlock.lock.resolve", "wlock.lock.hub", "wlock.lock.manifest",
                     "wlock.cli", "wlock.archive"),
    # Sync and the chunk-level upgrade it calls: the upgrade never reaches back into sync
    # (what plans with both, the download estimate, is a module above them).
    "wlock.cache.upgrade": ("wlock.cache.sync", "wlock.cache.estimate", "wlock.cache.fetch",
                            "wlock.cache.transfer", "wlock.cache.engines"),
    # An engine writes a temp file and returns its digest: it never publishes, never picks
    # another engine, and knows nothing of the sync that called it.
    "wlock.cache.engines": ("wlock.cache.sync", "wlock.cache.fetch", "wlock.cache.transfer",
                            "wlock.cache.estimate", "wlock.policy"),
    # The archive holds what a lock names; it does not resolve, and the command line
    # is above it.
    "wlock.archive.": ("wlock.lock.resolve", "wlock.lock.hub", "wlock.cli", "wlock.lint"),
    **dict.fromkeys(SHARED, ("wlock.lock", "wlock.cache", "wlock.cli", "wlock.lint",
                             "wlock.archive")),
}


def modules() -> list[str]:
    return sorted(
        ".".join(p.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")
        for p in (SRC / "wlock").rglob("*.py") if p.name != "__main__.py")


def imports(module: str) -> set[str]:
    path = SRC / Path(*module.split("."))
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {name for name in found if name.startswith("wlock")}


@pytest.mark.parametrize("module", modules())
def test_data_flows_one_way(module: str) -> None:
    for prefix, forbidden in FORBIDDEN.items():
        if module == prefix or module.startswith(prefix):
            bad = sorted(i for i in imports(module) for f in forbidden
                         if i == f or i.startswith(f + "."))
            assert not bad, f"{module} must not import {bad}"


@pytest.mark.parametrize("module", [m for m in modules() if m.count(".") >= 2])
def test_no_module_imports_the_package_root_from_below(module: str) -> None:
    """`from wlock import x` in a layer runs the package's __init__ back up a floor (its
    version lives in wlock.version for that reason); only the command line and the public
    API sit at the top."""
    assert "wlock" not in imports(module), f"{module} imports the package root"


def test_every_module_imports_alone() -> None:
    def alone(module: str) -> tuple[str, str]:
        done = subprocess.run([sys.executable, "-c", f"import {module}"],
                              capture_output=True, text=True)
        return module, done.stderr.strip().splitlines()[-1] if done.returncode else ""

    with ThreadPoolExecutor(max_workers=4) as pool:
        failures = [f"{m}: {err}" for m, err in pool.map(alone, modules()) if err]
    assert not failures, failures


def test_no_module_of_the_working_tier_outgrows_its_room() -> None:
    """STYLE.md's rule for cache/: a file past 600 lines holds two things; cut it along
    the line it already has (the engines' room was cut from a transfer.py of 1,403)."""
    big = {str(p.relative_to(SRC)): n for p in (SRC / "wlock" / "cache").rglob("*.py")
           if (n := len(p.read_text(encoding="utf-8").splitlines())) > 600}
    assert not big, f"over 600 lines: {big}"


def test_a_sync_that_upgrades_no_file_imports_no_numpy() -> None:
    """Every module a downloading sync imports (fetch.py's own list) leaves numpy and lz4
    alone: only a xorb range fetched for a chunk-level upgrade needs them. At the top of
    engines/chunks they cost each cold sync 0.18 s of CPU (0.34 s against 0.16; numpy's
    import and its threads), and the suite's ~700 syncs a stack two minutes."""
    code = ("import sys, wlock.cli.sync_cmd, wlock.cache.sync, wlock.cache.fetch, "
            "wlock.cache.engines.chunks, wlock.cache.engines.link, wlock.cache.engines.small, "
            "wlock.cache.transfer, wlock.cache.upgrade; "
            "print(' '.join(m for m in ('numpy', 'lz4') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "", f"a sync imports {done.stdout.strip()}"
