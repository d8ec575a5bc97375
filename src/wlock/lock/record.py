"""A run's record: exactly which weights and data a run used, as JSON lines in a log.

`wlock record` (and `wlock run --record`) appends one line per locked entry, all with the same
`run_id`: the repo, the ref asked for, the commit, its files (paths, sizes, hashes: enough to
rebuild the lock without the Hub), the digest of the lock file and of `uv.lock`, the
project's git commit and whether its tree was dirty, the cache it read, host and time, and a
package URL (`pkg:huggingface/org/name@commit`). `run --record` appends an `exit` line once
the command ends. `wlock lock --from-record` rebuilds the lock a run used, byte for byte (the
recorded digest proves it).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from wlock.errors import InvalidFileError, LocalError
from wlock.lock.lockfile import render_lock
from wlock.models import FormatScan, Lock, LockedFile, LockedRepo, PickleScan

SCHEMA = 1


def file_digest(path: Path) -> str | None:
    try:
        return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def purl(repo: LockedRepo) -> str:
    """The package URL of a locked revision (purl-spec's `huggingface` type: namespace the
    org, name the repo, version the commit; a dataset says so by its repository URL)."""
    org, _, name = repo.id.rpartition("/")
    path = f"{org.lower()}/{name}" if org else name
    url = f"pkg:huggingface/{path}@{repo.revision.lower()}"
    if repo.kind == "dataset":
        url += "?repository_url=https://huggingface.co/datasets"
    return url


def _git(project: Path) -> tuple[str | None, bool | None]:
    """The project's commit and whether tracked files differ from it; (None, None) outside
    a git checkout or without git."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=project, capture_output=True,
                              text=True, timeout=10)
        if head.returncode != 0:
            return None, None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=project, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None, None
    return head.stdout.strip(), bool(dirty.stdout.strip())


def make_record(lock: Lock, lock_path: Path, cache_dir: Path,
                snapshot: Callable[[LockedRepo], Path]) -> list[dict[str, Any]]:
    """One record per locked entry, for one run (one new run_id); `snapshot` gives the
    folder a locked revision is read from (the lock layer does not know the cache's)."""
    project = lock_path.parent
    commit, dirty = _git(project)
    shared = {
        "schema": SCHEMA,
        "run_id": uuid.uuid4().hex,
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "lock": str(lock_path),
        "lock_digest": file_digest(lock_path),
        "lock_version": lock.version,
        "manifest_digest": lock.manifest_digest,
        "uv_lock_digest": file_digest(project / "uv.lock"),
        "git_commit": commit,
        "git_dirty": dirty,
        "cache_dir": str(cache_dir),
    }
    records = []
    for repo in lock.repos:
        records.append({
            **shared,
            "event": "entry",
            "kind": repo.kind,
            "id": repo.id,
            "requested": repo.requested,
            "revision": repo.revision,
            "purl": purl(repo),
            "files": len(repo.files),
            "bytes": repo.size,
            "snapshot": str(snapshot(repo)),
            "include": list(repo.include),
            "exclude": list(repo.exclude),
            # What the resolver recorded beside the files (the loader's choice, the models it
            # requires, the card, the pickles' imports): the lock is rebuilt from all of it.
            "loader": repo.loader, "variant": repo.variant, "requires": list(repo.requires),
            **({"base": repo.base} if repo.base else {}),
            "skipped": list(repo.skipped), "skipped_size": repo.skipped_size,
            "license": repo.license if len(repo.licenses) <= 1 else list(repo.licenses),
            "license_name": repo.license_name,
            "base_models": list(repo.base_models), "remote_code": list(repo.remote_code),
            "pickles": [{"path": p.path, "imports": list(p.imports), "pickle": p.pickle,
                         **({"unreadable": p.unreadable} if p.unreadable else {})}
                        for p in repo.pickles],
            **({"formats": [{"kind": t.kind, "path": t.path, "key": t.key,
                             "findings": list(t.findings),
                             **({"unreadable": t.unreadable} if t.unreadable else {})}
                            for t in repo.formats]} if repo.formats else {}),
            "file_list": [{"path": f.path, "size": f.size,
                           f.hash_kind.replace("-", "_"): f.etag} for f in repo.files],
        })
    return records


def append_records(log: Path, records: list[dict[str, Any]]) -> None:
    """Append whole lines with one write, so runs sharing a log never interleave a line."""
    data = "".join(json.dumps(r, separators=(",", ":"), ensure_ascii=False) + "\n"
                   for r in records).encode("utf-8")
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError as e:
        raise _unwritable(log, e) from e
    try:
        before = os.fstat(fd).st_size
        try:
            written = os.write(fd, data)
            if written != len(data):  # a disk that filled mid-line: no half line stays
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError as e:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, before)
            raise _unwritable(log, e) from e
    finally:
        os.close(fd)


def _unwritable(log: Path, e: OSError) -> LocalError:
    what = "is a folder" if isinstance(e, IsADirectoryError) else (e.strerror or str(e))
    return LocalError(f"cannot append to the run log {log}: {what}",
                      hint="Point --log at a writable file with free space, or `--log -` for "
                      "standard output.")


def exit_record(run_id: str, code: int, started: float) -> dict[str, Any]:
    return {"schema": SCHEMA, "run_id": run_id, "event": "exit", "exit_code": code,
            "time": datetime.now(UTC).isoformat(timespec="seconds"),
            "seconds": round(time.monotonic() - started, 3)}


def read_records(log: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        text = log.read_text(encoding="utf-8")
    except OSError as e:
        raise InvalidFileError(str(log), f"cannot be read: {e.strerror or e}") from e
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise InvalidFileError(str(log), f"not a JSON line: {e.msg}", line=number) from e
        if not isinstance(record, dict):
            raise InvalidFileError(str(log), "not a JSON object", line=number)
        yield number, record


def lock_from_record(log: Path, run_id: str | None = None) -> tuple[Lock, dict[str, Any]]:
    """The lock a recorded run used (the last run in `log`, or `run_id`), and that run's
    shared fields. Raises InvalidFileError when the log has no such run, or when the lock
    rebuilt does not have the digest recorded."""
    runs: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for number, record in read_records(log):
        if record.get("event") == "entry" and isinstance(record.get("run_id"), str):
            runs.setdefault(record["run_id"], []).append((number, record))
    if not runs:
        raise InvalidFileError(str(log), "holds no recorded run",
                               hint="Write one with `wlock record --log FILE` or "
                               "`wlock run --record FILE -- CMD`.")
    if run_id is None:
        run_id = list(runs)[-1]
    elif run_id not in runs:
        raise InvalidFileError(str(log), f"has no run {run_id!r}",
                               hint=f"Recorded runs: {', '.join(runs)}.")
    entries = runs[run_id]
    repos = []
    for number, r in entries:
        try:
            files = tuple(LockedFile(path=f["path"], size=int(f["size"]),
                                     sha256=f.get("sha256"), git_sha1=f.get("git_sha1"))
                          for f in r["file_list"])
            repos.append(LockedRepo(
                kind=r["kind"], id=r["id"], requested=r["requested"], revision=r["revision"],
                files=files, include=tuple(r.get("include", ())),
                exclude=tuple(r.get("exclude", ())), loader=r.get("loader"),
                variant=r.get("variant"), base=r.get("base"),
                requires=tuple(r.get("requires", ())),
                skipped=tuple(r.get("skipped", ())), skipped_size=int(r.get("skipped_size", 0)),
                licenses=_licenses(r.get("license")), license_name=r.get("license_name"),
                base_models=tuple(r.get("base_models", ())),
                remote_code=tuple(r.get("remote_code", ())),
                pickles=tuple(PickleScan(p["path"], tuple(p["imports"]), bool(p["pickle"]),
                                         p.get("unreadable"))
                              for p in r.get("pickles", ())),
                formats=tuple(FormatScan(t["kind"], t["path"], t["key"],
                                         tuple(t["findings"]), t.get("unreadable"))
                              for t in r.get("formats", ()))))
        except (KeyError, TypeError, ValueError) as e:
            raise InvalidFileError(str(log), f"a record of run {run_id} lacks {e}",
                                   line=number) from e
    first = entries[0][1]
    lock = Lock(manifest_digest=first["manifest_digest"], repos=tuple(repos),
                version=int(first.get("lock_version", 1)))
    rebuilt = "sha256:" + hashlib.sha256(render_lock(lock).encode("utf-8")).hexdigest()
    if first.get("lock_digest") and rebuilt != first["lock_digest"]:
        raise InvalidFileError(str(log), f"the lock rebuilt from run {run_id} is not the one "
                               f"recorded (digest {rebuilt}, recorded {first['lock_digest']})",
                               line=entries[0][0],
                               hint="The record was edited, or written by another version "
                               "of wlock whose lock format differs.")
    return lock, first


def _licenses(raw: object) -> tuple[str, ...]:
    """A record's licence: one name (as every record before lists were kept), or several."""
    if isinstance(raw, str):
        return (raw,)
    if isinstance(raw, list):
        return tuple(str(x) for x in raw)
    return ()
