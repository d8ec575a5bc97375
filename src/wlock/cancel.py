"""One cancellation for the whole process: every wait ends when the user asks (issue 59).

Ctrl-C (SIGINT) and SIGTERM set `STOP`, through the handlers the CLI installs first thing
(`install`), before they raise in the main thread. Every wait in wlock (a rate limit's
reset, a retry's back-off, another writer's lease, another process's lock) is `sleep`,
which waits on `STOP`: a thread 60 s into a rate-limit wait wakes within milliseconds and
raises `Cancelled`, so the main thread's `with ThreadPoolExecutor` is not held at its
shutdown by a worker still asleep, and the command ends in a second with its temp files
removed. A plain `time.sleep` in a worker thread is what made Ctrl-C wait out the reset.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

STOP = threading.Event()


class Cancelled(KeyboardInterrupt):
    """Raised in a thread whose wait `STOP` ended: the user asked the command to stop."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread: ends the command as Ctrl-C does, exit 143."""


def sleep(seconds: float) -> None:
    """Wait `seconds`, or until the user stops the command (then raise Cancelled)."""
    if STOP.wait(max(0.0, seconds)):
        raise Cancelled


def stopped() -> bool:
    return STOP.is_set()


def _on_interrupt(signum: int, frame: FrameType | None) -> None:
    STOP.set()
    raise KeyboardInterrupt


def _on_terminate(signum: int, frame: FrameType | None) -> None:
    STOP.set()
    raise Terminated


def install() -> None:
    """Make SIGINT and SIGTERM set STOP before they interrupt the main thread (from the
    main thread only, as Python allows)."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_interrupt)
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, _on_terminate)
