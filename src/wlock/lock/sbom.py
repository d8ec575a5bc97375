"""`wlock sbom`: the lock as a CycloneDX 1.6 bill of materials.

Written with cyclonedx-python-lib (the format's own library) so the document is what its
schema says: one `machine-learning-model` (or `data`) component per locked repo, its purl
`pkg:huggingface/org/name@commit`, each licence its card lists, one `file` component per
locked file with its SHA-256 (an LFS file's content hash). A regular file's git blob id is not
a hash of its bytes alone, so it is a property, `wlock:git-blob-sha1`; where the file's bytes
are in the cache (and hash to that blob id), their SHA-1 and SHA-256 are its hashes. The card's base
models as pedigree ancestors (provenance, not dependencies), and the requirements the
resolver found (an adapter's base) as dependencies.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from wlock.models import Lock, LockedFile, LockedRepo

if TYPE_CHECKING:
    from cyclonedx.model.bom import Bom
    from cyclonedx.model.component import Component


def purl_of(repo: LockedRepo) -> str:
    org, _, name = repo.id.rpartition("/")
    kind = "" if repo.kind == "model" else "datasets/"
    return f"pkg:huggingface/{kind}{org + '/' if org else ''}{name}@{repo.revision}"


BlobOf = Callable[[LockedRepo, LockedFile], Path | None]


def content_hashes(path: Path, git_sha1: str, size: int) -> tuple[str, str] | None:
    """(SHA-1, SHA-256) of the bytes at `path` when they are the regular file whose git blob
    id is `git_sha1`; None when they are not (a blob changed in the cache says nothing)."""
    blob = hashlib.sha1(f"blob {size}\0".encode(), usedforsecurity=False)
    sha1 = hashlib.sha1(usedforsecurity=False)
    sha256 = hashlib.sha256()
    try:
        with path.open("rb") as f:
            while chunk := f.read(1 << 20):
                blob.update(chunk)
                sha1.update(chunk)
                sha256.update(chunk)
    except OSError:
        return None
    return (sha1.hexdigest(), sha256.hexdigest()) if blob.hexdigest() == git_sha1 else None


def build_bom(lock: Lock, project: str, blob_of: BlobOf | None = None) -> Bom:
    """The document's model. `blob_of(repo, file)`: where a file's bytes are in the cache, if
    they are, to give regular files their content hashes."""
    from cyclonedx.factory.license import LicenseFactory
    from cyclonedx.model import HashAlgorithm, HashType, Property
    from cyclonedx.model.bom import Bom
    from cyclonedx.model.component import Component, ComponentType, Pedigree
    from packageurl import PackageURL

    bom = Bom()
    root = Component(type=ComponentType.APPLICATION, name=project, bom_ref=f"project:{project}")
    bom.metadata.component = root
    by_id: dict[str, Component] = {}
    licences = LicenseFactory()
    for repo in lock.repos:
        org, _, name = repo.id.rpartition("/")
        purl = PackageURL(type="huggingface", namespace=(
            f"datasets/{org}" if repo.kind == "dataset" else org) or None, name=name,
            version=repo.revision)
        files = []
        for f in repo.files:
            component = Component(type=ComponentType.FILE, name=f.path,
                                  bom_ref=f"{purl_of(repo)}#{f.path}")
            if f.sha256:
                component.hashes.add(HashType(alg=HashAlgorithm.SHA_256, content=f.sha256))
            else:
                component.properties.add(Property(name="wlock:git-blob-sha1",
                                                  value=f.git_sha1 or ""))
                blob = blob_of(repo, f) if blob_of is not None and f.git_sha1 else None
                found = content_hashes(blob, f.git_sha1 or "", f.size) if blob else None
                if found:
                    component.hashes.add(HashType(alg=HashAlgorithm.SHA_1, content=found[0]))
                    component.hashes.add(HashType(alg=HashAlgorithm.SHA_256,
                                                  content=found[1]))
            component.properties.add(Property(name="wlock:size", value=str(f.size)))
            for t in repo.formats:
                if t.path == f.path:  # what the policy judges (chat-template, keras, ...)
                    component.properties.add(Property(
                        name=f"wlock:{t.kind}:{t.key}",
                        value=f"unknown: {t.unreadable}" if t.unreadable else
                        "; ".join(t.findings)))
            files.append(component)
        component = Component(
            type=(ComponentType.MACHINE_LEARNING_MODEL if repo.kind == "model"
                  else ComponentType.DATA),
            name=repo.id, version=repo.revision, purl=purl, bom_ref=purl_of(repo),
            components=files)
        for licence in repo.licenses:
            text = repo.license_name if licence == "other" and repo.license_name \
                else licence
            # An SPDX id where it is one (case folded, as cards write `apache-2.0`), else
            # the licence by name.
            component.licenses.add(licences.make_from_string(text))
        for key, value in (("wlock:requested", repo.requested),
                           ("wlock:loader", repo.loader or "all"),
                           ("wlock:variant", repo.variant)):
            if value:
                component.properties.add(Property(name=key, value=value))
        if repo.base_models:
            component.pedigree = Pedigree(ancestors=[
                Component(type=ComponentType.MACHINE_LEARNING_MODEL, name=base,
                          bom_ref=f"{purl_of(repo)}#base:{base}") for base in repo.base_models])
        bom.components.add(component)
        by_id[repo.id] = component
    required = {name for repo in lock.repos for name in repo.requires}
    bom.register_dependency(root, [by_id[r.id] for r in lock.repos if r.id not in required])
    for repo in lock.repos:
        bom.register_dependency(by_id[repo.id],
                                [by_id[name] for name in repo.requires if name in by_id])
    return bom


def render_bom(lock: Lock, project: str, blob_of: BlobOf | None = None) -> str:
    """The document as CycloneDX 1.6 JSON."""
    from cyclonedx.output.json import JsonV1Dot6

    return JsonV1Dot6(build_bom(lock, project, blob_of)).output_as_string(indent=2)
