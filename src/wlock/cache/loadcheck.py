"""Lock + cache -> one EntryLoad per entry: does each locked entry load offline?

`check` proves the bytes are the locked bytes; this proves they are the bytes the library
reads. Each entry is loaded by the project's Python (the interpreter that has the ML
libraries, which wlock's own may not) in a fresh process of its own, offline, from the cache,
at its locked commit, with the library its loader names (`load_probe.py`, a script that needs
nothing of wlock). One process per entry: a crash, or a library that leaves state behind,
fails that entry only, and memory goes back between entries. The entries of the libraries
built on torch (transformers, peft, sentence-transformers, diffusers) are forked from one
process that imported torch and transformers once (seconds each time otherwise), so each is
still a process of its own (SHARED_IMPORTS).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wlock.cache.layout import RepoPaths
from wlock.lock.loaders import detect_loader
from wlock.lock.loaders.datasets import split_names
from wlock.lock.lockfile import deleted_lines, hand_edited
from wlock.models import Lock, LockedRepo

PROBE = Path(__file__).with_name("load_probe.py")
# The module each loader's library is imported as; a loader whose library is not here has
# no load of its own in the probe.
LIBRARIES = {"transformers": "transformers", "sentence-transformers": "sentence_transformers",
             "diffusers": "diffusers", "peft": "peft", "gguf": "gguf", "datasets": "datasets",
             "timm": "timm", "open_clip": "open_clip"}
PROBED = frozenset({"transformers", "sentence-transformers", "diffusers", "peft", "gguf",
                    "datasets"})
# The entries loaded from one process that imported these once (each entry still in a
# process of its own, forked from it): the libraries built on torch and transformers share
# theirs.
TORCH_STACK = "torch,transformers,transformers.modeling_utils"
SHARED_IMPORTS = {"transformers": TORCH_STACK, "peft": TORCH_STACK,
                  "sentence-transformers": TORCH_STACK, "diffusers": TORCH_STACK,
                  "gguf": "gguf", "datasets": "datasets"}


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
                          check=False, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        return set()
    return {modules[m] for m in json.loads(done.stdout.strip().splitlines()[-1])}


# What `pip install` brings each library (the import name is not always the package's).
PACKAGES = {"transformers": "transformers torch", "sentence-transformers":
            "sentence-transformers", "diffusers": "diffusers torch", "peft": "peft torch",
            "gguf": "gguf", "datasets": "datasets", "timm": "timm", "open_clip":
            "open_clip_torch"}


def load_entries(
    lock: Lock, cache_dir: Path, python: str,
    on_entry: Callable[[EntryLoad], None] | None = None, skip_missing: bool = False,
) -> tuple[EntryLoad, ...]:
    """Load every entry of `lock` offline from `cache_dir` with `python`; never raises for a
    failed load (it is an EntryLoad). An entry whose library `python` lacks fails, naming
    the install; `skip_missing` (`--skip-missing-libraries`) makes it a skip. Entries that
    share their imports (SHARED_IMPORTS) load in processes forked from one that made them
    once (the probe's `serve`); an entry whose process left no answer is loaded again
    alone."""
    wanted = {repo.key: library_of(repo) for repo in lock.repos}
    here = installed(python, {lib for lib in wanted.values() if lib})
    results: dict[int, EntryLoad] = {}

    def done(i: int, result: EntryLoad) -> None:
        results[i] = result
        if on_entry:
            on_entry(result)

    with tempfile.TemporaryDirectory(prefix="wlock-load-") as scratch:
        env = _probe_env(cache_dir, Path(scratch))
        groups: dict[str, list[tuple[int, LockedRepo, str, dict[str, Any]]]] = {}
        for i, repo in enumerate(lock.repos):
            library = wanted[repo.key]
            early = _before_loading(repo, library, here, python, skip_missing)
            if early is not None:
                done(i, early)
                continue
            assert library is not None
            groups.setdefault(SHARED_IMPORTS[library], []).append(
                (i, repo, library, _entry(lock, repo, library, cache_dir)))
        for n, (modules, members) in enumerate(groups.items()):
            def answer(k: int, got: tuple[dict[str, Any], str]) -> None:
                i, repo, library, _ = members[k]  # noqa: B023 - called before the next group
                done(i, _judged(repo, library, cache_dir, *got))

            answered = _serve(python, modules, [m[3] for m in members], env,
                              Path(scratch) / f"serve-{n}", answer) \
                if len(members) > 1 else set()
            for k, (i, repo, library, entry) in enumerate(members):
                if k not in answered:  # alone, or its forked process died
                    done(i, _judged(repo, library, cache_dir,
                                    *_probe(python, entry, env, Path(scratch))))
    return tuple(results[i] for i in range(len(lock.repos)))


def _probe_env(cache_dir: Path, scratch: Path) -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1", "HF_HUB_CACHE": str(cache_dir),
            # datasets writes its Arrow tables here: a load that proves, not one that keeps.
            "HF_DATASETS_CACHE": str(scratch / "datasets"),
            "TOKENIZERS_PARALLELISM": "false", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}


def _before_loading(repo: LockedRepo, library: str | None, here: set[str], python: str,
                    skip_missing: bool) -> EntryLoad | None:
    """The entry's result when it cannot be loaded at all (no library, or not installed)."""
    def skipped(reason: str) -> EntryLoad:
        return EntryLoad(repo.kind, repo.id, repo.revision, library, "skipped", reason=reason)

    if library is None:
        return skipped(f"loader {repo.loader or 'all'!r} names no library, nor do its files")
    if library not in PROBED:
        return skipped(f"wlock has no load for {library} yet")
    if library not in here:
        reason = (f"{LIBRARIES[library]} is not installed for {python}: "
                  f"`{python} -m pip install {PACKAGES[library]}` (or `uv add "
                  f"{PACKAGES[library]}`) brings it")
        if skip_missing:
            return skipped(reason)
        return EntryLoad(repo.kind, repo.id, repo.revision, library, "failed", error=reason,
                         reason="library missing (--skip-missing-libraries skips such "
                                "entries)")
    return None


def _entry(lock: Lock, repo: LockedRepo, library: str, cache_dir: Path) -> dict[str, Any]:
    """What the probe is told of one entry."""
    return {
        "library": library, "kind": repo.kind, "id": repo.id, "revision": repo.revision,
        "files": [f.path for f in repo.files], "variant": repo.variant,
        "config": repo.config, "split": split_names(repo.split) if repo.split else None,
        "remote_code": bool(repo.remote_code),
        "snapshot": str(RepoPaths.of(cache_dir, repo).snapshot(repo.revision)),
        "base": _named_base(lock, repo), "adapters": _adapters(repo),
        "listing": [f.path for f in repo.files] + list(repo.skipped),
    }


def _probe(python: str, entry: dict[str, Any], env: dict[str, str], scratch: Path
           ) -> tuple[dict[str, Any] | None, str]:
    """One entry loaded in a process of its own: (its answer, or None; the last line of what
    it printed to stderr, for a process that died)."""
    answer_path = scratch / "answer.json"
    answer_path.unlink(missing_ok=True)
    # No standard input: a library that asks (transformers' remote-code `[y/N]`) reads EOF
    # and fails at once, with its own words, instead of waiting.
    done = subprocess.run([python, str(PROBE), json.dumps(entry), str(answer_path)], env=env,
                          capture_output=True, text=True, check=False,
                          stdin=subprocess.DEVNULL)
    tail = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
    return _answer(answer_path), tail


def _answer(path: Path) -> dict[str, Any] | None:
    try:
        answer = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return answer if isinstance(answer, dict) else None


def _serve(python: str, modules: str, entries: list[dict[str, Any]], env: dict[str, str],
           folder: Path, on_answer: Callable[[int, tuple[dict[str, Any], str]], None],
           ) -> set[int]:
    """`entries`, each in a process forked from one that imported `modules` once (the
    probe's `serve`); `on_answer(k, ...)` as the k-th ends. Returns the k of those that
    answered (the others are loaded again alone)."""
    import threading

    folder.mkdir()
    lines = "".join(json.dumps(entry) + "\n" for entry in entries)
    answered: set[int] = set()
    with (folder / "stderr").open("w") as errors:
        server = subprocess.Popen([python, str(PROBE), "--serve", modules, str(folder)],
                                  env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=errors, text=True)
        assert server.stdin is not None and server.stdout is not None

        def feed() -> None:  # a thread: a long list must not block on a full pipe
            assert server.stdin is not None
            try:
                server.stdin.write(lines)
                server.stdin.close()
            except OSError:
                pass  # it died: what answered is kept, the rest loads alone

        writer = threading.Thread(target=feed, daemon=True)
        writer.start()
        for line in server.stdout:
            k = int(line.split()[0])
            answer = _answer(folder / f"{k}.json")
            if answer is not None:
                answered.add(k)
                on_answer(k, (answer, ""))
        server.wait()
        writer.join()
    return answered


def _judged(repo: LockedRepo, library: str, cache_dir: Path, answer: dict[str, Any] | None,
            tail: str) -> EntryLoad:
    """The entry's result from the probe's answer (None: its process died, `tail` its last
    words)."""
    snapshot = RepoPaths.of(cache_dir, repo).snapshot(repo.revision)
    if answer is None:
        return EntryLoad(repo.kind, repo.id, repo.revision, library, "failed",
                         error=f"the load's process died: {tail}")
    did = tuple(answer.get("did") or ())
    asked = answer.get("asked") or ()
    edited = hand_edited(repo)
    left_out, why = _asked_and_left_out(repo, asked), "which the lock leaves out"
    by_record = bool(left_out)  # left out by the lock's own record, not by a hand edit
    if not left_out and edited:
        unlisted = _asked_and_unlisted(repo, asked)
        deleted = deleted_lines(repo, unlisted)
        left_out = deleted or unlisted
        why = ("whose line was deleted from weights.lock by hand (the entry's paths-digest "
               "says so)" if deleted else
               "which weights.lock does not list, and lines were deleted from this entry by "
               "hand (its paths-digest does not match)") + \
            "; `wlock lock` re-locks the entry from the Hub"
    if not answer.get("ok"):
        wanted, error = answer.get("wanted"), str(answer.get("error") or "")
        if left_out and (wanted is None or wanted not in error):
            wanted = left_out[0]  # the library asked for it and the lock left it out
            error += f" ({library} asked for {', '.join(left_out)}, {why})"
        # A library that globs (datasets) fails without naming what is gone: a locked file
        # the snapshot lacks is the cause `check` reports too.
        wanted = wanted or next(
            (f.path for f in repo.files if not (snapshot / f.path).exists()), None)
        return EntryLoad(repo.kind, repo.id, repo.revision, library, "failed", did=did,
                         error=error, wanted=wanted)
    if left_out:
        them = "it" if len(left_out) == 1 else "them"
        if by_record:
            why = "which the repo has at this commit and the lock leaves out (skipped)"
        return EntryLoad(
            repo.kind, repo.id, repo.revision, library, "failed", did=did, wanted=left_out[0],
            error=f"{library} asked for {', '.join(left_out)}, {why}: the load goes on "
                  f"without {them}, and code that reads {them} fails")
    if edited:
        # What the library did not ask for (a second adapter, loaded by name in the user's
        # code) is gone without a trace the load can find: the edit itself fails the entry.
        return EntryLoad(
            repo.kind, repo.id, repo.revision, library, "failed", did=did,
            error="lines of this entry were deleted or added by hand in weights.lock (its "
                  "paths-digest does not match), so the files it lists are not the ones "
                  "locked: `wlock lock --check --remote` names each line, `wlock lock` "
                  "lists the entry again at its commit")
    return EntryLoad(repo.kind, repo.id, repo.revision, library, "loaded", did=did)


def _named_base(lock: Lock, repo: LockedRepo) -> dict[str, str] | None:
    """The adapter's base as weights.toml names it (`base = "org/name@ref"`), at its locked
    commit: what the probe loads the adapter on instead of `base_model_name_or_path`."""
    if not repo.base:
        return None
    base_id = repo.base.partition("@")[0]
    found = lock.find("model", base_id)
    return {"id": base_id, "revision": found.revision if found else repo.base.partition("@")[2]
            or "main"}


def _adapters(repo: LockedRepo) -> list[str]:
    """The adapters a PEFT repo holds beside its first, each a folder with its own
    adapter_config.json (`save_pretrained` with several adapters writes them so): those
    locked and those the lock records as left out."""
    if library_of(repo) != "peft":
        return []
    paths = [f.path for f in repo.files] + list(repo.skipped)
    return sorted({p.rsplit("/", 1)[0] for p in paths
                   if p.endswith("/adapter_config.json") and p.count("/") == 1})


def _asked_and_unlisted(repo: LockedRepo, asked: Sequence[dict[str, str]]) -> list[str]:
    """The files the library asked of this repo that the lock does not list: in an entry
    edited by hand, perhaps lines deleted from it."""
    listed = {f.path for f in repo.files}
    return list(dict.fromkeys(item.get("path", "") for item in asked
                              if item.get("repo") in ("", repo.id)
                              and item.get("path", "") not in listed))


def _asked_and_left_out(repo: LockedRepo, asked: Sequence[dict[str, str]]) -> list[str]:
    """The files the library asked of this repo that the lock records as left out (a path,
    or a folder written `onnx/`): the repo has them and the library reads them."""
    out = []
    for item in asked:
        path = item.get("path", "")
        if item.get("repo") not in ("", repo.id) or path in out:
            continue
        if any(path == s or (s.endswith("/") and path.startswith(s)) for s in repo.skipped):
            out.append(path)
    return out
