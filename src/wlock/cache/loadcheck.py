"""Lock + cache -> one EntryLoad per entry: does each locked entry load offline?

`check` proves the bytes are the locked bytes; this proves they are the bytes the library
reads. Each entry is loaded by the project's Python (the interpreter that has the ML
libraries, which wlock's own may not) in a fresh process of its own, offline, from the cache,
at its locked commit, with the library its loader names (`load_probe.py`, a script that needs
nothing of wlock). One process per entry: a crash, or a library that leaves state behind,
fails that entry only, and memory goes back between entries.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from wlock.cache.layout import RepoPaths
from wlock.lock.loaders import detect_loader
from wlock.lock.loaders.datasets import split_names
from wlock.models import Lock, LockedRepo

PROBE = Path(__file__).with_name("load_probe.py")
# The module each loader's library is imported as; a loader whose library is not here has
# no load of its own in the probe.
LIBRARIES = {"transformers": "transformers", "sentence-transformers": "sentence_transformers",
             "diffusers": "diffusers", "peft": "peft", "gguf": "gguf", "datasets": "datasets",
             "timm": "timm", "open_clip": "open_clip"}
PROBED = frozenset({"transformers", "sentence-transformers", "diffusers", "peft", "gguf",
                    "datasets"})


@dataclass(frozen=True, slots=True)
class EntryLoad:
    """One entry's load: `status` is loaded, failed or skipped; `did` what was loaded;
    `error` the library's exception; `wanted` the file it asked for and the cache lacks."""

    kind: str
    repo_id: str
    revision: str
    library: str | None
    status: str
    did: tuple[str, ...] = ()
    error: str | None = None
    wanted: str | None = None
    reason: str | None = None


def project_python(project: Path) -> str:
    """The interpreter a project's code runs with: the active virtualenv's, else the
    project's `.venv` (as uv makes it), else the one running wlock."""
    candidates = [os.environ.get("VIRTUAL_ENV"), str(project / ".venv")]
    for venv in filter(None, candidates):
        python = Path(venv) / "bin" / "python"
        if python.is_file():
            return str(python)
    return sys.executable


def library_of(repo: LockedRepo) -> str | None:
    """The library that loads `repo`: its loader's, or (`all`, or none) the one its files
    say; None when nothing says."""
    if repo.kind == "dataset":
        return "datasets"
    if repo.loader in LIBRARIES:
        return repo.loader
    found = detect_loader(None, [f.path for f in repo.files])
    return found if found in LIBRARIES else None


def installed(python: str, libraries: set[str]) -> set[str]:
    """The libraries among `libraries` that `python` can import (found, not imported)."""
    modules = {LIBRARIES[name]: name for name in libraries}
    code = ("import importlib.util, json, sys; print(json.dumps([m for m in sys.argv[1:] "
            "if importlib.util.find_spec(m)]))")
    done = subprocess.run([python, "-c", code, *modules], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        return set()
    return {modules[m] for m in json.loads(done.stdout.strip().splitlines()[-1])}


def load_entries(
    lock: Lock, cache_dir: Path, python: str,
    on_entry: Callable[[EntryLoad], None] | None = None,
) -> tuple[EntryLoad, ...]:
    """Load every entry of `lock` offline from `cache_dir` with `python`; never raises for a
    failed load (it is an EntryLoad)."""
    wanted = {repo.key: library_of(repo) for repo in lock.repos}
    here = installed(python, {lib for lib in wanted.values() if lib})
    results = []
    with tempfile.TemporaryDirectory(prefix="wlock-load-") as scratch:
        for repo in lock.repos:
            library = wanted[repo.key]
            result = _load(repo, library, here, cache_dir, python, Path(scratch))
            results.append(result)
            if on_entry:
                on_entry(result)
    return tuple(results)


def _load(repo: LockedRepo, library: str | None, here: set[str], cache_dir: Path,
          python: str, scratch: Path) -> EntryLoad:
    def skipped(reason: str) -> EntryLoad:
        return EntryLoad(repo.kind, repo.id, repo.revision, library, "skipped", reason=reason)

    if library is None:
        return skipped(f"loader {repo.loader or 'all'!r} names no library, nor do its files")
    if library not in here:
        return skipped(f"{LIBRARIES[library]} is not installed for {python}")
    if library not in PROBED:
        return skipped(f"wlock has no load for {library} yet")
    entry = {
        "library": library, "kind": repo.kind, "id": repo.id, "revision": repo.revision,
        "files": [f.path for f in repo.files], "variant": repo.variant,
        "config": repo.config, "split": split_names(repo.split) if repo.split else None,
        "remote_code": bool(repo.remote_code),
        "snapshot": str(RepoPaths.of(cache_dir, repo).snapshot(repo.revision)),
    }
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "HF_HUB_CACHE": str(cache_dir),
           # datasets writes its Arrow tables here: a load that proves, not one that keeps.
           "HF_DATASETS_CACHE": str(scratch / "datasets"),
           "TOKENIZERS_PARALLELISM": "false", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    done = subprocess.run([python, str(PROBE), json.dumps(entry)], env=env,
                          capture_output=True, text=True, check=False)
    lines = done.stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        answer = None
    if not isinstance(answer, dict):
        tail = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return EntryLoad(repo.kind, repo.id, repo.revision, library, "failed",
                         error=f"the load's process died: {tail}")
    return EntryLoad(repo.kind, repo.id, repo.revision, library,
                     "loaded" if answer.get("ok") else "failed",
                     did=tuple(answer.get("did") or ()), error=answer.get("error"),
                     wanted=answer.get("wanted"))
