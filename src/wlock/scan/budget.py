"""The bounds of one file's judgement, and the byte reader that keeps them.

Every judgement is bounded: the bytes walked as opcodes, the bytes inflated from a
compressed member, the opcodes, the unpickler's stack, memo and nesting, and the time. A file
that reaches a bound is refused as unknown, naming the bound and the setting that raises it
(`[tool.wlock.policy.scan]` in weights.toml): never recorded as clean.

Seen before the bounds: a 1 MB zip whose pickle inflates to 1 GiB took 3.19 GB to judge, and
6 MiB of one opcode 689 MB (issue 36).
"""

from __future__ import annotations

import io
import time
from dataclasses import dataclass, fields
from typing import IO, BinaryIO

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ScanLimits:
    """What one file's judgement may cost (weights.toml's `[tool.wlock.policy.scan]`, each
    key the field's name with dashes). The defaults pass the largest benign checkpoints
    measured (a 7B model's data.pkl walks 0.3 MB; bench/pickle_scanners.py) with room, and
    keep a lock of hostile files under 200 MB of memory."""

    max_bytes: int = 256 * MIB  # pickle bytes walked as opcodes (large arguments skipped)
    max_inflated: int = 1024 * MIB  # bytes decompressed from zip members or gzip/xz/bz2
    max_opcodes: int = 20_000_000
    max_stack: int = 1_000_000  # values on the unpickler's stack, across marks
    max_memo: int = 1_000_000
    max_depth: int = 10_000  # nested MARKs, and containers within containers
    max_seconds: float = 120.0

    @staticmethod
    def setting(name: str) -> str:
        return f"[tool.wlock.policy.scan] {name.replace('_', '-')}"

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        return tuple(f.name.replace("_", "-") for f in fields(cls))


class Unjudged(Exception):
    """The judgement could not read the file to its end: the reason, for the record."""


class LimitReached(Unjudged):
    def __init__(self, cap: str, value: float) -> None:
        self.cap = cap
        shown = f"{value / MIB:g} MiB" if cap in ("max_bytes", "max_inflated") else f"{value:g}"
        super().__init__(f"the judgement reached its bound {cap.replace('_', '-')} = {shown} "
                         f"(raise it with {ScanLimits.setting(cap)})")


class Truncated(Unjudged):
    pass


class Budget:
    """One file's account: what its judgement has spent against `limits`."""

    def __init__(self, limits: ScanLimits) -> None:
        self.limits = limits
        self.walked = 0
        self.inflated = 0
        self.opcodes = 0
        self._deadline = time.monotonic() + limits.max_seconds

    def walk(self, n: int) -> None:
        self.walked += n
        if self.walked > self.limits.max_bytes:
            raise LimitReached("max_bytes", self.limits.max_bytes)

    def inflate(self, n: int) -> None:
        self.inflated += n
        if self.inflated > self.limits.max_inflated:
            raise LimitReached("max_inflated", self.limits.max_inflated)

    def opcode(self) -> None:
        self.opcodes += 1
        if self.opcodes > self.limits.max_opcodes:
            raise LimitReached("max_opcodes", self.limits.max_opcodes)
        if not self.opcodes & 0xFFFF:
            self.check_time()

    def check_time(self) -> None:
        if time.monotonic() > self._deadline:
            raise LimitReached("max_seconds", self.limits.max_seconds)


class SeekableReader(io.RawIOBase):
    """A read-only file of `size` bytes that seeks by moving its position: the base of the
    readers the judgement reads through (a zip member's window, HTTP ranges), which supply
    `readinto` from their position."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence]
        self._pos = max(0, base + offset)
        return self._pos


# An argument larger than this is skipped (seeked over where the stream can seek), never held:
# no module name, magic number or dtype is this long.
KEEP_ARGUMENT = 4096


class Source:
    """A pickle's bytes as the unpickler reads them (`read`, `readline`), from any binary
    stream, every byte counted against the budget; `skip` passes over an argument's body
    without holding it (a seek where the stream can, so a range reader never fetches it)."""

    def __init__(self, stream: BinaryIO | IO[bytes] | io.RawIOBase, budget: Budget,
                 size: int | None = None) -> None:
        self._stream = stream
        self.budget = budget
        self._seekable = bool(getattr(stream, "seekable", lambda: False)())
        self._size = size
        self._back = b""  # what peek read and the next read gives first
        self._at = stream.tell() if self._seekable else 0  # counted, not asked of the stream
        if self._seekable and size is None:
            self._size = stream.seek(0, io.SEEK_END)
            stream.seek(self._at)

    def tell(self) -> int:
        return self._at

    def peek(self, n: int) -> bytes:
        """Up to `n` next bytes, left to be read again."""
        if len(self._back) < n:
            self._back += self._stream.read(n - len(self._back)) or b""
        return self._back[:n]

    def read(self, n: int) -> bytes:
        """Exactly `n` bytes, or Truncated (the unpickler's "pickle data was truncated")."""
        self.budget.walk(n)
        if self._back:
            data, self._back = self._back[:n], self._back[n:]
            if len(data) < n:
                data += self._stream.read(n - len(data)) or b""
        else:
            data = self._stream.read(n) or b""
        self._at += len(data)
        if len(data) < n:
            raise Truncated(f"the pickle ends {n - len(data)} byte(s) early")
        return data

    def readline(self) -> bytes:
        """Up to and with the next newline; at the stream's end, what is left (CPython's
        file-reading unpickler takes a last line without its newline too)."""
        out = bytearray()
        while True:
            if self._back:
                byte, self._back = self._back[:1], self._back[1:]
            else:
                byte = self._stream.read(1)
            if not byte:
                break
            out += byte
            if byte == b"\n":
                break
            if len(out) > KEEP_ARGUMENT * 16:
                self.budget.walk(len(out))
                raise Unjudged("a text argument runs past 64 KiB without a newline")
        self.budget.walk(len(out))
        self._at += len(out)
        return bytes(out)

    def skip(self, n: int) -> None:
        """Pass over `n` bytes; Truncated if the stream holds fewer."""
        if self._back:
            taken = min(n, len(self._back))
            self._back = self._back[taken:]
            self._at += taken
            n -= taken
        if self._seekable and self._size is not None:
            if self._at + n > self._size:
                raise Truncated(f"an argument of {n} bytes runs past the file's end")
            self._at += n
            self._stream.seek(self._at)
            return
        left = n
        while left:
            chunk = self._stream.read(min(left, MIB))
            if not chunk:
                raise Truncated(f"an argument of {n} bytes runs past the stream's end")
            left -= len(chunk)
            self._at += len(chunk)
            self.budget.check_time()
