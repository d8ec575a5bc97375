"""A locked file's bytes through HTTP ranges, for the lock-time judgement (`wlock.scan`).

The judgement reads a torch zip by its ends (the central directory, then each pickle
member), a pickle from its start to its STOP, and the first block of anything else: never
the tensors. Every answer is checked before a byte of it is judged (issue 36): a 206 must
carry exactly the range asked (`Content-Range` and length), or the read fails naming the
file and the host; a server that ignores `Range` and answers 200 has its body read once,
to the file's locked size, and every later range is cut from that copy.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable, Iterable
from typing import IO

from wlock.errors import HubError
from wlock.scan.budget import SeekableReader

BLOCK = 64 * 1024
# A whole body kept in memory up to this, then on disk (a server that ignores Range).
SPOOL_IN_MEMORY = 8 * 1024 * 1024
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)\Z")


class BadRangeError(HubError):
    """A server's answer to a range request was not the range asked (exit 5)."""


def check_content_range(header: str | None, start: int, end: int, size: int,
                        got: int) -> str | None:
    """What is wrong with a 206 to `bytes=start-(end-1)` of a `size`-byte file whose body
    had `got` bytes; None when it is the range asked."""
    if header is None:
        return "a 206 without Content-Range"
    match = _CONTENT_RANGE.match(header.strip())
    if match is None:
        return f"a Content-Range that is not one ({header[:80]!r})"
    first, last, total = int(match[1]), int(match[2]), match[3]
    if (first, last + 1) != (start, end) or (total != "*" and int(total) != size):
        return f"bytes {first}-{last}/{total} where {start}-{end - 1}/{size} was asked"
    if got != end - start:
        return f"{got} bytes of a range of {end - start}"
    return None


class RangeReader(SeekableReader):
    """A seekable read-only file over `fetch(start, end)` (an HTTP range, end exclusive,
    which must return exactly those bytes): what zipfile and the judgement read, fetched in
    blocks, each block once."""

    def __init__(self, size: int, fetch: Callable[[int, int], bytes],
                 block: int = BLOCK) -> None:
        super().__init__(size)
        self._fetch, self._block = fetch, block
        self._blocks: dict[int, bytes] = {}
        self.bytes_read = 0  # what the ranges fetched
        self.requests = 0

    def _get(self, index: int) -> bytes:
        if index not in self._blocks:
            start = index * self._block
            end = min(self.size, start + self._block)
            data = self._fetch(start, end)
            if len(data) != end - start:  # fetch's own promise; a guard, not a check
                raise AssertionError("a range fetch returned another length")
            self.bytes_read += len(data)
            self.requests += 1
            if len(self._blocks) >= 256:  # 16 MiB of blocks at most; the walk reads on
                self._blocks.pop(next(iter(self._blocks)))
            self._blocks[index] = data
        return self._blocks[index]

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        wanted = min(len(buffer), self.size - self._pos)
        done = 0
        while done < wanted:
            index, offset = divmod(self._pos + done, self._block)
            chunk = self._get(index)[offset:offset + wanted - done]
            if not chunk:
                break
            buffer[done:done + len(chunk)] = chunk
            done += len(chunk)
        self._pos += done
        return done


class WholeBody:
    """A 200 answer to a range request, read once (to the file's size, no further) and kept:
    the reader's later ranges are cut from it."""

    def __init__(self) -> None:
        self.file: IO[bytes] | None = None

    def keep(self, chunks: Callable[[], Iterable[bytes]], size: int) -> str | None:
        """Spool the body; what is wrong with it (longer or shorter than `size`) or None."""
        spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY)  # noqa: SIM115
        got = 0
        for chunk in chunks():
            got += len(chunk)
            if got > size:
                spool.close()
                return f"a body longer than the file's {size} bytes"
            spool.write(chunk)
        if got != size:
            spool.close()
            return f"a body of {got} bytes where the file has {size}"
        self.file = spool
        return None

    def cut(self, start: int, end: int) -> bytes:
        assert self.file is not None
        self.file.seek(start)
        return self.file.read(end - start)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
