"""Immutable values that cross module boundaries."""

from __future__ import annotations

from array import array
from binascii import unhexlify
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, overload

RepoKind = Literal["model", "dataset"]
REPO_KINDS: tuple[RepoKind, ...] = ("model", "dataset")


Selection = tuple[str, tuple[str, ...], tuple[str, ...], str | None, str | None, str | None,
                  tuple[str, ...]]


def selection(ref: str, include: tuple[str, ...], exclude: tuple[str, ...],
              loader: str | None = None, variant: str | None = None,
              base: str | None = None, extras: tuple[str, ...] = ()) -> Selection:
    """A ref, its globs (order and repeats ignored, as the digest does), its loader, variant,
    named base and other loader options (`extras`): what decides the locked set."""
    return (ref, tuple(sorted(set(include))), tuple(sorted(set(exclude))), loader, variant,
            base, extras)


def loader_extras(config: str | None, split: str | None, mmproj: bool) -> tuple[str, ...]:
    """The loader options an entry sets beyond variant and base, as `key=value` (only those
    set, so an entry without them keeps its digest)."""
    return tuple(f"{k}={v}" for k, v in (("config", config), ("split", split),
                                         ("mmproj", None if mmproj else "false")) if v)


@dataclass(frozen=True, slots=True)
class ManifestEntry:
    """One repo the project wants, as written in weights.toml."""

    kind: RepoKind
    id: str
    ref: str = "main"
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    # Where the entry starts in weights.toml, for messages; not part of its identity.
    line: int | None = field(default=None, compare=False)
    # The library whose loading rule picks the files (wlock.lock.loaders); None: every file.
    loader: str | None = None
    variant: str | None = None  # a diffusers/transformers variant (fp16) or a GGUF quant
    # An adapter's base named in weights.toml (`org/name` or `org/name@ref`), where its
    # adapter_config.json names a local folder: the base the peft loader requires instead.
    base: str | None = None
    # A dataset's config and split (the datasets loader); a GGUF projector left out.
    config: str | None = None
    split: str | None = None
    mmproj: bool = True

    @property
    def key(self) -> tuple[RepoKind, str]:
        return (self.kind, self.id)

    @property
    def extras(self) -> tuple[str, ...]:
        return loader_extras(self.config, self.split, self.mmproj)

    @property
    def selection(self) -> Selection:
        """What decides the locked set: a lock entry is kept only while this is unchanged."""
        return selection(self.ref, self.include, self.exclude, self.loader, self.variant,
                         self.base, self.extras)


@dataclass(frozen=True, slots=True)
class Manifest:
    path: str
    entries: tuple[ManifestEntry, ...]
    digest: str


@dataclass(frozen=True, slots=True)
class LockedFile:
    """A file pinned by the hash the Hub attests: sha256 for LFS/Xet, else the git blob id."""

    path: str
    size: int
    sha256: str | None = None
    git_sha1: str | None = None
    # The file's Xet hash where the Hub gives one (its `xetHash`): the name of its
    # reconstruction in the CAS, for chunk-level upgrades. Optional: a hint, never trusted
    # over the sha256 (older locks have none).
    xet: str | None = None

    @property
    def hash_kind(self) -> str:
        """"sha256" (LFS/Xet content) or "git-sha1" (git blob id), as the lock names it."""
        return "sha256" if self.sha256 is not None else "git-sha1"

    @property
    def etag(self) -> str:
        """The blob name in the HF cache (`blobs/<etag>`)."""
        digest = self.sha256 or self.git_sha1
        assert digest is not None, "a LockedFile always carries one hash"
        return digest


class FileTable(Sequence[LockedFile]):
    """A repo's locked files stored by column, for locks with very many files.

    A LockedFile object costs about 270 bytes (the object, its path, its hex digest, its
    size): a million of them would be 270 MB before any work. Here the paths are one
    string, the sizes one array, the digests raw bytes: about 75 bytes a file. Entries are
    LockedFile values made on access, so code that reads a lock sees one type either way.
    """

    __slots__ = ("_digests", "_paths", "_sha256", "_sizes", "_starts", "_xet")

    def __init__(self) -> None:
        self._paths = bytearray()  # UTF-8, one after another
        self._starts = array("Q", [0])
        self._sizes = array("q")
        self._digests = bytearray()  # 32 bytes a file; a git-sha1 is padded with zeros
        self._sha256 = bytearray()  # 1 for sha256, 0 for git-sha1
        self._xet: dict[int, bytes] = {}  # index -> Xet hash, for the files that have one

    def append(self, path: str, size: int, digest: str, sha256: bool,
               xet: str | None = None) -> None:
        if xet is not None:
            self._xet[len(self._sizes)] = bytes.fromhex(xet)
        self._paths += path.encode()
        self._starts.append(len(self._paths))
        self._sizes.append(size)
        self._digests += bytes.fromhex(digest).ljust(32, b"\0")
        self._sha256.append(sha256)

    def append_rendered(self, path: bytes, size: int, digest: bytes, sha256: bool,
                        xet: bytes | None = None) -> None:
        """append() for the lock reader: the path in UTF-8, the digests in ASCII hex."""
        if xet is not None:
            self._xet[len(self._sizes)] = unhexlify(xet)
        self._paths += path
        self._starts.append(len(self._paths))
        self._sizes.append(size)
        self._digests += unhexlify(digest).ljust(32, b"\0")
        self._sha256.append(sha256)

    def find(self, path: bytes) -> int | None:
        """The index of `path` (UTF-8) in a table appended in sorted order, or None."""
        lo, hi = 0, len(self)
        while lo < hi:
            mid = (lo + hi) // 2
            here = self._paths[self._starts[mid]:self._starts[mid + 1]]
            if here == path:
                return mid
            if here < path:
                lo = mid + 1
            else:
                hi = mid
        return None

    def __len__(self) -> int:
        return len(self._sizes)

    @overload
    def __getitem__(self, index: int) -> LockedFile: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[LockedFile, ...]: ...

    def __getitem__(self, index: int | slice) -> LockedFile | tuple[LockedFile, ...]:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(len(self))))
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self._file(index)

    def _file(self, i: int) -> LockedFile:
        path = self._paths[self._starts[i]:self._starts[i + 1]].decode()
        if self._sha256[i]:
            xet = self._xet.get(i)
            return LockedFile(path, self._sizes[i], sha256=self._digests[32 * i:32 * i + 32].hex(),
                              xet=xet.hex() if xet is not None else None)
        return LockedFile(path, self._sizes[i], git_sha1=self._digests[32 * i:32 * i + 20].hex())

    def __iter__(self) -> Iterator[LockedFile]:
        for i in range(len(self)):
            yield self._file(i)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FileTable):
            return (self._paths, self._starts, self._sizes, self._digests, self._sha256,
                    self._xet) == (other._paths, other._starts, other._sizes, other._digests,
                                   other._sha256, other._xet)
        if isinstance(other, Sequence):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))  # equal to a tuple of the same files, as __eq__ says

    def __repr__(self) -> str:
        return f"FileTable({len(self)} files)"


# The policy classes of formats other than pickle (FormatScan.kind, each a setting of
# [tool.wlock.policy] by the same name).
FORMAT_KINDS = ("chat-template", "keras", "onnx-external-data")


@dataclass(frozen=True, slots=True)
class FormatScan:
    """What a locked file of a format other than pickle would run or read, by the policy
    class that judges it (`kind`, the weights.toml setting's name): a chat template that
    reaches past the renderers' sandbox ("chat-template", `key` the template's), a Keras
    config naming code ("keras", `key` the config: config.json, model_config), an ONNX tensor
    whose external data lies outside the model's folder ("onnx-external-data", `key` the
    tensor). `findings` say what, in words; `unreadable`, why it could not be judged.
    Recorded so the policy judges it offline; a file with nothing to say is not recorded."""

    kind: str
    path: str
    key: str
    findings: tuple[str, ...]
    unreadable: str | None = None


@dataclass(frozen=True, slots=True)
class PickleScan:
    """A locked file's pickle imports (`module.name`, sorted), or that it holds no pickle:
    what `torch.load` would call, recorded so a policy can judge it offline. `unreadable`:
    why the judgement could not read it to its end (then the imports are those seen before,
    and the policy refuses it as unknown)."""

    path: str
    imports: tuple[str, ...]
    pickle: bool = True
    unreadable: str | None = None


@dataclass(frozen=True, slots=True)
class LockedRepo:
    kind: RepoKind
    id: str
    requested: str
    revision: str
    files: Sequence[LockedFile]  # a tuple, or a FileTable for a lock read from disk
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    loader: str | None = None
    variant: str | None = None
    base: str | None = None  # the adapter's base as weights.toml named it (`base`)
    config: str | None = None  # a dataset's config, as weights.toml named it
    split: str | None = None  # ... and its split(s)
    mmproj: bool = True  # false: a GGUF repo's projector left out
    # Models this one cannot load without (an adapter's base, a remote-code repo), each
    # locked as an entry of its own; an entry weights.toml does not list is there only
    # because something requires it.
    requires: tuple[str, ...] = ()
    # What the loader left out: paths (a folder none of whose files was taken written once,
    # `onnx/`) and their bytes, so `wlock tree` can say it offline.
    skipped: tuple[str, ...] = ()
    skipped_size: int = 0
    # The imports of each locked pickle (recorded when the entry was resolved; a lock made
    # before has none, and `wlock audit` scans the bytes on disk instead).
    pickles: tuple[PickleScan, ...] = ()
    # From the card (cardData): the licence(s) (SPDX ids, or "other" with its name; a card
    # may list several) and the models it names as its base: provenance, never synced.
    licenses: tuple[str, ...] = ()
    license_name: str | None = None
    base_models: tuple[str, ...] = ()
    # The classes config.json's `auto_map` names: code `trust_remote_code=True` would run.
    remote_code: tuple[str, ...] = ()
    # Chat templates, Keras configs and ONNX external data that would run code or read past
    # the model's folder, or could not be judged.
    formats: tuple[FormatScan, ...] = ()
    # The digest of the paths of `files` and `skipped` as `wlock lock` wrote them
    # (`paths-digest`), None in a lock made before it: a line deleted by hand shows
    # (lockfile.deleted_lines).
    paths_digest: str | None = field(default=None, compare=False)
    # False for an entry read from a lock written before `paths-digest`: kept as it was
    # locked, it is written again without one, so an unchanged project relocks byte for
    # byte; an entry resolved anew gets one.
    sealed: bool = field(default=True, compare=False)

    @property
    def key(self) -> tuple[RepoKind, str]:
        return (self.kind, self.id)

    @property
    def license(self) -> str | None:
        """The card's licence when it names one, its first when it lists several."""
        return self.licenses[0] if self.licenses else None

    @property
    def extras(self) -> tuple[str, ...]:
        return loader_extras(self.config, self.split, self.mmproj)

    @property
    def selection(self) -> Selection:
        return selection(self.requested, self.include, self.exclude, self.loader, self.variant,
                         self.base, self.extras)

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)


@dataclass(frozen=True, slots=True)
class Lock:
    manifest_digest: str
    repos: tuple[LockedRepo, ...]
    version: int = 1

    def find(self, kind: RepoKind, repo_id: str) -> LockedRepo | None:
        return next((r for r in self.repos if r.key == (kind, repo_id)), None)


@dataclass(frozen=True, slots=True)
class LockChange:
    """One line of `wlock lock --dry-run`: a pin that appears, moves or goes away, or stays
    while its files are re-selected (old == new)."""

    kind: RepoKind
    id: str
    requested: str
    old: str | None
    new: str | None

    def render(self) -> str:
        if self.old is not None and self.old == self.new:
            return f"{self.id}  {self.requested}  {self.old[:7]} (kept; files re-selected)"
        old = self.old[:7] if self.old else "(new)"
        new = self.new[:7] if self.new else "(removed)"
        return f"{self.id}  {self.requested}  {old} -> {new}"


@dataclass(frozen=True, slots=True)
class LockResult:
    lock: Lock
    changes: tuple[LockChange, ...]
    written: bool
    renamed: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = ()  # how a merge conflict in weights.lock was resolved
    # A line per entry resolved with a loader (what it locked of the repo, and what not) and
    # per dependency locked (what requires it, at which commit).
    selected: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RepoSyncPlan:
    """What one locked repo needs in the cache; computed from `stat` alone."""

    repo: LockedRepo
    fetch: tuple[LockedFile, ...]  # blob missing: download (one per distinct blob)
    corrupt: tuple[LockedFile, ...]  # blob present with the wrong size: download again
    link: tuple[LockedFile, ...]  # blob present (maybe from another revision): link only
    present: int  # how many files are in place (not kept one by one: locks can be huge)
    ref: str | None  # refs/<name> to write, when missing or pointing elsewhere

    def in_place(self) -> Iterator[LockedFile]:
        """The files whose blob is present with the right size (linked or to link)."""
        missing = {f.path for f in (*self.fetch, *self.corrupt)}
        return (f for f in self.repo.files if f.path not in missing)

    @property
    def downloads(self) -> tuple[LockedFile, ...]:
        """Files whose blob must be fetched, each blob once."""
        seen: set[str] = set()
        out = []
        for f in (*self.fetch, *self.corrupt):
            if f.etag not in seen:
                seen.add(f.etag)
                out.append(f)
        return tuple(out)

    @property
    def needs_work(self) -> bool:
        return bool(self.fetch or self.corrupt or self.link or self.ref)

    @property
    def files_ready(self) -> bool:
        """Every locked file is in the cache at this commit (the shared ref may point at
        another project's commit: that is not this project's business)."""
        return not (self.fetch or self.corrupt or self.link)


@dataclass(frozen=True, slots=True)
class SyncPlan:
    cache_dir: str
    repos: tuple[RepoSyncPlan, ...]

    @property
    def bytes_to_fetch(self) -> int:
        return sum(f.size for r in self.repos for f in r.downloads)

    @property
    def files_to_fetch(self) -> int:
        return sum(len(r.downloads) for r in self.repos)

    @property
    def files_present(self) -> int:
        return sum(r.present for r in self.repos)

    @property
    def files_to_link(self) -> int:
        """Files whose blob is in but whose snapshot link is not (an interrupted sync)."""
        return sum(len(r.link) for r in self.repos)

    @property
    def is_noop(self) -> bool:
        return not any(r.needs_work for r in self.repos)


@dataclass(frozen=True, slots=True)
class SyncResult:
    plan: SyncPlan
    fetched_files: int  # blobs the Hub served (not a source, another writer, an empty file)
    fetched_bytes: int  # from the Hub
    seconds: float
    # Per source other than the Hub (another cache, an archive): [files, bytes] it gave.
    restored: dict[str, list[int]] = field(default_factory=dict)
    # One line per blob a source held with wrong bytes (refused, then fetched elsewhere).
    refused: tuple[str, ...] = ()
    # Files (and bytes) another sync, on this node or another, published while this one
    # waited for them: in no other count, so the report still adds up to the lock.
    by_others: tuple[int, int] = (0, 0)
    # What the link probe measured and chose (wlock.cache.engines.link.LinkTuning), when large
    # files came from the Hub.
    link: Any = None
    # Small files' concurrency (wlock.cache.engines.small.SmallGate), when any came from the Hub.
    small: Any = None
    # Chunk-level upgrades (wlock.cache.upgrade): files, copied_bytes, fetched_bytes (from
    # the Hub, in no other count), and downloaded_whole: a line per file tried and then
    # downloaded whole instead, with the reason.
    upgraded: dict[str, Any] = field(default_factory=dict)
    # Each large file the Hub served: "repo/path" -> (engine, why it when not the default).
    engines: dict[str, tuple[str, str]] = field(default_factory=dict)
    # Each file through hf_transfer: the connections it got (chosen as files finish:
    # wlock.cache.engines.link.Streams).
    connections: dict[str, int] = field(default_factory=dict)
    # Each large file hashed again whole after its download, and its bytes: only where its
    # digest could not follow the file as it landed (Transfer.read_again).
    read_again: dict[str, int] = field(default_factory=dict)


ProblemKind = Literal["missing", "wrong-size", "wrong-hash", "wrong-link", "wrong-ref", "unsafe"]


@dataclass(frozen=True, slots=True)
class Problem:
    """One way the cache differs from the lock."""

    kind: ProblemKind
    repo_kind: RepoKind
    repo_id: str
    path: str
    expected: str
    actual: str

    def render(self) -> str:
        what = {
            "missing": "missing",
            "wrong-size": "wrong size",
            "wrong-hash": "wrong bytes",
            "wrong-link": "wrong link",
            "wrong-ref": "wrong ref",
            "unsafe": "not a file of the cache",
        }[self.kind]
        detail = f"expected {self.expected}, found {self.actual}"
        return f"{what}: {self.repo_kind} {self.repo_id}: {self.path}: {detail}"


@dataclass(frozen=True, slots=True)
class CheckReport:
    cache_dir: str
    repos: int
    files: int
    bytes_hashed: int
    problems: tuple[Problem, ...]
    seconds: float
    # Not failures: a shared ref that another project's sync moved to its own commit.
    notes: tuple[Problem, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems
