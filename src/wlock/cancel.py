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

import queue
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from types import FrameType
from typing import TypeVar

T = TypeVar("T")

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


def each(work: Callable[[T], object], items: Iterable[T], jobs: int, grace: float = 2.0
         ) -> Iterator[tuple[T, BaseException | None]]:
    """`work(item)` for every item on `jobs` daemon threads, yielding `(item, error)` (None
    when it returned) as each ends. For work that can block in a library's own code (an
    object store's upload on a server that answers nothing), which no `STOP` can wake: on
    Ctrl-C or SIGTERM the workers get `grace` seconds to end (and remove their temp files),
    then the command ends without them. A ThreadPoolExecutor would hold the exit until the
    blocked call returned, at its shutdown and again at the interpreter's."""
    todo: queue.SimpleQueue[T] = queue.SimpleQueue()
    count = 0
    for item in items:
        todo.put(item)
        count += 1
    ended: queue.SimpleQueue[tuple[T, BaseException | None]] = queue.SimpleQueue()
    leave = threading.Event()

    def worker() -> None:
        while not (leave.is_set() or STOP.is_set()):
            try:
                item = todo.get_nowait()
            except queue.Empty:
                return
            try:
                work(item)
            except BaseException as e:  # noqa: BLE001 - handed to the caller as it is
                ended.put((item, e))
            else:
                ended.put((item, None))

    threads = [threading.Thread(target=worker, daemon=True, name="wlock-each")
               for _ in range(max(1, min(jobs, count)))]
    for thread in threads:
        thread.start()
    try:
        for _ in range(count):
            while True:
                try:
                    yield ended.get(timeout=0.5)  # a wait Ctrl-C interrupts
                    break
                except queue.Empty:
                    continue
    finally:
        leave.set()
        deadline = time.monotonic() + grace
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))


def result_of(future: Future[T]) -> T:
    """`future.result()`, waited for in half seconds: Linux may deliver Ctrl-C or SIGTERM to
    any thread, and a main thread blocked with no timeout never runs the handler."""
    while True:
        try:
            return future.result(timeout=0.5)
        except TimeoutError:
            continue


def call(work: Callable[[], T]) -> T:
    """`work()` on a daemon thread, its result or exception returned here: for a library
    call that blocks in its own code (an object store's listing on a frozen server), which
    holds the main thread where no signal reaches Python. Ctrl-C and SIGTERM interrupt the
    wait here at once; the call is left to end with the process."""
    box: list[tuple[T | None, BaseException | None]] = []
    ended = threading.Event()

    def run() -> None:
        try:
            box.append((work(), None))
        except BaseException as e:  # noqa: BLE001 - raised again in the caller's thread
            box.append((None, e))
        finally:
            ended.set()

    threading.Thread(target=run, daemon=True, name="wlock-call").start()
    while not ended.wait(0.5):  # a wait Ctrl-C interrupts
        pass
    value, error = box[0]
    if error is not None:
        raise error
    return value  # type: ignore[return-value]


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
