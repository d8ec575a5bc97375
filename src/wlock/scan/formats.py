"""A file judged by its content, as the loader that opens it reads it.

The first bytes decide, never the name (a `.dat`, a `.pth.tar` or a shard named `.weights`
is read by torch.load all the same):

- `PK\\x03\\x04`: a zip, as torch's reader (`caffe2/serialize/inline_container.cc`, miniz)
  and numpy's `np.load` of an `.npz` read one: every member whose name ends in `.pkl` in any
  case (torch finds `data.pkl` whatever the case, and a TorchScript archive has
  `constants.pkl`) is walked as a pickle, and every member that starts as an `.npy` is
  judged as one; CRCs are not checked, as torch does not check them; the tensors' own
  members are raw bytes neither library unpickles.
- `\\x93NUMPY`: an `.npy`; its header is read as numpy reads it (a literal dict); an array
  whose dtype may hold objects is followed by a pickle, which `np.load(allow_pickle=True)`
  loads.
- a tar header: torch.load's legacy tar format (`torch/serialization.py`, legacy_load):
  the members `storages`, `tensors` and `pickle`, each a run of pickles and raw records.
- gzip, bz2, xz, lzma: joblib's compressed dumps, judged inflated (bounded).
- anything else whose first byte is an opcode: a pickle; after it, torch's legacy format
  (a magic number, then four more pickles) or any further pickle that starts with PROTO.

A walk that ends before its STOP refuses the file as unknown, with the reason, unless the
stream named no import before it broke and no container declared it a pickle (a text file
read as protocol 0, raw tensor bytes: they break before the unpickler could call anything).
"""

from __future__ import annotations

import bz2
import functools
import gzip
import importlib
import io
import json
import lzma
import struct
import tarfile
import warnings
import zipfile
import zlib
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from wlock.scan.budget import (
    MIB,
    Budget,
    LimitReached,
    ScanLimits,
    SeekableReader,
    Source,
    Truncated,
    Unjudged,
)
from wlock.scan.unpickle import OPCODES, Call, Global, Walk, Walker

TORCH_MAGIC = 0x1950A86A20F9469CFC6C  # torch/serialization.py MAGIC_NUMBER
NPY_MAGIC = b"\x93NUMPY"
# joblib/compressor.py's prefixes: what joblib.load inflates before it unpickles.
_COMPRESSED = {b"\x1f\x8b": "gzip", b"BZh": "bz2", b"\xfd7zXZ\x00": "xz", b"]\x00\x00": "lzma",
               # zlib's header: deflate with a 32 KiB window, each level's check bits.
               **dict.fromkeys((b"x\x01", b"x\x5e", b"x\x9c", b"x\xda"), "zlib")}
_UNREAD_COMPRESSED = {b"\x04\x22\x4d\x18": "lz4", b"ZF": "joblib's old zlib format"}
# torch._utils._element_size of each storage type legacy_load meets.
_ELEMENT_SIZE = {
    "torch.DoubleStorage": 8, "torch.FloatStorage": 4, "torch.HalfStorage": 2,
    "torch.BFloat16Storage": 2, "torch.LongStorage": 8, "torch.IntStorage": 4,
    "torch.ShortStorage": 2, "torch.CharStorage": 1, "torch.ByteStorage": 1,
    "torch.BoolStorage": 1, "torch.ComplexFloatStorage": 8, "torch.ComplexDoubleStorage": 16,
}
# The largest .npy header read; numpy's own cap is 10,000 bytes, lifted by allow_pickle.
NPY_HEADER_CAP = 64 * MIB


@functools.cache
def _read_array_header() -> Any:
    """numpy's own header parser, as np.load calls it (numpy 2 moved it to _format_impl;
    its name and signature are the same since numpy 1.24), imported on first use."""
    try:
        return importlib.import_module("numpy.lib._format_impl")._read_array_header
    except ImportError:  # numpy 1.x
        return importlib.import_module("numpy.lib.format")._read_array_header


@dataclass
class Judgement:
    """What a file holds for an unpickler: the imports of every pickle a loader reads in it,
    whether it holds one at all, and why it could not be read to its end, if it could not."""

    imports: list[str] = field(default_factory=list)
    pickle: bool = False
    unreadable: str | None = None

    def add(self, walk: Walk, where: str, *, declared: bool) -> bool:
        """Take one walk's findings; False when the walk ended the file's judgement."""
        for name in walk.imports:
            if name not in self.imports:
                self.imports.append(name)
        if walk.stopped:
            self.pickle = True
            return True
        # A stream that broke before it named any import cannot have made the unpickler call
        # anything (the walk reads at least as far as CPython's: tests/unit/test_pickles.py
        # checks it against the unpickler itself): no pickle, unless its container says it
        # is one (a zip's .pkl member, an .npy of objects, a legacy torch file's next pickle).
        if walk.imported or walk.limit or declared:
            self.pickle = True
            self.unreadable = f"{where}: {walk.error}"
        return False


def judge_stream(stream: BinaryIO | io.RawIOBase, limits: ScanLimits | None = None,
                 size: int | None = None) -> Judgement:
    """The judgement of one file (a seekable binary stream, read from its start). Never
    raises for what the bytes hold; a stream's own OSError (a failed range read) passes."""
    budget = Budget(limits or ScanLimits())
    out = Judgement()
    try:
        _judge(stream, budget, out, size)
    except LimitReached as e:
        out.pickle = True
        out.unreadable = str(e)
    return out


def _judge(stream: BinaryIO | io.RawIOBase, budget: Budget, out: Judgement,
           size: int | None) -> None:
    stream.seek(0)
    head = stream.read(8) or b""
    stream.seek(0)
    if head.startswith(b"PK\x03\x04"):
        _zip(stream, budget, out)
    elif head.startswith(b"PK\x05\x06"):
        # np.load takes an empty zip's end record for a zip too (_ZIP_SUFFIX), and zipfile
        # then finds the real directory at the end; torch.load, which wants PK\x03\x04,
        # reads the same bytes as a pickle.
        _zip(stream, budget, out)
        if out.unreadable is None:
            stream.seek(0)
            _pickles(Source(stream, budget, size), out)
    elif head.startswith(NPY_MAGIC):
        _npy(Source(stream, budget, size), out, "the array")
    elif (kind := next((k for m, k in _COMPRESSED.items() if head.startswith(m)), None)):
        _compressed(stream, kind, budget, out)
    elif (kind := next((k for m, k in _UNREAD_COMPRESSED.items() if head.startswith(m)),
                       None)):
        out.pickle = True
        out.unreadable = f"compressed with {kind}, which this judgement does not inflate"
    elif _is_tar(stream):
        _tar(stream, budget, out)
    elif head[:1] and head[:1] in OPCODES:
        stream.seek(0)
        _pickles(Source(stream, budget, size), out)


def _pickles(src: Source, out: Judgement) -> None:
    """A file pickle.load, joblib.load or torch.load reads from its start."""
    first = Walker(src, joblib=True).run()
    if not out.add(first, "the pickle", declared=False):
        return
    if first.value == TORCH_MAGIC:
        # torch's legacy format: the protocol version, sys_info, the object, the storages'
        # keys; then raw storage bytes, which torch copies and never unpickles.
        for what in ("its protocol version", "its sys_info", "its object",
                     "its storages' keys"):
            if not out.add(Walker(src).run(), f"the legacy torch file's {what}",
                           declared=True):
                return
        return
    # Any further pickle a reader calling load() again would meet: one that starts as a
    # pickle of protocol 2 or later does. What follows a STOP otherwise is no loader's.
    while True:
        here = src.tell()
        nxt = src.peek(2)
        if len(nxt) < 2 or nxt[0] != 0x80 or not 2 <= nxt[1] <= 5:
            return
        if not out.add(Walker(src, joblib=True).run(), f"the pickle at byte {here}",
                       declared=False):
            return


# -- zip: torch.save's format, numpy's .npz

def _zip(stream: BinaryIO | io.RawIOBase, budget: Budget, out: Judgement,
         depth: int = 0) -> None:
    try:
        archive = zipfile.ZipFile(stream)
        infos = archive.infolist()
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, struct.error,
            NotImplementedError) as e:
        # torch's reader decides by the first four bytes and loads what its own reader
        # finds: a directory Python cannot read may still hold a data.pkl torch reads.
        out.pickle = True
        out.unreadable = f"a zip whose directory cannot be read ({e})"
        return
    try:
        nested = _pt2_loaded(archive, infos)
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, struct.error,
            NotImplementedError, zlib.error, RuntimeError) as e:
        out.pickle = True
        out.unreadable = f"a PT2 archive whose configs cannot be read ({e})"
        return
    if nested and depth >= 2:
        out.pickle = True
        out.unreadable = "a PT2 archive nested in a PT2 archive's member, past what is judged"
        return
    for info in infos:
        if info.filename not in nested:
            continue
        budget.check_time()
        try:
            member = _member(stream, info, budget)
            inner = member if member.seekable() else io.BytesIO(member.read())
            _judge_nested(inner, budget, out, depth + 1)
        except Unjudged as e:
            out.pickle = True
            out.unreadable = f"{info.filename}: {e}"
        if out.unreadable is not None:
            return
    # torch's own archive keeps each tensor's bytes under `data/`, raw storage torch never
    # unpickles; but np.load reads the same zip as an .npz, and any member that starts as an
    # .npy, whatever its name or folder, as an array: every member's first bytes are read.
    for info in infos:
        if info.filename in nested:
            continue
        budget.check_time()
        is_pkl = info.filename.lower().endswith(".pkl")
        try:
            member = _member(stream, info, budget)
            if is_pkl:
                src = Source(member, budget)
                if not out.add(Walker(src).run(), info.filename, declared=True):
                    return
                continue
            if member.read(len(NPY_MAGIC)) == NPY_MAGIC:
                member = _member(stream, info, budget)  # from its start again
                if not _npy(Source(member, budget), out, info.filename):
                    return
        except Unjudged as e:
            # A member that cannot be read may be a pickle or an array of objects to
            # either reader: unknown. (A member numpy or torch would refuse is not.)
            out.pickle = True
            out.unreadable = f"{info.filename}: {e}"
            return


class _Window(SeekableReader):
    """Bytes [start, start + length) of a seekable stream."""

    def __init__(self, stream: BinaryIO | io.RawIOBase, start: int, length: int) -> None:
        super().__init__(length)
        self._stream, self._start = stream, start

    def read(self, n: int = -1) -> bytes:
        left = self.size - self._pos
        n = left if n < 0 else min(n, left)
        if n <= 0:
            return b""
        self._stream.seek(self._start + self._pos)
        data = self._stream.read(n) or b""
        self._pos += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)


class _Inflated(io.RawIOBase):
    """A deflate stream inflated as it is read, every byte charged to the budget: a zip
    member's raw deflate (`wbits` -15), or joblib's zlib stream with its header (15)."""

    def __init__(self, raw: Any, budget: Budget, wbits: int = -zlib.MAX_WBITS) -> None:
        super().__init__()
        self._raw, self._budget = raw, budget
        self._z = zlib.decompressobj(wbits)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        chunk = 64 * 1024
        while not self._z.eof:
            if self._z.unconsumed_tail:
                data = self._z.decompress(self._z.unconsumed_tail, min(len(buffer), chunk))
            else:
                raw = self._raw.read(chunk)
                if not raw:
                    return 0
                data = self._z.decompress(raw, min(len(buffer), chunk))
            if data:
                self._budget.inflate(len(data))
                buffer[:len(data)] = data
                return len(data)
        return 0


# torch.export's PT2 archive (torch/export/pt2_archive/_package.py, the names in
# torch._C._export.pt2_archive_constants): `torch.export.load` unpickles its sample inputs
# (torch.load, falling back to weights_only=False), each weight and tensor constant its
# config marks `use_pickle` (torch.load, weights_only=False), every `opaque_obj_` constant
# (pickle.loads) and `custom_obj_` one (torch's own unpickler), and the legacy single files.
PT2_CONFIG_SIZE = 64 * 1024 * 1024
PT2_DATA = ("data/weights/", "data/constants/")
PT2_UNPICKLED = ("data/sample_inputs/", "data/constants/custom_obj_",
                 "data/constants/opaque_obj_")


def _pt2_loaded(archive: zipfile.ZipFile, infos: list[zipfile.ZipInfo]) -> set[str]:
    """The members of a PT2 archive that torch.export.load unpickles; none for any other
    zip."""
    names = {info.filename: info for info in infos}
    roots = [name[:-len("archive_format")] for name, info in names.items()
             if name.rpartition("/")[2] == "archive_format" and info.file_size <= 16
             and archive.read(info).strip() == b"pt2"]
    loaded: set[str] = set()
    for root in roots:
        for name in names:
            if not name.startswith(root):
                continue
            inner = name[len(root):]
            sample = inner.startswith("extra/") and inner.endswith(".sample_input.pt")
            legacy = inner.startswith(PT2_DATA) and inner.endswith(".pt")
            if sample or legacy or inner.startswith(PT2_UNPICKLED):
                loaded.add(name)
            elif inner.startswith(PT2_DATA) and inner.endswith("_config.json"):
                if names[name].file_size > PT2_CONFIG_SIZE:
                    raise ValueError(f"{name} is past {PT2_CONFIG_SIZE:,} bytes")
                folder = root + inner.rpartition("/")[0] + "/"
                parsed = json.loads(archive.read(names[name]))
                config = parsed.get("config") if isinstance(parsed, dict) else None
                for entry in config.values() if isinstance(config, dict) else ():
                    if isinstance(entry, dict) and entry.get("use_pickle") is not False:
                        loaded.add(folder + str(entry.get("path_name")))
    return loaded & names.keys()


def _judge_nested(stream: BinaryIO | io.RawIOBase, budget: Budget, out: Judgement,
                  depth: int) -> None:
    """A member a PT2 archive's loader hands to torch.load or pickle.loads."""
    stream.seek(0)
    head = stream.read(4) or b""
    stream.seek(0)
    if head.startswith(b"PK\x03\x04"):
        _zip(stream, budget, out, depth)
    else:
        _pickles(Source(stream, budget, None), out)


def _member(stream: BinaryIO | io.RawIOBase, info: zipfile.ZipInfo,
            budget: Budget) -> io.BufferedReader:
    """A member's bytes from its local header, as miniz finds them, its CRC not checked."""
    stream.seek(info.header_offset)
    local = stream.read(30) or b""
    if len(local) < 30 or local[:4] != b"PK\x03\x04":
        raise Unjudged("its local header is not where the zip's directory says")
    name_length, extra_length = struct.unpack("<HH", local[26:30])
    start = info.header_offset + 30 + name_length + extra_length
    window = _Window(stream, start, info.compress_size)
    if info.compress_type == zipfile.ZIP_STORED:
        return io.BufferedReader(window)
    if info.compress_type == zipfile.ZIP_DEFLATED:
        return io.BufferedReader(_Inflated(window, budget))
    if info.compress_type in (zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA):
        # torch's reader (miniz) refuses these, but np.load opens an .npz with Python's
        # zipfile, which decompresses both: judged as numpy reads them.
        return io.BufferedReader(_ZipDecompressed(window, info.compress_type, budget))
    raise Unjudged(f"compressed with zip method {info.compress_type}, which neither torch's "
                   "reader nor Python's zipfile (numpy's) reads")


class _ZipDecompressed(io.RawIOBase):
    """A zip member compressed with bzip2 or LZMA, decompressed by zipfile's own
    decompressor for its method (`zipfile._get_decompressor`, what np.load's ZipFile uses),
    every byte charged to the budget."""

    def __init__(self, raw: Any, method: int, budget: Budget) -> None:
        super().__init__()
        self._raw, self._budget = raw, budget
        self._d: Any = zipfile._get_decompressor(method)  # type: ignore[attr-defined]
        self._ready, self._done = b"", False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._ready and not self._done:
            raw = self._raw.read(64 * 1024)
            if not raw:
                self._done = True
                break
            try:
                self._ready = self._d.decompress(raw)
            except (OSError, EOFError, ValueError, lzma.LZMAError) as e:
                raise Unjudged(f"its compressed bytes break ({e})") from e
            self._budget.inflate(len(self._ready))
        n = min(len(buffer), len(self._ready))
        buffer[:n] = self._ready[:n]
        self._ready = self._ready[n:]
        return n


# -- numpy's .npy

def _npy(src: Source, out: Judgement, where: str) -> bool:
    """numpy.lib.format.read_array with allow_pickle=True, as np.load runs it: the version
    numpy accepts, the header parsed by numpy's own parser (with the Python-2 re-parse, and
    no cap on its size, which allow_pickle lifts), then a pickle when the dtype holds
    objects. A header numpy refuses unpickles nothing; one this judgement cannot read to its
    end (past NPY_HEADER_CAP) is unknown, refused, never taken for "no pickle"."""
    try:
        magic = src.read(8)
        version = (magic[6], magic[7])
        if version not in ((1, 0), (2, 0), (3, 0)):
            return True  # numpy's _check_version refuses it before it reads more
        counted = src.read(2 if version == (1, 0) else 4)
        length = struct.unpack("<H" if version == (1, 0) else "<I", counted)[0]
        if length > NPY_HEADER_CAP:
            out.pickle = True
            out.unreadable = (f"{where}: an .npy header of {length:,} bytes, past the "
                              f"{NPY_HEADER_CAP // MIB} MiB this judgement reads (np.load "
                              "with allow_pickle reads any)")
            return False
        header = src.read(length)
    except Truncated:
        return True  # numpy's own reads fail at the same place ("EOF: reading ...")
    try:
        with warnings.catch_warnings():  # numpy's note on a Python-2 header
            warnings.simplefilter("ignore")
            _, _, dtype = _read_array_header()(io.BytesIO(counted + header), version,
                                               max_header_size=2**64)
        holds_objects = bool(dtype.hasobject)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return True  # np.load raises on the header: nothing is unpickled
    if not holds_objects:
        return True
    # np.load(allow_pickle=True): pickle.load of what follows the header.
    return out.add(Walker(src).run(), f"{where}: its array of objects", declared=True)


# -- joblib's compressed dumps

class _Counted(io.RawIOBase):
    """A decompressing reader (gzip, bz2, lzma's) whose every byte is charged to the
    budget."""

    def __init__(self, inner: Any, budget: Budget) -> None:
        super().__init__()
        self._inner, self._budget = inner, budget

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        data: bytes = self._inner.read(n)
        self._budget.inflate(len(data))
        return data


def _compressed(stream: BinaryIO | io.RawIOBase, kind: str, budget: Budget,
                out: Judgement) -> None:
    try:
        inner: Any
        if kind == "zlib":
            inner = io.BufferedReader(_Inflated(stream, budget, zlib.MAX_WBITS))
        else:
            opener: Any = {"gzip": gzip.GzipFile, "bz2": bz2.BZ2File, "xz": lzma.LZMAFile,
                           "lzma": lzma.LZMAFile}[kind]
            inner = _Counted(opener(fileobj=stream) if kind == "gzip" else opener(stream),
                             budget)
        src = Source(inner, budget)
        first = src.peek(1)
        if not first or first not in OPCODES:
            return  # joblib.load would fail at its first byte: nothing called
        _pickles(src, out)
    except (OSError, EOFError, lzma.LZMAError, zlib.error, ValueError) as e:
        if out.unreadable is None and out.imports:
            out.pickle = True
            out.unreadable = f"the {kind} stream breaks ({e})"


# -- torch's legacy tar format

_TAR_CHECKSUM = frozenset(b"01234567 \0")


def _is_tar(stream: BinaryIO | io.RawIOBase) -> bool:
    # torch tries tarfile.open on every file that is not a zip, and takes it as the legacy
    # format whenever tarfile can read a first header (whatever the file's name). A header
    # is 512 bytes whose checksum field (148..156) is octal: what tarfile checks first,
    # checked here before tarfile is asked (most files fail it at once).
    stream.seek(0)
    head = stream.read(512) or b""
    if len(head) < 512 or not set(head[148:156]) <= _TAR_CHECKSUM:
        stream.seek(0)
        return False
    try:
        stream.seek(0)
        with tarfile.open(fileobj=stream, mode="r:"):
            return True
    except (tarfile.TarError, OSError, EOFError, ValueError):
        return False
    finally:
        stream.seek(0)


def _tar(stream: BinaryIO | io.RawIOBase, budget: Budget, out: Judgement) -> None:
    try:
        with tarfile.open(fileobj=stream, mode="r:") as tar:
            last: dict[str, tarfile.TarInfo] = {}
            for member in tar:
                budget.opcode()
                if member.name in ("storages", "tensors", "pickle"):
                    last[member.name] = member  # tar.extract takes the last of a name
            if "storages" not in last:
                return  # legacy_load's first step fails: nothing unpickled
            out.pickle = True
            for name, read in (("storages", _tar_storages), ("tensors", _tar_tensors),
                               ("pickle", None)):
                if name not in last:
                    return  # torch stops here: KeyError
                handle = tar.extractfile(last[name])
                if handle is None:
                    out.unreadable = f"the tar's {name} is not a file"
                    return
                src = Source(handle, budget, last[name].size)
                try:
                    if read is None:
                        out.add(Walker(src).run(), "the tar's pickle", declared=True)
                    elif not read(src, out):
                        return
                except Unjudged as e:
                    out.unreadable = f"the tar's {name}: {e}"
                    return
    except (tarfile.TarError, OSError, EOFError, ValueError) as e:
        out.pickle = True
        out.unreadable = f"a tar whose members cannot all be read ({e})"


def _count(src: Source, out: Judgement, where: str) -> int | None:
    walk = Walker(src).run()
    if not out.add(walk, where, declared=True):
        return None
    if not isinstance(walk.value, int) or walk.value < 0:
        out.unreadable = f"{where} is no count this judgement could read"
        return None
    return walk.value


def _tar_storages(src: Source, out: Judgement) -> bool:
    n = _count(src, out, "the tar's storages")
    if n is None:
        return False
    for i in range(n):
        where = f"the tar's storage {i}"
        walk = Walker(src).run()
        if not out.add(walk, where, declared=True):
            return False
        value = walk.value
        kind = value[2] if isinstance(value, tuple) and len(value) == 3 else None
        size = _ELEMENT_SIZE.get(kind.name) if isinstance(kind, Global) else None
        if size is None:
            out.unreadable = f"{where} names a storage type of unknown size"
            return False
        (numel,) = struct.unpack("<q", src.read(8))
        if numel < 0:
            out.unreadable = f"{where} has a negative size"
            return False
        src.skip(numel * size)
    return out.add(Walker(src).run(), "the tar's storage views", declared=True)


def _tar_tensors(src: Source, out: Judgement) -> bool:
    n = _count(src, out, "the tar's tensors")
    if n is None:
        return False
    for i in range(n):
        if not out.add(Walker(src).run(), f"the tar's tensor {i}", declared=True):
            return False
        (ndim,) = struct.unpack("<i", src.read(4))
        if ndim < 0:
            out.unreadable = f"the tar's tensor {i} has a negative rank"
            return False
        src.skip(4 + 16 * ndim + 8)
    return True


__all__ = ["Call", "Judgement", "judge_stream"]
