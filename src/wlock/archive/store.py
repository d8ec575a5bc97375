"""An archive: a folder (a NAS mount) or an object store holding the locked blobs for good.

Layout, the same on both:

    <root>/blobs/<etag>                                   the bytes, once, by the lock's name
    <root>/revisions/<kind>s--<org>--<name>/<commit>.json  per locked revision: its files,
                                                           sizes and hashes

Content-addressed, so a blob used by many revisions (or many projects) is stored once, and
self-describing, so the archive can be checked and restored from without the project. A
revision's manifest is written after all its blobs, as a ref is written after its snapshot.

Object stores go through obstore (`s3://`, and `gs://`, `az://` alike): the endpoint and
credentials come from the usual AWS variables and profiles (`AWS_ENDPOINT_URL`,
`AWS_ACCESS_KEY_ID`, `AWS_PROFILE`, ...), never from weights.toml. An object is created whole
or not at all (a single PUT, or a multipart upload completed only after every byte was
hashed, aborted otherwise), so a partial upload is never visible under its final name. A
folder gets a temp file renamed into place by a hard link, which never replaces another
writer's blob.
"""

from __future__ import annotations

import contextlib
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from wlock.cancel import call
from wlock.errors import ArchiveError, LocalError, UsageError
from wlock.fastcopy import clone_or_copy
from wlock.hashing import hash_file, new_digest

CHUNK = 8 * 1024 * 1024
PART = 16 * 1024 * 1024  # multipart size for uploads (S3's minimum is 5 MiB)


class WrongBytes(Exception):
    """The bytes read for the archive do not hash to their name: nothing was stored."""

    def __init__(self, actual: str, size: int) -> None:
        super().__init__(f"got {actual}, {size} bytes")
        self.actual, self.size = actual, size


class Archive(ABC):
    """What an archive can do; one object per command, safe to use from many threads."""

    url: str

    @abstractmethod
    def listing(self, folder: str) -> dict[str, int]:
        """Every object under `folder` ("blobs", "revisions/<...>"): relative name -> size.
        One listing (one request per thousand objects on S3), never a request per file."""

    @abstractmethod
    def put_blob(self, etag: str, source: Path, hash_kind: str, size: int) -> None:
        """Store `source` as blobs/<etag>, hashing the bytes on their way in; raises
        WrongBytes (and stores nothing) when they do not match `etag` and `size`."""

    @abstractmethod
    def get_blob(self, etag: str, dest: Path, hash_kind: str, size: int) -> str | None:
        """Write blobs/<etag> into the local file `dest`; returns the digest of the bytes
        written when they were hashed on their way (None: not hashed, the caller hashes).
        Never trusted for more: the caller compares it with the lock."""

    @abstractmethod
    def put_text(self, name: str, text: str) -> None:
        """Store a small document (a revision's manifest) under `name`, whole."""

    @abstractmethod
    def get_text(self, name: str) -> str | None:
        """A small document, or None when absent."""


def open_archive(url: str) -> Archive:
    """An archive at `url`: a folder path (or file://), or an object-store URL such as
    s3://bucket/prefix."""
    if "://" not in url or url.startswith("file://"):
        return FolderArchive(Path(url.removeprefix("file://")).expanduser())
    protocol = url.split("://", 1)[0]
    if "@" in url.split("://", 1)[1].split("/", 1)[0]:
        raise UsageError(f"the archive URL {url.split('@')[-1]!r} carries credentials",
                         hint="Give them through the environment (AWS_ACCESS_KEY_ID, "
                         "AWS_PROFILE, ...), never in a URL or in weights.toml.")
    return ObjectArchive(url, protocol)


class FolderArchive(Archive):
    """A folder: a NAS mount, a second disk."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.url = str(self.root)

    def listing(self, folder: str) -> dict[str, int]:
        base = self.root / folder
        found: dict[str, int] = {}
        try:
            for dirpath, _, names in os.walk(base):
                rel = os.path.relpath(dirpath, base)
                for name in names:
                    if name.startswith("."):
                        continue  # a temp file of an upload in flight
                    with contextlib.suppress(OSError):
                        found[name if rel == "." else f"{rel}/{name}"] = os.stat(
                            os.path.join(dirpath, name)).st_size
        except OSError as e:
            raise self._error(e, "list") from e
        return found

    def _prepare(self, target: Path) -> Path:
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise self._error(e, "write") from e
        return target.with_name(f".{target.name}.{os.getpid()}.{os.urandom(4).hex()}.part")

    def _publish(self, temp: Path, target: Path) -> None:
        os.chmod(temp, 0o444)
        try:
            os.link(temp, target)
        except FileExistsError:
            pass  # another archiver stored the same bytes (the name is their hash)
        except OSError:
            if not target.exists():
                os.replace(temp, target)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)

    def put_blob(self, etag: str, source: Path, hash_kind: str, size: int) -> None:
        target = self.root / "blobs" / etag
        temp = self._prepare(target)
        try:
            clone_or_copy(source, temp)
            # What is verified is what landed in the archive, not what was meant to.
            actual_size = os.stat(temp).st_size
            actual = hash_file(temp, hash_kind) if actual_size == size else "?"
            if actual != etag:
                raise WrongBytes(actual, actual_size)
            self._publish(temp, target)
        except FileNotFoundError as e:
            if str(e.filename) == str(source):
                raise  # the cache lacks it: the caller reports the file, not the archive
            raise self._error(e, "write") from e
        except OSError as e:
            raise self._error(e, "write") from e
        finally:
            with contextlib.suppress(OSError):
                os.unlink(temp)

    def get_blob(self, etag: str, dest: Path, hash_kind: str, size: int) -> str | None:
        clone_or_copy(self.root / "blobs" / etag, dest)  # in the kernel: hashed after
        return None

    def put_text(self, name: str, text: str) -> None:
        target = self.root / name
        temp = self._prepare(target)
        try:
            temp.write_text(text, encoding="utf-8")
            os.chmod(temp, 0o444)
            os.replace(temp, target)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise self._error(e, "write") from e

    def get_text(self, name: str) -> str | None:
        try:
            return (self.root / name).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as e:
            raise self._error(e, "read") from e

    def _error(self, e: OSError, what: str) -> LocalError:
        return LocalError(
            f"cannot {what} the archive at {self.url}: {e.strerror or e}"
            + (f" ({e.filename})" if e.filename else ""),
            hint="Check that the folder is mounted and writable, or give another with "
            "--archive / $WLOCK_ARCHIVE.")


class ObjectArchive(Archive):
    """An object store through obstore (Rust's object_store): s3://, gs://, az://.

    Chosen over fsspec's s3fs by measurement (bench/archive.py, same objects on one S3
    server): obstore's bulk download ran at 3.4x s3fs's, whose bytes all pass through one
    Python event loop."""

    def __init__(self, url: str, protocol: str) -> None:
        self.url = url.rstrip("/")
        try:
            from obstore.store import from_url
        except ImportError:
            raise UsageError(f"no storage library for {protocol}:// archives is installed",
                             hint="Install wlock's object-store extra: "
                             "`pip install 'wlock[s3]'` (obstore).") from None
        from datetime import timedelta

        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        options: dict[str, Any] = {
            # Fail fast on a dead endpoint: a restore then goes on to the Hub within seconds.
            "client_options": {"connect_timeout": "5s", "timeout": "120s",
                               # A local MinIO or SeaweedFS is often plain http.
                               "allow_http": bool(endpoint and endpoint.startswith("http:"))},
            "retry_config": {"max_retries": 3, "retry_timeout": timedelta(seconds=20),
                             "backoff": {"init_backoff": timedelta(milliseconds=100),
                                         "max_backoff": timedelta(seconds=2), "base": 2}},
        }
        if protocol == "s3":
            if endpoint:
                options["endpoint"] = endpoint
            if os.environ.get("AWS_PROFILE") and not os.environ.get("AWS_ACCESS_KEY_ID"):
                options["credential_provider"] = _profile_credentials()
        try:
            self.store = from_url(self.url, **options)
        except Exception as e:
            raise UsageError(f"cannot use the archive URL {self.url}: {_scrub(str(e))}",
                             hint="Give a folder, or s3://bucket/prefix.") from e
        self._lock = threading.Lock()

    def listing(self, folder: str) -> dict[str, int]:
        import obstore

        def pages() -> dict[str, int]:
            found: dict[str, int] = {}
            for page in obstore.list(self.store, folder + "/", chunk_size=1000):
                for meta in page:
                    found[meta["path"][len(folder) + 1:]] = int(meta["size"])
            return found

        try:
            # Off the main thread (cancel.call): a frozen server holds obstore's call where
            # no Ctrl-C reaches Python.
            return call(pages)
        except Exception as e:
            raise self._error(e, "list") from e

    def put_blob(self, etag: str, source: Path, hash_kind: str, size: int) -> None:
        import obstore

        digest = new_digest(hash_kind, size)

        def chunks() -> Iterator[bytes]:
            # Hashed as they are sent; wrong bytes raise before the upload completes, and
            # an upload that does not complete (one PUT, or a multipart upload aborted) is
            # never visible.
            sent = 0
            with open(source, "rb", buffering=0) as f:
                while chunk := f.read(CHUNK):
                    digest.update(chunk)
                    sent += len(chunk)
                    yield chunk
            if sent != size or digest.hexdigest() != etag:
                raise WrongBytes(digest.hexdigest() if sent == size else "?", sent)

        try:
            obstore.put(self.store, f"blobs/{etag}", chunks(), chunk_size=PART,
                        max_concurrency=4)
        except (WrongBytes, FileNotFoundError, KeyboardInterrupt):
            raise
        except Exception as e:
            raise self._error(e, "write") from e

    def get_blob(self, etag: str, dest: Path, hash_kind: str, size: int) -> str | None:
        import obstore

        digest = new_digest(hash_kind, size)
        try:
            result = obstore.get(self.store, f"blobs/{etag}")
            written = 0
            with open(dest, "wb") as f:
                # Hashed as it arrives (hashlib releases the GIL): no second read.
                for chunk in result.stream(min_chunk_size=CHUNK):
                    view = memoryview(chunk)
                    digest.update(view)
                    f.write(view)
                    written += len(view)
            return str(digest.hexdigest()) if written == size else "?"
        except FileNotFoundError:
            raise
        except Exception as e:
            raise self._error(e, "read") from e

    def put_text(self, name: str, text: str) -> None:
        import obstore

        try:
            call(lambda: obstore.put(self.store, name, text.encode("utf-8")))
        except Exception as e:
            raise self._error(e, "write") from e

    def get_text(self, name: str) -> str | None:
        import obstore

        try:
            return call(lambda: bytes(obstore.get(self.store, name).bytes()).decode("utf-8"))
        except FileNotFoundError:
            return None
        except Exception as e:
            raise self._error(e, "read") from e

    def _error(self, e: BaseException, what: str) -> ArchiveError:
        text = str(e)
        if isinstance(e, PermissionError) or any(code in text for code in (
                "403", "401", "InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied",
                "Unauthenticated", "PermissionDenied")):
            why = "access denied"
            hint = ("Check the credentials in the environment (AWS_ACCESS_KEY_ID and "
                    "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE) and that they may "
                    f"{what} this bucket.")
        elif "NoSuchBucket" in text:
            why = "the bucket does not exist"
            hint = "Create the bucket, or fix the URL (--archive, $WLOCK_ARCHIVE, weights.toml)."
        else:
            why = "cannot reach the object store"
            hint = ("Check the endpoint (AWS_ENDPOINT_URL for a store other than AWS) and "
                    "that it is up.")
        # The library's own words, short, minus anything that looks like a key.
        detail = _scrub(text.split("<?xml")[0])
        return ArchiveError(f"cannot {what} the archive at {self.url}: {why}"
                            + (f" ({detail})" if detail else ""), hint=hint)


def _profile_credentials() -> Any:
    """AWS_PROFILE through boto3's resolution (~/.aws/config, SSO, ...), where installed."""
    try:
        import boto3
        from obstore.auth.boto3 import Boto3CredentialProvider
    except ImportError:
        raise UsageError("AWS_PROFILE is set, and reading profiles needs boto3",
                         hint="`pip install boto3`, or set AWS_ACCESS_KEY_ID and "
                         "AWS_SECRET_ACCESS_KEY instead.") from None
    return Boto3CredentialProvider(boto3.Session(profile_name=os.environ["AWS_PROFILE"]))


def _scrub(text: str) -> str:
    """The error text of a storage library, short, with every secret in the environment
    blanked out (whatever the library chose to quote)."""
    text = " ".join(text.split())[:300]
    for name in ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID"):
        secret = os.environ.get(name)
        if secret and len(secret) >= 4:
            text = text.replace(secret, "…")
    return text
