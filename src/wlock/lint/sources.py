"""What the linter reads: Python files and the code cells of notebooks, with their positions."""

from __future__ import annotations

import fnmatch
import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

# IPython magics and shell escapes are not Python; they become comments of the same length
# so that lines and columns stay true.
_MAGIC = re.compile(r"^(\s*)([%!?].*)$")
MAGIC_MARK = "#~wlock~"
_SKIP_DIRS = frozenset({".git", ".hg", ".venv", "venv", "__pycache__", "node_modules",
                        ".mypy_cache", ".ruff_cache", ".pytest_cache", ".tox", "build", "dist"})


@dataclass(frozen=True, slots=True)
class Source:
    """One unit of Python code: a file, or one code cell of a notebook."""

    path: str
    text: str
    cell: int | None = None  # 1-based index among the notebook's cells

    @property
    def where(self) -> str:
        return self.path if self.cell is None else f"{self.path}:cell {self.cell}"


def mask_magics(text: str) -> str:
    return "\n".join(
        _MAGIC.sub(lambda m: f"{m.group(1)}{MAGIC_MARK}{m.group(2)}", line)
        for line in text.split("\n")
    )


def mask_ipython_lines(text: str) -> str | None:
    """`text` (a script exported from a notebook) with the IPython lines that keep it from
    parsing made comments, one at a time where the parser stops, until it parses or stops
    at a line that is not one (then the parser's error is the file's real one); None when
    there were none. Only those lines: a line starting with `%` can be Python too (the
    continuation of `"a %s"` … `% x` inside brackets)."""
    import ast

    lines = text.split("\n")
    masked = False
    for _ in range(len(lines) + 1):
        try:
            ast.parse("\n".join(lines))
        except SyntaxError as e:
            at = (e.lineno or 0) - 1
            if not 0 <= at < len(lines) or MAGIC_MARK in lines[at] or \
                    not _MAGIC.match(lines[at]):
                break
            lines[at] = _MAGIC.sub(lambda m: f"{m.group(1)}{MAGIC_MARK}{m.group(2)}", lines[at])
            masked = True
        else:
            break
    return "\n".join(lines) if masked else None


def unmask_magics(text: str) -> str:
    return text.replace(MAGIC_MARK, "")


def notebook_cells(path: Path) -> list[tuple[int, str]]:
    """(1-based cell index, source) of each code cell."""
    data = json.loads(path.read_text(encoding="utf-8"))
    cells = []
    for index, cell in enumerate(data.get("cells", []), start=1):
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        cells.append((index, "".join(source) if isinstance(source, list) else source))
    return cells


def read_sources(path: Path, display: str) -> list[Source]:
    if path.suffix == ".ipynb":
        return [Source(display, mask_magics(text), cell) for cell, text in notebook_cells(path)]
    return [Source(display, path.read_text(encoding="utf-8", errors="replace"))]


def iter_files(paths: Iterable[Path], exclude: tuple[str, ...]) -> Iterator[Path]:
    """Python files and notebooks under `paths`, skipping virtualenvs, caches and `exclude`.
    A file named explicitly is skipped too when `exclude` matches it (ruff's
    `--force-exclude`): pre-commit names every changed file, and the project's exclusions
    must hold there as in a whole-tree run."""
    for root in paths:
        if root.is_file():
            if not _excluded(str(root), exclude):
                yield root
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(
                d for d in dirnames
                if d not in _SKIP_DIRS and not _excluded(os.path.join(dirpath, d), exclude)
            )
            for name in sorted(filenames):
                if name.endswith((".py", ".ipynb")):
                    full = os.path.join(dirpath, name)
                    if not _excluded(full, exclude):
                        yield Path(full)


def _excluded(path: str, patterns: tuple[str, ...]) -> bool:
    normalized = path.replace(os.sep, "/").removeprefix("./")
    return any(fnmatch.fnmatch(normalized, p) or fnmatch.fnmatch(normalized, f"*/{p}")
               for p in patterns)
