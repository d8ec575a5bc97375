"""What a pickle imports, read without downloading the weights.

A `pytorch_model.bin` is a pickle: `torch.load` calls whatever its GLOBAL/STACK_GLOBAL
opcodes name. The lock records those names for every locked pickle, so a policy can judge
them offline. The stream is read through HTTP ranges (`RangeReader`): a torch file is a zip,
so its end (the central directory), then `<name>/data.pkl`; a legacy torch file or a plain
pickle, its pickles from the start until they end. The tensors' bytes are never read.

The opcodes are walked by picklescan, the scanner the Hub itself runs on every upload: on
bench/pickle_scanners.py's corpus it caught 16 of 16 malicious pickles (every protocol,
STACK_GLOBAL through the memo, a nested pickle, getattr on an import) and passed 5 of 5 torch
checkpoints, and it is the one of the three measured that lists the imports (fickling
flagged 4 of 5 benign torch files; modelscan gives a verdict, not the names).
"""

from __future__ import annotations

import io
import logging
import pickletools
import zipfile
from collections.abc import Callable

from wlock.models import PickleScan

_OPCODES = frozenset(op.code for op in pickletools.opcodes)
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
_TORCH_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")


def is_pickle_name(path: str) -> bool:
    """A file `torch.load` or `pickle.load` would be given: judged by its name, as the Hub's
    scanner does (the bytes decide whether it really is one)."""
    return path.lower().endswith(PICKLE_SUFFIXES)


class RangeReader(io.RawIOBase):
    """A seekable read-only file over `fetch(start, end)` (an HTTP range, end exclusive):
    what zipfile and the scanner read, fetched in blocks, each block once."""

    def __init__(self, size: int, fetch: Callable[[int, int], bytes],
                 block: int = 64 * 1024) -> None:
        super().__init__()
        self.size, self._fetch, self._block = size, fetch, block
        self._pos = 0
        self._blocks: dict[int, bytes] = {}
        self.bytes_read = 0  # what the ranges fetched
        self.requests = 0

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

    def _get(self, index: int) -> bytes:
        if index not in self._blocks:
            start = index * self._block
            data = self._fetch(start, min(self.size, start + self._block))
            self.bytes_read += len(data)
            self.requests += 1
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


# What a pickle the scanner could not follow imports, as picklescan names an import it
# cannot read: unknown, so refused by `safe-imports` (and by "deny", as any pickle).
UNREADABLE = "unknown.unknown"


def scan(stream: io.RawIOBase | io.BufferedIOBase, path: str) -> PickleScan:
    """The imports of the pickle(s) in `stream` (a torch zip, a legacy torch file, a plain
    pickle). A file that holds no pickle at all gives `pickle=False`; one whose opcodes the
    scanner could read but not follow imports UNREADABLE: picklescan raises ValueError for a
    STACK_GLOBAL without its two operands, and MemoryError where a torch file's first opcode
    declares a string of 2^40 bytes (both seen on random `.bin` files: they ended the lock in
    a traceback)."""
    try:
        return _scan(stream, path)
    except (ValueError, MemoryError):
        return PickleScan(path, (UNREADABLE,), True)


def _scan(stream: io.RawIOBase | io.BufferedIOBase, path: str) -> PickleScan:
    from picklescan import scanner

    logging.getLogger("picklescan").setLevel(logging.ERROR)
    data: io.BufferedIOBase = io.BufferedReader(stream) if isinstance(
        stream, io.RawIOBase) else stream
    found: set[str] = set()
    seen_pickle = False
    data.seek(0)
    head = data.read(4)
    # Only a file that starts as a zip is looked at as one (zipfile.is_zipfile reads the end
    # of the file: a block more for every pickle).
    if head == b"PK\x03\x04" and zipfile.is_zipfile(data):
        data.seek(0)
        with zipfile.ZipFile(data) as archive:
            # Only the members a torch file unpickles (`data.pkl`, and any other .pkl): the
            # tensors' members are raw bytes, never read.
            for info in archive.infolist():
                if info.filename.endswith((".pkl", ".pickle")):
                    with archive.open(info) as member:
                        result = scanner.scan_pickle_bytes(member, f"{path}:{info.filename}")
                    found.update(f"{g.module}.{g.name}" for g in result.globals)
                    seen_pickle = True
        return PickleScan(path, tuple(sorted(found)), seen_pickle)
    data.seek(0)
    # Not a pickle: the first byte is no opcode at all (OpenVINO's .bin, a raw tensor
    # dump). Any opcode may start one (protocol 0 needs no PROTO), so all are let through.
    if not head or chr(head[0]) not in _OPCODES:
        return PickleScan(path, (), False)
    if path.lower().endswith(_TORCH_SUFFIXES):
        try:
            result = scanner.scan_pytorch(data, path)
        except scanner.InvalidMagicError:
            data.seek(0)
            result = scanner.scan_pickle_bytes(data, path)
    else:
        result = scanner.scan_pickle_bytes(data, path)
    return PickleScan(path, tuple(sorted({f"{g.module}.{g.name}" for g in result.globals})),
                      not result.scan_err or bool(result.globals))
