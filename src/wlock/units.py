"""Sizes as people read them (decimal units, as the Hub shows them)."""

from __future__ import annotations


def human_size(size: int) -> str:
    value = float(size)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")


def count(n: int, word: str, plural: str | None = None) -> str:
    """`count(1, "repo")` is "1 repo", `count(2, "repo")` "2 repos" (thousands separated)."""
    return f"{n:,} {word if n == 1 else plural or word + 's'}"
