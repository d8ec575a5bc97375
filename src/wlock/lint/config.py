"""Lint settings: `[tool.wlock.lint]` in weights.toml, else in pyproject.toml.

    [tool.wlock.lint]
    exclude = ["tests/fixtures/*", "scripts/legacy_*.py"]   # globs on paths
    fail-on-dynamic = false                                   # WL200 fails too when true
    severity = { WL104 = "warning", WL106 = "off" }           # error | warning | off
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
    "WL200": "repo id or revision the linter cannot see",
}
SEVERITIES = ("error", "warning", "off")
_KEYS = frozenset({"exclude", "fail-on-dynamic", "severity"})


@dataclass(frozen=True, slots=True)
class LintSettings:
    exclude: tuple[str, ...] = ()
    fail_on_dynamic: bool = False
    severity: dict[str, str] = field(default_factory=dict)

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
    return LintSettings(exclude=tuple(exclude), fail_on_dynamic=dynamic, severity=dict(severity))
