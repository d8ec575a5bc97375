"""Build a DiskStore from the fixture repos in `fixtures/hub/` (bundled in the wheel too).

    fixtures/hub/store.toml                          [renames] "models/old/id" = "new/id"
    fixtures/hub/{models,datasets}/<org>/<name>/
        repo.toml        commits = [...folders in history order], [branches], [tags],
                         gated, private, granted, and an optional [generate] section
        <commit folder>/ the full tree of the repo at that commit
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from wlock.hubserver.store import StoreBuilder


def bundled_fixtures() -> Path:
    """The fixture folder: in the wheel beside this module, or in the source checkout."""
    packaged = Path(__file__).with_name("fixture_repos")
    if packaged.is_dir():
        return packaged
    checkout = Path(__file__).resolve().parents[3] / "fixtures" / "hub"
    if checkout.is_dir():
        return checkout
    raise FileNotFoundError("wlock's fixture repos are not installed (fixtures/hub)")


def example_manifest() -> Path:
    """The example project's weights.toml (fixtures/example), locked in weights.lock.example."""
    packaged = Path(__file__).with_name("fixture_example") / "weights.toml"
    if packaged.is_file():
        return packaged
    return Path(__file__).resolve().parents[3] / "fixtures" / "example" / "weights.toml"


def build_fixture_store(store_root: Path, fixtures: Path | None = None, *,
                        xet: bool = False) -> StoreBuilder:
    """Write every fixture repo into a store at `store_root` (LFS files on Xet too with
    `xet`); returns the builder for more."""
    fixtures = fixtures or bundled_fixtures()
    builder = StoreBuilder(store_root, xet=xet)
    for kind in ("model", "dataset"):
        for repo_toml in sorted((fixtures / f"{kind}s").glob("*/*/repo.toml")):
            folder = repo_toml.parent
            repo_id = f"{folder.parent.name}/{folder.name}"
            _build_repo(builder, kind, repo_id, folder, tomllib.loads(repo_toml.read_text()))
    settings_path = fixtures / "store.toml"
    if settings_path.exists():
        settings = tomllib.loads(settings_path.read_text(encoding="utf-8"))
        for old, new in settings.get("renames", {}).items():
            kind, _, old_id = old.partition("s/")
            builder.rename(kind, old_id, new)
    return builder


def _build_repo(
    builder: StoreBuilder, kind: str, repo_id: str, folder: Path, spec: dict[str, Any]
) -> None:
    shas: dict[str, str] = {}
    generate = spec.get("generate")
    previous: set[str] = set()
    for day, name in enumerate(spec["commits"], start=1):
        tree = folder / name
        files: dict[str, bytes | Path] = {
            p.relative_to(tree).as_posix(): p for p in sorted(tree.rglob("*")) if p.is_file()
        }
        if generate and generate.get("commit") == name:
            for index in range(generate["count"]):
                path = generate["path"].format(index=index, shard=index // 100)
                files[path] = f'{{"index": {index}}}\n'.encode()
        shas[name] = builder.commit(
            kind, repo_id, files, delete=tuple(sorted(previous - set(files))),
            message=name, date=f"2026-01-{day:02d}T00:00:00.000Z",
        )
        previous = set(files)
    for branch, target in spec.get("branches", {}).items():
        builder.set_ref(kind, repo_id, branch=branch, target=shas[target])
    for tag, target in spec.get("tags", {}).items():
        builder.set_ref(kind, repo_id, tag=tag, target=shas[target])
    access = {k: spec[k] for k in ("gated", "private", "granted") if k in spec}
    if access:
        builder.configure(kind, repo_id, **access)
