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

from wlock.cli.output import verbosity
from wlock.units import human_size

BIG_FILE = 1_000_000  # files this large get their own bar or line


class Progress(Protocol):
    def start(self, label: str, size: int) -> None: ...
    def advance(self, label: str, n: int) -> None: ...
    def done(self, label: str, size: int) -> None: ...
    def note(self, message: str) -> None: ...
    def close(self) -> None: ...


DISABLED = False  # `wlock --no-progress`


def make_progress(title: str, total_bytes: int, *, quiet: bool) -> Progress:
    """Bars on a terminal, sparse lines in a log; nothing with `quiet` (--json) or -q; with
    --no-progress or HF_HUB_DISABLE_PROGRESS_BARS (huggingface_hub's own bars obey it), no
    bars, only the waits. With -v, a line per
    file as it completes, whatever its size."""
    every = verbosity() >= 1
    if quiet or verbosity() < 0:
        return _Silent()
    if DISABLED or _env_true("HF_HUB_DISABLE_PROGRESS_BARS"):
        # No bars, but a wait is still a line of the log: -q alone silences it (issue 59).
        return _Lines(title, 0, every=True) if every else _NotesOnly()
    if sys.stderr.isatty() and not os.environ.get("CI"):
        return _Bars(title, total_bytes, every=every)
    return _Lines(title, total_bytes, every=every)


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


class _Silent:
    def start(self, label: str, size: int) -> None:
        pass

    def advance(self, label: str, n: int) -> None:
        pass

    def done(self, label: str, size: int) -> None:
        pass

    def note(self, message: str) -> None:
        pass

    def close(self) -> None:
        pass


class _NotesOnly(_Silent):
    """Progress off: nothing drawn, but each line about the whole transfer (a wait on the
    Hub's rate limits) said, since a log is where a stalled CI job is read."""

    def note(self, message: str) -> None:
        click.echo(message, err=True)


class _Lines:
    """For CI logs: a line per big file (per file with -v), and the total every 10 seconds
    (never without a total)."""

    def __init__(self, title: str, total: int, *, every: bool) -> None:
        self._title, self._total, self._done, self._every = title, total, 0, every
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
        if size >= BIG_FILE or self._every:
            click.echo(f"  {label} ({human_size(size)})", err=True)

    def note(self, message: str) -> None:
        """A line about the whole transfer (a wait on the Hub's rate limits)."""
        click.echo(message, err=True)

    def close(self) -> None:
        pass


class _Bars:
    """rich bars: the total (bytes, rate, ETA) and one per big file in flight; with -v, a
    line above them per file as it completes."""

    def __init__(self, title: str, total: int, *, every: bool) -> None:
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

        speed, remaining = settled_columns()
        self._progress = Progress(
            TextColumn("{task.description}"), BarColumn(), DownloadColumn(), speed, remaining,
            transient=True, console=_stderr_console(),
        )
        self._total = self._progress.add_task(title, total=total)
        self._tasks: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._every = every
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
        if self._every:
            self._progress.console.print(f"  {label} ({human_size(size)})", markup=False,
                                         highlight=False)

    def note(self, message: str) -> None:
        """A line above the bars (a wait on the Hub's rate limits)."""
        self._progress.console.print(message, markup=False, highlight=False)

    def close(self) -> None:
        self._progress.stop()


# A rate or an ETA means something once a transfer has run this long and moved this much:
# before, one fast first chunk or a slow handshake shows `20.2 kB/s 1:19:20`.
SETTLE_SECONDS = 3.0
SETTLE_BYTES = 256 * 1024


def settled_columns() -> tuple[Any, Any]:
    """rich's transfer-speed and time-remaining columns, blank until their task has settled
    (SETTLE_SECONDS of its own time and SETTLE_BYTES moved)."""
    from rich.progress import TimeRemainingColumn, TransferSpeedColumn
    from rich.text import Text

    def settled(task: Any) -> bool:
        return bool(task.elapsed and task.elapsed >= SETTLE_SECONDS
                    and task.completed >= SETTLE_BYTES)

    class Speed(TransferSpeedColumn):
        def render(self, task: Any) -> Text:
            if settled(task):
                return super().render(task)
            return Text("", style="progress.data.speed")

    class Remaining(TimeRemainingColumn):
        def render(self, task: Any) -> Text:
            if settled(task):
                return super().render(task)
            return Text("-:--:--", style="progress.remaining")

    return Speed(), Remaining()


def _stderr_console() -> Any:
    from rich.console import Console

    return Console(stderr=True)
