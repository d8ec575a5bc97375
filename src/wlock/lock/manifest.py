"""weights.toml: what the project wants, by name.

Read with the standard library's tomllib (fast, strict); edited with tomlkit so that the
user's comments and layout survive `wlock add` and `wlock remove`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from wlock.atomic import write_text_atomic
from wlock.errors import InvalidFileError, UsageError
from wlock.lock.names import ref_problem, repo_id_problem
from wlock.lock.tomlpos import TomlLocator, read_toml
from wlock.models import REPO_KINDS, Manifest, ManifestEntry, RepoKind

MANIFEST_NAME = "weights.toml"
ENTRY_KEYS = ("id", "ref", "include", "exclude", "loader", "variant", "base", "config", "split",
              "mmproj")
TOP_LEVEL_KEYS = (*REPO_KINDS, "tool")


STARTER = """\
# weights.toml: the models and datasets this project uses, by name.
# `wlock lock` pins each to an exact commit in weights.lock; commit both files.
#
# [[model]]
# id = "sentence-transformers/all-MiniLM-L6-v2"
# ref = "main"                      # a branch, a tag or a 40-hex commit
# include = ["*.json", "*.safetensors", "*.txt"]
#
# [[dataset]]
# id = "stanfordnlp/imdb"
# ref = "main"
# exclude = ["*.tar.gz"]
"""


def find_project(start: Path) -> Path | None:
    """The nearest directory at or above `start` that holds weights.toml."""
    start = start.resolve()
    for candidate in (start, *start.parents):
        if (candidate / MANIFEST_NAME).is_file():
            return candidate
    return None


def manifest_digest(entries: Iterable[ManifestEntry]) -> str:
    """Digest of the resolved entries, so comments and layout never make a lock stale."""
    import blake3

    # loader and variant join an entry's digest only when set: every lock made before they
    # existed keeps its digest, hence its bytes.
    canonical = sorted(
        [e.kind, e.id, e.ref, sorted(set(e.include)), sorted(set(e.exclude))]
        + ([e.loader or "all", e.variant or ""] if e.loader or e.variant else [])
        + ([f"base={e.base}"] if e.base else [])
        + list(e.extras)
        for e in entries
    )
    data = json.dumps(canonical, separators=(",", ":"), ensure_ascii=False).encode()
    return "blake3:" + blake3.blake3(data).hexdigest()


def read_manifest(path: Path) -> Manifest:
    """Parse and validate weights.toml.

    Raises InvalidFileError (exit 4) naming the file, line and key of the first problem.
    """
    display = str(path)
    data, locator = read_toml(
        path, missing="Run `wlock init` to create one, or pass --project DIR."
    )

    for key in data:
        if key not in TOP_LEVEL_KEYS:
            raise InvalidFileError(
                display,
                "unknown key",
                line=locator.top_level(key) or 1,
                key=key,
                hint="Entries go in [[model]] or [[dataset]] tables.",
            )
    entries: list[ManifestEntry] = []
    seen: dict[tuple[str, str], int] = {}
    for kind in REPO_KINDS:
        raw = data.get(kind, [])
        if not isinstance(raw, list):
            raise InvalidFileError(
                display,
                f"must be an array of tables, written [[{kind}]]",
                line=locator.top_level(kind) or 1,
                key=kind,
            )
        for index, item in enumerate(raw):
            entry = _parse_entry(display, locator, kind, index, item)
            # The Hub treats `Org/Name` and `org/name` as one repo.
            folded = (kind, entry.id.lower())
            if folded in seen:
                raise InvalidFileError(
                    display,
                    f"{kind} {entry.id!r} is listed twice (first at line {seen[folded]})",
                    line=entry.line,
                    key="id",
                )
            seen[folded] = entry.line or 0
            entries.append(entry)
    return Manifest(path=display, entries=tuple(entries), digest=manifest_digest(entries))


def _parse_entry(
    display: str, locator: TomlLocator, kind: RepoKind, index: int, item: Any
) -> ManifestEntry:
    header = locator.best(kind, index)
    if not isinstance(item, dict):
        raise InvalidFileError(display, "each entry must be a table", line=header, key=kind)

    def fail(key: str, problem: str, hint: str | None = None) -> InvalidFileError:
        return InvalidFileError(
            display, problem, line=locator.entry(kind, index, key) or header,
            key=f"{kind}.{key}", hint=hint,
        )

    for key in item:
        if key not in ENTRY_KEYS:
            raise fail(key, "unknown key", hint=f"An entry takes {', '.join(ENTRY_KEYS)}.")
    repo_id = item.get("id")
    if repo_id is None:
        raise InvalidFileError(display, "missing `id`", line=header, key=kind)
    if not isinstance(repo_id, str):
        raise fail("id", f"{repo_id!r} is not a Hub repo id", hint="Write it as `org/name`.")
    if problem := repo_id_problem(repo_id):
        raise fail("id", problem, hint="Write it as `org/name`.")
    ref = item.get("ref", "main")
    if not isinstance(ref, str):
        raise fail("ref", f"{ref!r} is not a branch, tag or commit")
    if problem := ref_problem(ref):
        raise fail("ref", problem, hint="A branch, a tag or a 40-hex commit, as git names them.")
    globs: dict[str, tuple[str, ...]] = {}
    for key in ("include", "exclude"):
        value = item.get(key, [])
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(g, str) and g for g in value):
            raise fail(key, "must be a list of glob patterns, like [\"*.safetensors\"]")
        globs[key] = tuple(value)
    from wlock.lock.loaders import DATASET_LOADERS, LOADERS, VARIANT_LOADERS

    loader, variant = item.get("loader"), item.get("variant")
    if loader is not None and loader not in LOADERS:
        raise fail("loader", f"unknown loader {loader!r}",
                   hint=f"One of: {', '.join(LOADERS)} (`all`: every file of the repo).")
    if kind == "dataset" and loader is not None and loader not in DATASET_LOADERS:
        raise fail("loader", f"{loader!r} loads models: a dataset's loader is "
                   "\"datasets\" (or \"all\": every file)", hint='Set loader = "datasets".')
    if kind == "model" and loader == "datasets":
        raise fail("loader", "the datasets loader is for a [[dataset]] entry",
                   hint="Move the entry under [[dataset]], or pick a model's loader.")
    config, split = item.get("config"), item.get("split")
    for key, value in (("config", config), ("split", split)):
        if value is None:
            continue
        if not isinstance(value, str) or not value.strip():
            raise fail(key, f"{value!r} is not a {key} name",
                       hint='Like config = "sample-10BT", split = "train".')
        if loader != "datasets":
            raise fail(key, f"`{key}` is a dataset's: it needs loader = \"datasets\", not "
                       f"{loader or 'none'}", hint=f'Set loader = "datasets", or remove `{key}`.')
    mmproj = item.get("mmproj", True)
    if not isinstance(mmproj, bool):
        raise fail("mmproj", f"{mmproj!r} is not true or false",
                   hint="mmproj = false leaves a GGUF repo's projector out.")
    if mmproj is False and loader != "gguf":
        raise fail("mmproj", f"`mmproj` is the gguf loader's, not {loader or 'none'}'s",
                   hint='Set loader = "gguf", or remove `mmproj`.')
    if variant is not None:
        if not isinstance(variant, str) or not variant or not variant.replace("_", "").replace(
                "-", "").isalnum():
            raise fail("variant", f"{variant!r} is not a variant name (fp16, Q4_K_M)")
        if loader not in VARIANT_LOADERS:
            raise fail("variant", f"`variant` needs a loader that has variants "
                       f"({', '.join(VARIANT_LOADERS)}), not {loader or 'none'}",
                       hint="Set `loader`, or remove `variant`.")
    base = item.get("base")
    if base is not None:
        name, _, base_ref = base.partition("@") if isinstance(base, str) else ("", "", "")
        if not isinstance(base, str) or repo_id_problem(name) is not None or (
                "@" in base and ref_problem(base_ref) is not None):
            raise fail("base", f"{base!r} is not a repo id with an optional @ref",
                       hint='Like base = "meta-llama/Llama-3.1-8B@main".')
        if loader != "peft":
            raise fail("base", f"`base` names an adapter's base model: it needs "
                       f"loader = \"peft\", not {loader or 'none'}",
                       hint='Set loader = "peft", or remove `base`.')
    return ManifestEntry(
        kind=kind, id=repo_id, ref=ref, include=globs["include"], exclude=globs["exclude"],
        line=header, loader=loader, variant=variant, base=base, config=config, split=split,
        mmproj=mmproj,
    )


def glob_line(path: Path, entry: ManifestEntry, key: str) -> int | None:
    """The line of `key` in `entry`, for messages raised after parsing (a glob matching nothing)."""
    try:
        locator = TomlLocator(path.read_text(encoding="utf-8"))
    except OSError:
        return entry.line
    for index, header in enumerate(locator.headers.get(entry.kind, [])):
        if header == entry.line:
            return locator.entry(entry.kind, index, key) or entry.line
    return entry.line


# -- editing, with tomlkit so the file keeps its comments -------------------------------------


def init_manifest(project: Path) -> Path:
    path = project / MANIFEST_NAME
    if path.exists():
        raise UsageError(
            f"{path} already exists", hint="Edit it, or use `wlock add` / `wlock remove`."
        )
    write_text_atomic(path, STARTER)
    return path


def parse_requirement(spec: str) -> tuple[str, str | None]:
    """`org/name@ref` -> (id, ref); a repo id never contains '@'."""
    repo_id, sep, ref = spec.partition("@")
    if problem := repo_id_problem(repo_id):
        raise UsageError(problem, hint="Write it as `org/name[@ref]`.")
    if sep and (problem := ref_problem(ref)):
        raise UsageError(f"{spec!r}: {problem}",
                         hint="A branch, a tag or a 40-hex commit, as git names them.")
    return repo_id, (ref if sep else None)


def add_entry(
    path: Path,
    kind: RepoKind,
    repo_id: str,
    ref: str | None,
    include: tuple[str, ...],
    exclude: tuple[str, ...],
    loader: str | None = None,
    variant: str | None = None,
    base: str | None = None,
    config: str | None = None,
    split: str | None = None,
) -> bool:
    """Add the entry or update the one with the same id (its ref, globs, loader, variant,
    base, config and split where given). Returns True when it was new."""
    import tomlkit

    read_manifest(path)  # refuse to edit a file we could not read back
    doc = tomlkit.parse(path.read_text(encoding="utf-8"))
    tables = doc.get(kind)
    if tables is not None:
        for table in tables:
            if table.get("id") == repo_id:
                if ref is not None:
                    table["ref"] = ref
                for key, value in (("include", include), ("exclude", exclude)):
                    if value:
                        table[key] = list(value)
                for key, text in (("loader", loader), ("variant", variant), ("base", base),
                                  ("config", config), ("split", split)):
                    if text:
                        table[key] = text
                write_text_atomic(path, _dumps(doc))
                return False
    table = tomlkit.table()
    table["id"] = repo_id
    table["ref"] = ref or "main"
    if loader:
        table["loader"] = loader
    if variant:
        table["variant"] = variant
    if base:
        table["base"] = base
    if config:
        table["config"] = config
    if split:
        table["split"] = split
    if include:
        table["include"] = list(include)
    if exclude:
        table["exclude"] = list(exclude)
    if tables is None:
        aot = tomlkit.aot()
        aot.append(table)
        doc.append(kind, aot)
    else:
        tables.append(table)
    write_text_atomic(path, _dumps(doc))
    return True


def _dumps(doc: Any) -> str:
    """tomlkit's text, with a blank line before a table header that directly follows a value
    (tomlkit leaves none after a table it appended) and exactly one newline at the end."""
    import tomlkit

    lines = tomlkit.dumps(doc).rstrip("\n").split("\n")
    out: list[str] = []
    for line in lines:
        previous = out[-1].strip() if out else ""
        if line.lstrip().startswith("[") and previous and not previous.startswith(("#", "[")):
            out.append("")
        out.append(line)
    return "\n".join(out) + "\n"


def remove_entry(path: Path, kind: RepoKind, repo_id: str) -> None:
    import tomlkit

    read_manifest(path)
    doc = tomlkit.parse(path.read_text(encoding="utf-8"))
    tables: Any = doc.get(kind)
    for index, table in enumerate(tables or []):
        if table.get("id") == repo_id:
            del tables[index]
            if not tables:
                del doc[kind]
            write_text_atomic(path, _dumps(doc))
            return
    other: RepoKind = "dataset" if kind == "model" else "model"
    hint = None
    if any(t.get("id") == repo_id for t in doc.get(other, [])):
        hint = f"It is listed as a {other}: " + (
            "pass --dataset." if other == "dataset" else "leave out --dataset."
        )
    raise UsageError(f"{kind} {repo_id!r} is not in {path}", hint=hint)
