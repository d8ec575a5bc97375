"""Progress for long work: bars on a terminal, sparse plain lines in logs, nothing for --json.

Callbacks arrive from many threads at once; every reporter here is thread-safe.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any, Protocol

import click

from wlock.units import human_size

BIG_FILE = 1_000_000  # files this large get their own bar or line


class Progress(Protocol):
    def start(self, label: str, size: int) -> None: ...
    def advance(self, label: str, n: int) -> None: ...
    def done(self, label: str, size: int) -> None: ...
    def close(self) -> None: ...


DISABLED = False  # `wlock --no-progress`


def make_progress(title: str, total_bytes: int, *, quiet: bool) -> Progress:
    """Bars on a terminal, sparse lines in a log; nothing with `quiet` (--json) or when
    HF_HUB_DISABLE_PROGRESS_BARS is set, as huggingface_hub's own bars obey it."""
    if quiet or DISABLED or _env_true("HF_HUB_DISABLE_PROGRESS_BARS"):
        return _Silent()
    if sys.stderr.isatty() and not os.environ.get("CI"):
        return _Bars(title, total_bytes)
    return _Lines(title, total_bytes)


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


class _Silent:
    def start(self, label: str, size: int) -> None:
        pass

    def advance(self, label: str, n: int) -> None:
        pass

    def done(self, label: str, size: int) -> None:
        pass

    def close(self) -> None:
        pass


class _Lines:
    """For CI logs: a line per big file, and the total every 10 seconds."""

    def __init__(self, title: str, total: int) -> None:
        self._title, self._total, self._done = title, total, 0
        self._lock = threading.Lock()
        self._last = time.monotonic()

    def start(self, label: str, size: int) -> None:
        pass

    def advance(self, label: str, n: int) -> None:
        with self._lock:
            self._done += n
            now = time.monotonic()
            if now - self._last >= 10 and self._total:
                self._last = now
                click.echo(f"{self._title}: {human_size(self._done)} of "
                           f"{human_size(self._total)} ({100 * self._done // self._total}%)",
                           err=True)

    def done(self, label: str, size: int) -> None:
        if size >= BIG_FILE:
            click.echo(f"  {label} ({human_size(size)})", err=True)

    def close(self) -> None:
        pass


class _Bars:
    """rich bars: the total (bytes, rate, ETA) and one per big file in flight."""

    def __init__(self, title: str, total: int) -> None:
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        self._progress = Progress(
            TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
            TransferSpeedColumn(), TimeRemainingColumn(), transient=True,
            console=_stderr_console(),
        )
        self._total = self._progress.add_task(title, total=total)
        self._tasks: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._progress.start()

    def start(self, label: str, size: int) -> None:
        if size >= BIG_FILE:
            with self._lock:
                self._tasks[label] = self._progress.add_task(f"  {label}", total=size)

    def advance(self, label: str, n: int) -> None:
        self._progress.advance(self._total, n)
        task = self._tasks.get(label)
        if task is not None:
            self._progress.advance(task, n)

    def done(self, label: str, size: int) -> None:
        with self._lock:
            task = self._tasks.pop(label, None)
        if task is not None:
            self._progress.remove_task(task)

    def close(self) -> None:
        self._progress.stop()


def _stderr_console() -> Any:
    from rich.console import Console

    return Console(stderr=True)
