"""Lint settings: `[tool.wlock.lint]` in weights.toml, else in pyproject.toml.

    [tool.wlock.lint]
    exclude = ["tests/fixtures/*", "scripts/legacy_*.py"]   # globs on paths
    fail-on-dynamic = false                                   # WL200 fails too when true
    severity = { WL104 = "warning", WL106 = "off" }           # error | warning | off

    [[tool.wlock.lint.loaders]]        # a project's own loader, judged as the known ones
    name = "load_model"                # the function (matched by its last name)
    id = "model_id"                    # the keyword of the repo id ...
    position = 0                       # ... and its position when passed positionally
    revision = "revision"              # the keyword that pins it ("": it takes none)
    kind = "model"                     # or "dataset"
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wlock.errors import InvalidFileError

CODES: dict[str, str] = {
    "WL001": "file cannot be read or parsed (its loads are unseen)",
    "WL101": "load without a pinned revision",
    "WL102": "revision is not a commit",
    "WL103": "revision differs from weights.lock",
    "WL104": "repo is not in weights.lock",
    "WL105": "remote code without a pinned code_revision",
    "WL106": "pipeline() downloads the task's default model",
    "WL107": "adapter whose base model is not locked",
    "WL108": "dataset config or split that weights.lock does not hold",
    "WL200": "repo id or revision the linter cannot see",
}
SEVERITIES = ("error", "warning", "off")
_KEYS = frozenset({"exclude", "fail-on-dynamic", "severity", "loaders", "fix-pin"})
FIX_PINS = ("lock", "commit")
_LOADER_KEYS = frozenset({"name", "id", "position", "revision", "kind"})


@dataclass(frozen=True, slots=True)
class Loader:
    """A project's own function that loads from the Hub (`[[tool.wlock.lint.loaders]]`)."""

    name: str
    id: str
    position: int = 0
    revision: str = "revision"  # "" when it takes none: the pin is wlock.snapshot_path()
    kind: str = "model"


@dataclass(frozen=True, slots=True)
class LintSettings:
    exclude: tuple[str, ...] = ()
    fail_on_dynamic: bool = False
    severity: dict[str, str] = field(default_factory=dict)
    loaders: tuple[Loader, ...] = ()
    # What `lint --fix` writes for a pin: "lock", `wlock.revision("org/name")` (it follows
    # weights.lock, so `lock --upgrade` needs no code edit), or "commit", the literal commit
    # (code that runs without wlock installed; each upgrade moves it by `lint --fix` again).
    fix_pin: str = "lock"

    def level(self, code: str) -> str:
        if code in self.severity:
            return self.severity[code]
        if code == "WL200":
            return "error" if self.fail_on_dynamic else "warning"
        return "error"


def load_settings(folder: Path | None) -> tuple[LintSettings, str | None]:
    """Settings from the first of weights.toml and pyproject.toml that has them."""
    if folder is None:
        return LintSettings(), None
    for name in ("weights.toml", "pyproject.toml"):
        path = folder / name
        if not path.is_file():
            continue
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as e:
            raise InvalidFileError(str(path), f"invalid TOML: {e}") from None
        table = data.get("tool", {}).get("wlock", {}).get("lint")
        if table is not None:
            return _parse(str(path), table), str(path)
    return LintSettings(), None


def _parse(path: str, table: Any) -> LintSettings:
    def fail(key: str, problem: str) -> InvalidFileError:
        return InvalidFileError(path, problem, key=f"tool.wlock.lint.{key}")

    if not isinstance(table, dict):
        raise fail("", "must be a table")
    for key in table:
        if key not in _KEYS:
            raise fail(key, f"unknown key (known: {', '.join(sorted(_KEYS))})")
    exclude = table.get("exclude", [])
    if not isinstance(exclude, list) or not all(isinstance(g, str) for g in exclude):
        raise fail("exclude", "must be a list of globs")
    dynamic = table.get("fail-on-dynamic", False)
    if not isinstance(dynamic, bool):
        raise fail("fail-on-dynamic", "must be true or false")
    severity = table.get("severity", {})
    if not isinstance(severity, dict):
        raise fail("severity", 'must be a table like { WL104 = "warning" }')
    for code, level in severity.items():
        if code not in CODES:
            raise fail(f"severity.{code}", f"unknown code (known: {', '.join(CODES)})")
        if level not in SEVERITIES:
            raise fail(f"severity.{code}", f"must be one of {', '.join(SEVERITIES)}")
    fix_pin = table.get("fix-pin", "lock")
    if fix_pin not in FIX_PINS:
        raise fail("fix-pin", f"must be one of {', '.join(FIX_PINS)} (\"lock\" writes "
                   "wlock.revision(\"org/name\"), \"commit\" the locked commit)")
    loaders = table.get("loaders", [])
    if not isinstance(loaders, list):
        raise fail("loaders", "must be an array of tables ([[tool.wlock.lint.loaders]])")
    parsed = []
    for i, raw in enumerate(loaders):
        where = f"loaders[{i}]"
        if not isinstance(raw, dict):
            raise fail(where, "must be a table with name and id")
        for key in raw:
            if key not in _LOADER_KEYS:
                raise fail(f"{where}.{key}",
                           f"unknown key (known: {', '.join(sorted(_LOADER_KEYS))})")
        for key in ("name", "id"):
            if not isinstance(raw.get(key), str) or not raw[key].isidentifier():
                raise fail(f"{where}.{key}", "must be a Python name (the function, and the "
                           "keyword of its repo id)")
        position = raw.get("position", 0)
        if not isinstance(position, int) or isinstance(position, bool) or position < 0:
            raise fail(f"{where}.position", "must be a position, 0 or more")
        revision = raw.get("revision", "revision")
        if not isinstance(revision, str) or (revision and not revision.isidentifier()):
            raise fail(f"{where}.revision", 'must be a keyword name, or "" if it takes none')
        kind = raw.get("kind", "model")
        if kind not in ("model", "dataset"):
            raise fail(f"{where}.kind", 'must be "model" or "dataset"')
        parsed.append(Loader(raw["name"], raw["id"], position, revision, kind))
    return LintSettings(exclude=tuple(exclude), fail_on_dynamic=dynamic, severity=dict(severity),
                        loaders=tuple(parsed), fix_pin=fix_pin)
