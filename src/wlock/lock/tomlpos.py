"""Line numbers for TOML keys: tomllib reports none, and every message names file and line."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from wlock.errors import InvalidFileError


def read_toml(
    path: Path, *, missing: str, invalid: str | None = None, text: str | None = None
) -> tuple[dict[str, Any], TomlLocator]:
    """Parse a TOML file for validation: its data and a locator for its keys' lines.

    Raises InvalidFileError (exit 4) with `missing` as the hint when the file does not exist,
    and with `invalid` when it is not UTF-8 TOML. With `text`, parses that instead of the
    file's content (one side of a merge conflict), still naming `path`.
    """
    display = str(path)
    try:
        if text is None:
            text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidFileError(display, "not found", hint=missing) from None
    except IsADirectoryError:
        raise InvalidFileError(display, "is a folder, not a file",
                               hint="Name the file itself, not the folder that holds it.",
                               ) from None
    except OSError as e:  # permissions, an I/O error
        raise InvalidFileError(display, f"cannot be read: {e.strerror or e}",
                               hint="Check its permissions, or name another file.") from None
    except UnicodeDecodeError as e:
        # e.object is the file's bytes: the line is that of the first byte that is not UTF-8.
        line = e.object[:e.start].count(b"\n") + 1
        column = e.start - e.object.rfind(b"\n", 0, e.start)
        raise InvalidFileError(
            display, f"not UTF-8 text ({e.reason}: byte {e.object[e.start:e.start + 1]!r} "
            f"at column {column})", line=line, hint=invalid) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise InvalidFileError(
            display, f"invalid TOML: {e}", line=line_of_decode_error(str(e)) or 1, hint=invalid
        ) from None
    except RecursionError:
        # tomllib recurses once per nested array or inline table: thousands of `[` exhaust
        # the interpreter's stack. No manifest or lock nests more than two levels.
        raise InvalidFileError(
            display, "invalid TOML: arrays or tables nested too deeply",
            line=_deepest_line(text), hint=invalid,
        ) from None
    return data, TomlLocator(text)


def _deepest_line(text: str) -> int:
    """The line where bracket nesting first gets absurd (strings are not skipped: a guess
    good enough to point at the damage)."""
    depth = 0
    for number, line in enumerate(text.splitlines(), start=1):
        for char in line:
            depth += char in "[{"
            depth -= char in "]}"
            if depth > 32:
                return number
    return 1


def line_of_decode_error(message: str) -> int | None:
    match = re.search(r"at line (\d+)", message)
    return int(match.group(1)) if match else None


class TomlLocator:
    """Finds the line of a key in the raw text: tomllib does not report positions."""

    _HEADER = re.compile(r"^\s*\[\[\s*([A-Za-z0-9_\-]+)\s*\]\]")
    _TABLE = re.compile(r"^\s*\[")
    _KEY = re.compile(r"^\s*\"?([A-Za-z0-9_\-]+)\"?\s*=")
    _ITEM = re.compile(r"\{\s*\"?[A-Za-z0-9_\-]+\"?\s*=")

    def __init__(self, text: str) -> None:
        # Scanned on first use: a valid lock never needs a line number, and a lock of a
        # million files should not pay for the scan.
        self._text: str | None = text

    def __getattr__(self, name: str) -> object:
        if name in ("lines", "headers", "keys", "root", "items") and self._text is not None:
            text, self._text = self._text, None
            self._scan(text)
            return getattr(self, name)
        raise AttributeError(name)

    def _scan(self, text: str) -> None:
        self.lines = text.splitlines()
        self.headers: dict[str, list[int]] = {}
        self.keys: dict[int, dict[str, int]] = {}  # header line -> key -> line
        self.root: dict[str, int] = {}
        # header line -> the line of each inline table in its arrays (`{ path = ... }`), in
        # order: the lock writes one file entry per line, so the n-th is the n-th file.
        self.items: dict[int, list[int]] = {}
        current: int | None = None
        in_files = False  # inline tables are counted in a `files = [...]` array only
        for number, line in enumerate(self.lines, start=1):
            key = self._KEY.match(line)
            if key and current is not None and current > 0:
                in_files = key.group(1) == "files"
            if current is not None and current > 0 and in_files:
                self.items[current].extend(number for _ in self._ITEM.finditer(line))
            header = self._HEADER.match(line)
            if header:
                in_files = False
                self.headers.setdefault(header.group(1), []).append(number)
                self.root.setdefault(header.group(1), number)
                current = number
                self.keys[number] = {}
                self.items[number] = []
                continue
            if self._TABLE.match(line):
                name = line.strip().strip("[]").split(".")[0].strip()
                self.root.setdefault(name, number)
                current = -1
                continue
            if key:
                if current is None:
                    self.root.setdefault(key.group(1), number)
                elif current > 0:
                    self.keys[current].setdefault(key.group(1), number)

    def top_level(self, key: str) -> int | None:
        return self.root.get(key)

    def entry(self, kind: str, index: int, key: str | None = None) -> int | None:
        headers = self.headers.get(kind, [])
        if index >= len(headers):
            return None
        if key is None:
            return headers[index]
        return self.keys[headers[index]].get(key)

    def item(self, kind: str, index: int, position: int) -> int | None:
        """The line of the `position`-th inline table inside entry `index` of `kind`."""
        headers = self.headers.get(kind, [])
        if index >= len(headers):
            return None
        lines = self.items[headers[index]]
        return lines[position] if position < len(lines) else None

    def best(self, kind: str, index: int, key: str | None = None) -> int:
        """The most precise line known for a key of an entry, never None: the key, its
        entry's header, the array's first line, else line 1."""
        return (
            (self.entry(kind, index, key) if key else None)
            or self.entry(kind, index) or self.top_level(kind) or 1
        )
