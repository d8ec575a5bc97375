"""An OCI registry as an archive: each locked repo pushed as a CNCF ModelPack artifact, and a
source `wlock sync` restores from, verified against the lock, without the Hub.

    oci://REGISTRY/NAMESPACE   ->  REGISTRY/NAMESPACE/<org>/<name>:<commit>   (a model)
                                   REGISTRY/NAMESPACE/datasets/<org>/<name>:<commit>

One artifact per locked repo at its commit (ModelPack, model-spec v1): the manifest's
`artifactType` is `application/vnd.cncf.model.manifest.v1+json`, its config
`application/vnd.cncf.model.config.v1+json` (the repo, its commit, the layers' digests), one
layer per locked file in ModelPack's media type for it, annotated with its path
(`org.cncf.model.filepath`) and the lock's hash; the Hub's provenance in the annotations
(`org.opencontainers.image.source`, `.revision`). Every LFS file's sha256 **is** its blob's
digest, so a large file is pushed without hashing it again; a regular file, which the lock
records by its git sha1, is hashed both ways on the way in, and refused when the sha1 is
not the lock's.

It is an archive like a folder or a bucket (`wlock archive --to oci://...`, `wlock sync
--archive oci://...`), with the registry's own addressing: a registry cannot list its blobs,
so what it holds is asked blob by blob (HEAD by digest, in that repository) and a pull asks
the artifact's manifest once per repo. The protocol is oras-py's (the ORAS project's Python
client: the registry token flow, basic auth, Docker's and Podman's credentials files,
chunked uploads); wlock writes none of it.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wlock.cache.layout import RepoPaths
from wlock.errors import ArchiveError, UsageError
from wlock.hashing import new_digest
from wlock.models import Lock, LockedFile, LockedRepo

ARTIFACT_TYPE = "application/vnd.cncf.model.manifest.v1+json"
CONFIG_TYPE = "application/vnd.cncf.model.config.v1+json"
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
WEIGHT = "application/vnd.cncf.model.weight.v1.raw"
WEIGHT_CONFIG = "application/vnd.cncf.model.weight.config.v1.raw"
DOC = "application/vnd.cncf.model.doc.v1.raw"
CODE = "application/vnd.cncf.model.code.v1.raw"
DATASET = "application/vnd.cncf.model.dataset.v1.raw"
FILEPATH = "org.cncf.model.filepath"
# A file smaller than this is uploaded in one request, read whole; a larger one in chunks
# of this size (each a request), never whole in memory, resumable ($WLOCK_OCI_CHUNK).
CHUNK = 64 * 1024 * 1024
# Where a chunked upload keeps its session (the registry's upload URL and how far it got),
# so a push killed mid-blob goes on from there: in the cache it reads from.
UPLOADS = ".wlock-oci-uploads"

_WEIGHTS = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".onnx", ".onnx_data",
            ".h5", ".msgpack", ".npz", ".npy", ".pkl", ".keras", ".tflite", ".ot", ".pt2")
_DOCS = (".md", ".txt", ".rst", ".pdf")


def is_oci(url: str) -> bool:
    return url.startswith(("oci://", "oci+http://"))


def media_type(repo: LockedRepo, path: str) -> str:
    """ModelPack's media type for a locked file."""
    name = path.rsplit("/", 1)[-1].lower()
    if repo.kind == "dataset":
        return DOC if name.endswith(_DOCS) else DATASET
    if name.endswith(_WEIGHTS):
        return WEIGHT
    if name.endswith(".py"):
        return CODE
    if name.endswith(_DOCS) or name in ("license", "notice", ".gitattributes"):
        return DOC
    return WEIGHT_CONFIG


@dataclass(frozen=True, slots=True)
class Target:
    """Where an `oci://REGISTRY/NAMESPACE` URL puts each locked repo."""

    url: str
    registry: str  # host[:port]
    namespace: str
    insecure: bool  # plain HTTP (loopback, labs: asked for, never guessed)

    @classmethod
    def parse(cls, url: str) -> Target:
        """`oci://REGISTRY/NAMESPACE` (HTTPS), or `oci+http://...` for a registry that speaks
        plain HTTP, asked for by name (a registry on loopback, a lab's)."""
        insecure = url.startswith("oci+http://")
        rest = url.removeprefix("oci+http://").removeprefix("oci://")
        registry, _, namespace = rest.partition("/")
        namespace = namespace.strip("/")
        if not registry or not namespace or ":" in namespace or "@" in namespace:
            raise UsageError(f"{url}: not an oci://REGISTRY/NAMESPACE URL",
                             hint="For example oci://registry.example.com/ml/weights: each "
                             "locked repo goes to NAMESPACE/<org>/<name>, tagged by its commit.")
        return cls(url, registry, namespace, insecure)

    def repository(self, repo: LockedRepo) -> str:
        kind = "datasets/" if repo.kind == "dataset" else ""
        return f"{self.namespace}/{kind}{repo.id}".lower()

    def reference(self, repo: LockedRepo, tag: str | None = None) -> str:
        return f"{self.registry}/{self.repository(repo)}:{tag or repo.revision}"


def client(target: Target) -> Any:
    """oras-py's registry client for `target`: its basic-auth backend for a registry that
    asks for Basic credentials (distribution's htpasswd), else its token flow (Docker Hub,
    Harbor, GHCR, Zot); the user's credentials loaded as `_container` asks."""
    try:
        import oras.provider
        import requests
    except ImportError:
        raise UsageError("oci:// needs oras-py, which is not installed",
                         hint="pip install 'wlock[oci]' (or pip install oras)") from None

    class Registry(oras.provider.Registry):  # type: ignore[misc]
        # oras retries every failed request five times, sleeping up to 83 s between
        # tries, a wrong password included: wlock says what failed at once.
        do_request = oras.provider.Registry.do_request.__wrapped__

    scheme = "http" if target.insecure else "https"
    try:
        asked = requests.get(f"{scheme}://{target.registry}/v2/", timeout=30)
    except requests.RequestException as e:
        raise ArchiveError(f"{target.url}: the registry cannot be reached ({type(e).__name__})",
                           hint="Check the address; a registry on plain HTTP is named "
                           "oci+http://.") from None
    challenge = asked.headers.get("Www-Authenticate", "").lower()
    backend = "basic" if asked.status_code == 401 and challenge.startswith("basic") else "token"
    registry = Registry(hostname=target.registry, insecure=target.insecure, auth_backend=backend)
    registry.wlock_basic = backend == "basic"
    return registry


@contextmanager
def reaching(target: Target) -> Iterator[None]:
    """A request that cannot reach the registry, said as the archive's error (exit 5)."""
    import requests

    try:
        yield
    except requests.RequestException as e:
        raise ArchiveError(f"{target.url}: the registry stopped answering "
                           f"({type(e).__name__})") from None


def auth_files() -> list[str]:
    """The credentials files `docker login` and `podman login` write, as each tool finds
    them: $DOCKER_CONFIG/config.json (else ~/.docker/config.json, which oras-py reads
    itself), $REGISTRY_AUTH_FILE, $XDG_RUNTIME_DIR/containers/auth.json,
    ~/.config/containers/auth.json."""
    import os

    found = []
    if os.environ.get("DOCKER_CONFIG"):
        found.append(os.path.join(os.environ["DOCKER_CONFIG"], "config.json"))
    if os.environ.get("REGISTRY_AUTH_FILE"):
        found.append(os.environ["REGISTRY_AUTH_FILE"])
    if os.environ.get("XDG_RUNTIME_DIR"):
        found.append(os.path.join(os.environ["XDG_RUNTIME_DIR"], "containers", "auth.json"))
    found.append(os.path.expanduser("~/.config/containers/auth.json"))
    return [path for path in found if os.path.isfile(path)]


def _container(registry: Any, target: Target, repo: LockedRepo, tag: str | None = None) -> Any:
    container = registry.get_container(target.reference(repo, tag))
    registry.auth.load_configs(container, configs=auth_files())
    if getattr(registry, "wlock_basic", False) and not getattr(registry.auth, "_basic_auth",
                                                               None):
        searched = ", ".join(auth_files() or ["~/.docker/config.json"])
        raise ArchiveError(f"{target.url}: the registry asks for a user and password, and "
                           f"none for {target.registry} is in {searched}",
                           hint=f"Log in with `docker login {target.registry}` (or podman "
                           "login; REGISTRY_AUTH_FILE names another file).")
    return container


def _checked(response: Any, what: str, target: Target) -> Any:
    if response.status_code in (200, 201, 202):
        return response
    if response.status_code in (401, 403):
        raise ArchiveError(f"{target.url}: {what}: the registry refused the credentials "
                           f"(HTTP {response.status_code})",
                           hint=f"Log in with `docker login {target.registry}` (or podman "
                           "login; REGISTRY_AUTH_FILE names another file).")
    raise ArchiveError(f"{target.url}: {what}: HTTP {response.status_code} "
                       f"{response.text[:200]!r}")


@dataclass
class PushResult:
    url: str
    uploaded_files: int = 0
    uploaded_bytes: int = 0
    present_files: int = 0
    mounted_files: int = 0  # taken from another repository of the registry, not uploaded
    artifacts: list[str] = field(default_factory=list)  # "registry/repo:commit" pushed
    missing: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)


def _sha256_of(path: Path, file: LockedFile) -> str:
    """The sha256 of a cache blob: the lock's own for an LFS file; else hashed, with the git
    sha1 the lock records checked on the way (WrongBytes-like ValueError when it differs)."""
    if file.hash_kind == "sha256":
        return file.etag
    sha1 = new_digest(file.hash_kind, file.size)
    sha256 = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1024 * 1024):
            sha1.update(chunk)
            sha256.update(chunk)
    if sha1.hexdigest() != file.etag:
        raise ValueError(f"git sha1 {sha1.hexdigest()}")
    return sha256.hexdigest()


def push_lock(lock: Lock, cache_dir: Path, target: Target, *, tag: str | None = None,
              on_bytes: Callable[[str, int], None] | None = None) -> PushResult:
    """Push each locked repo as a ModelPack artifact tagged by its commit (and `tag`): every
    blob the repository lacks (HEAD by digest) uploaded from the cache, then the config and
    the manifest. A repo with a blob missing from the cache or with wrong bytes there is not
    given a manifest (it is reported)."""
    import os

    registry = client(target)
    result = PushResult(url=target.url)
    chunk = int(os.environ.get("WLOCK_OCI_CHUNK") or CHUNK)
    seen: dict[str, str] = {}  # digest -> a repository of this registry that has it
    with reaching(target):
        for repo in lock.repos:
            _push_repo(registry, repo, cache_dir, target, tag, chunk, result, on_bytes, seen)
    return result


def _push_repo(registry: Any, repo: LockedRepo, cache_dir: Path, target: Target,
               tag: str | None, chunk: int, result: PushResult,
               on_bytes: Callable[[str, int], None] | None, seen: dict[str, str],
               jobs: int = 4) -> None:
    """One locked repo's blobs (those the repository lacks uploaded `jobs` at once), config
    and manifest (none when a blob could not be pushed)."""
    from wlock.cancel import each

    container = _container(registry, target, repo)
    layers = []
    complete = True
    todo: list[tuple[dict[str, Any], Path, LockedFile]] = []
    for f in repo.files:
        source = RepoPaths.of(cache_dir, repo).blob(f.etag)
        where = f"{repo.id}/{f.path}"
        try:
            digest = "sha256:" + _sha256_of(source, f)
        except FileNotFoundError:
            result.missing.append(where)
            complete = False
            continue
        except ValueError as e:
            result.wrong.append(f"{where} (expected {f.hash_kind} {f.etag}; got {e})")
            complete = False
            continue
        layer = {"mediaType": media_type(repo, f.path), "digest": digest, "size": f.size,
                 "annotations": {FILEPATH: f.path, f"dev.wlock.{f.hash_kind}": f.etag}}
        layers.append(layer)
        if _has_blob(registry, container, digest, target):
            result.present_files += 1
        elif digest in seen and _mounted(registry, container, digest, seen[digest], target):
            result.mounted_files += 1
        else:
            todo.append((layer, source, f))
        seen.setdefault(digest, target.repository(repo))

    def upload(item: tuple[dict[str, Any], Path, LockedFile]) -> None:
        layer, source, f = item
        where = f"{repo.id}/{f.path}"
        with reaching(target):
            if f.size > chunk:
                _resumable_upload(registry, container, layer, source, chunk,
                                  _session_file(cache_dir, target, repo, layer["digest"]),
                                  target, where)
            else:
                _checked(registry.upload_blob(str(source), container, layer),
                         f"uploading {where}", target)

    # Daemon workers (cancel.each): on Ctrl-C or SIGTERM each ends the chunk it is sending
    # (10 s at most; a second Ctrl-C ends the wait) and keeps its session, so the next push
    # goes on from there.
    todo.sort(key=lambda item: -item[2].size)
    for (_, _, f), error in each(upload, todo, jobs, grace=10.0):
        if error is not None:
            raise error
        result.uploaded_files += 1
        result.uploaded_bytes += f.size
        if on_bytes:
            on_bytes(f"{repo.id}/{f.path}", f.size)
    if not complete:
        return
    config = json.dumps(_config(repo, layers), indent=1, sort_keys=True).encode()
    config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
    config_layer = {"mediaType": CONFIG_TYPE, "size": len(config), "digest": config_digest}
    if not _has_blob(registry, container, config_digest, target):
        _upload_bytes(registry, container, config_layer, config, target)
    manifest = {
        "schemaVersion": 2, "mediaType": MANIFEST_TYPE, "artifactType": ARTIFACT_TYPE,
        "config": config_layer, "layers": layers,
        "annotations": {
            "org.opencontainers.image.source": f"https://huggingface.co/"
            f"{'datasets/' if repo.kind == 'dataset' else ''}{repo.id}",
            "org.opencontainers.image.revision": repo.revision,
            "org.opencontainers.image.title": repo.id,
            "dev.wlock.kind": repo.kind, "dev.wlock.id": repo.id,
        },
    }
    for name in filter(None, (repo.revision, tag)):
        _checked(registry.upload_manifest(manifest, _container(registry, target, repo,
                                                               name)),
                 f"writing the manifest of {repo.id}@{repo.revision[:7]}", target)
    result.artifacts.append(target.reference(repo))


def _has_blob(registry: Any, container: Any, digest: str, target: Target) -> bool:
    """HEAD by digest in the repository: there (200), or not (404); anything else, a
    refusal said as such (oras' blob_exists takes a 401 for "not there")."""
    asked = registry.get_blob(container, digest, head=True)
    if asked.status_code == 404:
        return False
    _checked(asked, f"asking for blob {digest[:19]}", target)
    return True


def _mounted(registry: Any, container: Any, digest: str, source: str, target: Target) -> bool:
    """A blob another repository of the registry holds, mounted into this one without its
    bytes (the spec's cross-repository mount: `POST ...?mount=<digest>&from=<repository>`,
    201 when done); a registry that declines opens an upload session instead (202),
    which is left to expire, and the bytes are sent."""
    from oras.utils import append_url_params

    asked = registry.do_request(
        append_url_params(f"{registry.prefix}://{container.upload_blob_url()}",
                          {"mount": digest, "from": source}),
        "POST", headers={"Content-Length": "0", **registry.headers})
    if asked.status_code == 201:
        return True
    if asked.status_code in (401, 403):
        _checked(asked, f"mounting blob {digest[:19]}", target)
    return False


def _session_file(cache_dir: Path, target: Target, repo: LockedRepo, digest: str) -> Path:
    name = hashlib.sha256(f"{target.registry}/{target.repository(repo)}@{digest}".encode())
    return cache_dir / UPLOADS / f"{name.hexdigest()[:32]}.json"


def _resumable_upload(registry: Any, container: Any, layer: dict[str, Any], source: Path,
                      chunk: int, state: Path, target: Target, where: str) -> None:
    """A blob uploaded in chunks (the distribution spec's POST, PATCH..., PUT), its session
    saved after each chunk; a session left by a push that was killed is asked how far it got
    (GET: its `Range`) and continued from there, or begun again when the registry dropped it.
    oras-py uploads in chunks but cannot resume: the requests go through its client (auth,
    retries), the steps are the spec's."""
    from oras.utils import append_url_params

    session, start = None, 0
    try:
        saved = json.loads(state.read_text())
        session = str(saved["session"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    if session is not None:
        asked = registry.do_request(session, "GET", headers=dict(registry.headers))
        reached = asked.headers.get("Range", "") if asked.status_code == 204 else ""
        if reached.startswith("0-"):
            start = int(reached.removeprefix("0-")) + 1
            session = registry._get_location(asked, container) or session
        else:
            session, start = None, 0
    if session is None:
        opened = _checked(registry.do_request(
            f"{registry.prefix}://{container.upload_blob_url()}", "POST",
            headers={"Content-Length": "0", **registry.headers}), f"uploading {where}", target)
        session = registry._get_location(opened, container)
    state.parent.mkdir(parents=True, exist_ok=True)
    from wlock.cancel import Cancelled, stopped

    with source.open("rb") as f:
        f.seek(start)
        while piece := f.read(chunk):
            if stopped():  # Ctrl-C or SIGTERM: the session, as it stands, is kept
                raise Cancelled
            end = start + len(piece) - 1
            sent = _checked(registry.do_request(session, "PATCH", data=piece, headers={
                "Content-Range": f"{start}-{end}", "Content-Length": str(len(piece)),
                "Content-Type": "application/octet-stream", **registry.headers}),
                f"uploading {where}", target)
            session = registry._get_location(sent, container) or session
            start = end + 1
            state.write_text(json.dumps({"session": session, "offset": start}))
    _checked(registry.do_request(append_url_params(session, {"digest": layer["digest"]}),
                                 "PUT", headers={"Content-Length": "0", **registry.headers}),
             f"uploading {where}", target)
    state.unlink(missing_ok=True)


def _config(repo: LockedRepo, layers: list[dict[str, Any]]) -> dict[str, Any]:
    """ModelPack's config: the model's descriptor (with the Hub's repo and commit) and its
    filesystem, the layers' digests in order."""
    return {
        "descriptor": {"name": repo.id, "revision": repo.revision,
                       "sourceURL": f"https://huggingface.co/{repo.id}", "kind": repo.kind},
        "config": {},
        "modelfs": {"type": "layers", "diffIds": [layer["digest"] for layer in layers]},
    }


def _upload_bytes(registry: Any, container: Any, layer: dict[str, Any], data: bytes,
                  target: Target) -> None:
    import tempfile

    with tempfile.NamedTemporaryFile() as f:
        f.write(data)
        f.flush()
        _checked(registry.upload_blob(f.name, container, layer), "uploading a config",
                 target)


class OciSource:
    """A registry as a source for `wlock sync`: per locked repo its artifact's manifest is
    read once (tagged by the commit), then each file it holds is fetched by digest; the sync
    verifies the bytes against the lock, as a Hub download. A repo the registry lacks costs
    one request and no more."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self._registry: Any = None
        self._manifests: dict[str, dict[str, dict[str, Any]]] = {}
        self._lock = threading.Lock()

    @property
    def label(self) -> str:
        return f"registry {self.target.url}"

    def _layers(self, repo: LockedRepo) -> dict[str, dict[str, Any]]:
        key = f"{repo.kind}/{repo.id}@{repo.revision}"
        with self._lock:
            if key not in self._manifests:
                if self._registry is None:
                    self._registry = client(self.target)
                container = _container(self._registry, self.target, repo)
                try:
                    manifest = self._registry.get_manifest(container)
                except Exception:  # noqa: BLE001 - not there (or unreadable): the Hub's turn
                    manifest = {}
                self._manifests[key] = {
                    layer.get("annotations", {}).get(FILEPATH): layer
                    for layer in manifest.get("layers", []) if isinstance(layer, dict)}
            return self._manifests[key]

    def fetch(self, repo: LockedRepo, file: LockedFile, temp: Path) -> bool | str:
        with reaching(self.target):
            layer = self._layers(repo).get(file.path)
            if layer is None or layer.get("size") != file.size:
                return False
            container = _container(self._registry, self.target, repo)
            digest = new_digest(file.hash_kind, file.size)
            with self._registry.get_blob(container, layer["digest"], stream=True) as response:
                _checked(response, f"reading {repo.id}/{file.path}", self.target)
                with temp.open("wb") as out:
                    for chunk in response.raw.stream(1024 * 1024, decode_content=False):
                        out.write(chunk)
                        digest.update(chunk)
        # Hashed on the way, in the lock's own hash: the sync compares it and reads the file
        # no second time.
        return str(digest.hexdigest())
