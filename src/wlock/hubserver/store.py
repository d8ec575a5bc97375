"""Repos on disk behind a small interface, so the server can later serve a cache or an archive.

Layout of a DiskStore:

    objects/<sha256>                          file contents, content-addressed
    repos/<kind>s/<org>/<name>/repo.json      refs, commits and each commit's file table
    renames.json                              {"models/old/id": "new/id"}

Commit ids are derived from their content like git's, so a store built from the same
fixtures always has the same commit ids (and weights.lock.example is reproducible).
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import shutil
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from wlock.hubserver.xet import XetStore

# The patterns the Hub's default .gitattributes stores with LFS.
LFS_PATTERNS = (
    "*.7z", "*.arrow", "*.bin", "*.bz2", "*.ckpt", "*.ftz", "*.gguf", "*.gz", "*.h5",
    "*.joblib", "*.lfs.*", "*.mlmodel", "*.model", "*.msgpack", "*.npy", "*.npz", "*.onnx",
    "*.ot", "*.parquet", "*.pb", "*.pickle", "*.pkl", "*.pt", "*.pth", "*.rar",
    "*.safetensors", "*.tar", "*.tflite", "*.tgz", "*.wasm", "*.xz", "*.zip", "*.zst",
)
_LFS_NAME = re.compile("|".join(fnmatch.translate(p) for p in LFS_PATTERNS))
LFS_SIZE_THRESHOLD = 10 * 1024 * 1024
DEFAULT_DATE = "2026-01-01T00:00:00.000Z"


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\x00" % len(data) + data, usedforsecurity=False).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    spec = "version https://git-lfs.github.com/spec/v1"
    return f"{spec}\noid sha256:{sha256}\nsize {size}\n".encode()


@dataclass(frozen=True, slots=True)
class StoredFile:
    path: str
    size: int
    sha256: str
    blob_id: str  # git oid of the content, or of the LFS pointer for LFS files
    lfs: bool
    # The file's Xet hash (the Hub's string form) when the store keeps it on Xet too.
    xet_hash: str | None = None

    @property
    def pointer_size(self) -> int:
        return len(lfs_pointer(self.sha256, self.size))


@dataclass(frozen=True, slots=True)
class Commit:
    sha: str
    parent: str | None
    message: str
    date: str
    files: Mapping[str, StoredFile]


@dataclass(frozen=True, slots=True)
class Repo:
    kind: str  # "model" | "dataset"
    id: str
    branches: Mapping[str, str]
    tags: Mapping[str, str]
    commits: Mapping[str, Commit]
    gated: bool = False
    private: bool = False
    # Tokens that may read a gated or private repo (the users who "accepted the terms").
    granted: tuple[str, ...] = ()
    created: str = DEFAULT_DATE
    extra: Mapping[str, Any] = field(default_factory=dict)

    def resolve(self, revision: str) -> Commit | None:
        sha = self.branches.get(revision) or self.tags.get(revision)
        if sha is None and revision.startswith("refs/heads/"):
            sha = self.branches.get(revision.removeprefix("refs/heads/"))
        if sha is None and revision.startswith("refs/tags/"):
            sha = self.tags.get(revision.removeprefix("refs/tags/"))
        if sha is None and len(revision) == 40:
            sha = revision
        if sha is None and 7 <= len(revision) < 40 and all(c in "0123456789abcdef"
                                                           for c in revision):
            # A commit's short id, as the Hub resolves one (huggingface_hub #197, since
            # 2023): a unique prefix of 7 hex digits or more; an ambiguous one is not found.
            found = [c for c in self.commits if c.startswith(revision)]
            sha = found[0] if len(found) == 1 else None
        return self.commits.get(sha) if sha else None


class RepoStore(Protocol):
    """What the server needs from a store: repos by id, and object bytes by sha256."""

    def get_repo(self, kind: str, repo_id: str) -> Repo | None: ...

    def renamed(self, kind: str, repo_id: str) -> str | None: ...

    def object_path(self, sha256: str) -> Path | None: ...


class DiskStore:
    """A RepoStore on a directory; repo.json is re-read whenever it changes on disk."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._cache: dict[Path, tuple[tuple[int, int, int], Repo]] = {}
        self._lock = threading.Lock()
        # The store's Xet side: chunks, xorbs and reconstructions (wlock.hubserver.xet).
        self.xet = XetStore(root)

    def repo_dir(self, kind: str, repo_id: str) -> Path:
        return self.root / "repos" / f"{kind}s" / repo_id

    def get_repo(self, kind: str, repo_id: str) -> Repo | None:
        path = self.repo_dir(kind, repo_id) / "repo.json"
        try:
            st = path.stat()
        except OSError:
            return None
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        with self._lock:
            hit = self._cache.get(path)
            if hit and hit[0] == stamp:
                return hit[1]
        repo = _repo_from_json(kind, repo_id, json.loads(path.read_text(encoding="utf-8")))
        with self._lock:
            self._cache[path] = (stamp, repo)
        return repo

    def renamed(self, kind: str, repo_id: str) -> str | None:
        try:
            renames = json.loads((self.root / "renames.json").read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        target = renames.get(f"{kind}s/{repo_id}")
        return str(target) if target else None

    def object_path(self, sha256: str) -> Path | None:
        path = self.root / "objects" / sha256
        return path if len(sha256) == 64 and path.is_file() else None


def _repo_from_json(kind: str, repo_id: str, data: dict[str, Any]) -> Repo:
    commits = {
        sha: Commit(
            sha=sha,
            parent=c.get("parent"),
            message=c.get("message", ""),
            date=c.get("date", DEFAULT_DATE),
            files={
                p: StoredFile(path=p, size=f["size"], sha256=f["sha256"], blob_id=f["blob_id"],
                              lfs=f["lfs"], xet_hash=f.get("xet_hash"))
                for p, f in c["files"].items()
            },
        )
        for sha, c in data["commits"].items()
    }
    return Repo(
        kind=kind, id=repo_id, branches=data.get("branches", {}), tags=data.get("tags", {}),
        commits=commits, gated=data.get("gated", False), private=data.get("private", False),
        granted=tuple(data.get("granted", ())), created=data.get("created", DEFAULT_DATE),
        extra=data.get("extra", {}),
    )


FileSource = bytes | Path


class StoreBuilder:
    """Writes repos into a DiskStore: commits (as deltas on a parent), branches, tags, access.

    With `xet=True` every LFS file is stored on Xet as well, as the Hub stores them now
    (wlock.hubserver.xet): its listings carry `xetHash`, its resolve answers `X-Xet-Hash`
    and the `xet-auth` link, and hf_xet downloads it from the CAS by xorb ranges; the
    plain-HTTP bridge (the redirect to the CDN) still serves it to everyone else. Off by
    default: a Xet file is what huggingface_hub 1.0+ downloads through hf_xet instead of
    plain HTTP, so a test sees that client path only where it asks for it.

    Safe to use while a server reads the store: every file is replaced atomically.
    """

    def __init__(self, root: Path, *, xet: bool = False) -> None:
        self.root = root
        self.xet = xet
        (root / "objects").mkdir(parents=True, exist_ok=True)
        (root / "repos").mkdir(parents=True, exist_ok=True)
        self._store = DiskStore(root)

    def _load(self, kind: str, repo_id: str) -> dict[str, Any]:
        path = self._store.repo_dir(kind, repo_id) / "repo.json"
        if path.exists():
            data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
            return data
        return {"branches": {}, "tags": {}, "commits": {}}

    def _save(self, kind: str, repo_id: str, data: dict[str, Any]) -> None:
        folder = self._store.repo_dir(kind, repo_id)
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".repo.json.{os.getpid()}.{threading.get_ident()}.tmp"
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(tmp, folder / "repo.json")

    def add_object(self, source: FileSource) -> tuple[str, int, str]:
        """Store content; returns (sha256, size, git blob id of the content)."""
        sha256, sha1 = hashlib.sha256(), hashlib.sha1(usedforsecurity=False)
        if isinstance(source, bytes):
            size = len(source)
            sha1.update(b"blob %d\x00" % size)
            sha256.update(source)
            sha1.update(source)
        else:
            size = source.stat().st_size
            sha1.update(b"blob %d\x00" % size)
            with open(source, "rb") as f:
                while chunk := f.read(1 << 20):
                    sha256.update(chunk)
                    sha1.update(chunk)
        digest = sha256.hexdigest()
        target = self.root / "objects" / digest
        if not target.exists():
            tmp = target.with_name(f".{digest}.{os.getpid()}.{threading.get_ident()}.tmp")
            if isinstance(source, bytes):
                tmp.write_bytes(source)
            else:
                try:
                    os.link(source, tmp)
                except OSError:
                    shutil.copyfile(source, tmp)
            os.replace(tmp, target)
        return digest, size, sha1.hexdigest()

    def commit(
        self,
        kind: str,
        repo_id: str,
        files: Mapping[str, FileSource],
        *,
        branch: str = "main",
        delete: tuple[str, ...] = (),
        message: str = "",
        date: str = DEFAULT_DATE,
        lfs: bool | None = None,
    ) -> str:
        """Commit `files` (added or replaced) and `delete` on top of `branch`; move the branch.

        `lfs=None` stores a file with LFS when its name matches the Hub's default patterns
        or it is over 10 MiB, as the Hub's default .gitattributes would.
        """
        data = self._load(kind, repo_id)
        parent = data["branches"].get(branch)
        table: dict[str, Any] = dict(data["commits"][parent]["files"]) if parent else {}
        for path in delete:
            table.pop(path, None)
        for path, source in files.items():
            sha256, size, content_oid = self.add_object(source)
            is_lfs = lfs if lfs is not None else (
                size > LFS_SIZE_THRESHOLD
                or _LFS_NAME.match(path.rsplit("/", 1)[-1]) is not None
            )
            blob_id = git_blob_id(lfs_pointer(sha256, size)) if is_lfs else content_oid
            table[path] = {"size": size, "sha256": sha256, "blob_id": blob_id, "lfs": is_lfs}
            if is_lfs and self.xet and size:  # the Hub keeps empty files in git
                content = source if isinstance(source, bytes) else source.read_bytes()
                table[path]["xet_hash"] = self._store.xet.add(content)
        listing = json.dumps(
            [parent, message, date, sorted((p, f["blob_id"]) for p, f in table.items())]
        ).encode()
        sha = hashlib.sha1(b"commit " + listing, usedforsecurity=False).hexdigest()
        data["commits"][sha] = {
            "parent": parent, "message": message, "date": date,
            "files": dict(sorted(table.items())),
        }
        data["branches"][branch] = sha
        self._save(kind, repo_id, data)
        return sha

    def set_ref(self, kind: str, repo_id: str, *, branch: str | None = None,
                tag: str | None = None, target: str) -> None:
        data = self._load(kind, repo_id)
        commit = data["branches"].get(target) or data["tags"].get(target) or target
        if commit not in data["commits"]:
            raise KeyError(f"{repo_id}: no commit or ref {target!r}")
        if branch:
            data["branches"][branch] = commit
        if tag:
            data["tags"][tag] = commit
        self._save(kind, repo_id, data)

    def squash(self, kind: str, repo_id: str, *, branch: str = "main") -> str:
        """What huggingface_hub's super_squash_history does: `branch` becomes one new commit
        with the same files, and the commits only it reached are gone (a lock pinned to one
        of them now gets RevisionNotFound)."""
        data = self._load(kind, repo_id)
        head = data["branches"][branch]

        def reach(sha: str | None) -> set[str]:
            seen = set()
            while sha is not None and sha not in seen:
                seen.add(sha)
                sha = data["commits"][sha]["parent"]
            return seen

        kept: set[str] = set()
        for name, sha in [*data["branches"].items(), *data["tags"].items()]:
            if name != branch or sha != head:
                kept |= reach(sha)
        files = data["commits"][head]["files"]
        message = f"Super-squash branch '{branch}' using huggingface_hub"
        listing = json.dumps([None, message, DEFAULT_DATE,
                              sorted((p, f["blob_id"]) for p, f in files.items())]).encode()
        sha = hashlib.sha1(b"commit " + listing, usedforsecurity=False).hexdigest()
        for gone in reach(head) - kept:
            del data["commits"][gone]
        data["commits"][sha] = {"parent": None, "message": message, "date": DEFAULT_DATE,
                                "files": files}
        data["branches"][branch] = sha
        self._save(kind, repo_id, data)
        return sha

    def configure(self, kind: str, repo_id: str, **settings: Any) -> None:
        """Set gated, private, granted (tokens) or extra (info fields) on a repo."""
        data = self._load(kind, repo_id)
        data.update(settings)
        self._save(kind, repo_id, data)

    def rename(self, kind: str, old_id: str, new_id: str) -> None:
        path = self.root / "renames.json"
        renames = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
        renames[f"{kind}s/{old_id}"] = new_id
        path.write_text(json.dumps(renames, indent=1, sort_keys=True), encoding="utf-8")
