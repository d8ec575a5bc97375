"""A pickle walked as CPython's unpickler reads it, to its STOP, naming every import.

Why our own walk and not picklescan (bench/pickle_scanners.py measures both on the corpus of
tests/pickle_corpus.py): picklescan reads the opcodes with `pickletools.genops`, and where
pickletools and the unpickler disagree on an argument (an INT with a NUL after its digits, a
base-16 LONG, an unquoted STRING, a line that ends the file), genops raises, and picklescan
returns the imports seen so far as the result (CVE-2025-1716, -10155, -10156, -10157 are each
a way to make that happen). A judge must read the stream at least as far as the unpickler does,
so this one takes the opcode table from pickletools (which opcodes exist and their argument
shapes) but reads each argument the way `Modules/_pickle.c` does, and where it is unsure, more
leniently: it never stops before CPython would.

The walk is symbolic: it keeps what the stack holds (literals, the names of imports, calls as
`Call` values) only as far as the judgement needs it (STACK_GLOBAL's two strings, a legacy
torch file's magic number, joblib's array headers), so memory is bounded by the stack and memo
caps, never by the file.

What the judgement concludes from a walk is decided by its caller (`scan.formats`): a walk
that ends before its STOP is unknown once it has named an import (the unpickler may have
called it), and harmless only when it failed before any import could exist.
"""

from __future__ import annotations

import _compat_pickle
import copyreg
import lzma
import pickletools
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from wlock.scan.budget import KEEP_ARGUMENT, LimitReached, Source, Unjudged

OPCODES = frozenset(op.code.encode("latin-1") for op in pickletools.opcodes)
HIGHEST_PROTOCOL = 5
KEEP_ITEMS = 64  # items a container keeps (joblib's headers have 6); the rest are counted only

# joblib.load reads each numpy array's bytes from the stream itself, right after the BUILD
# of this wrapper (joblib/numpy_pickle.py, NumpyUnpickler.load_build and read_array).
JOBLIB_WRAPPER = "joblib.numpy_pickle.NumpyArrayWrapper"


@dataclass(slots=True)
class Global:
    name: str  # "module.qualname", after the unpickler's own renames


@dataclass(slots=True)
class Call:
    """What REDUCE, NEWOBJ, OBJ and INST build: a call of `func`, and what BUILD gave it."""

    func: Any
    args: Any
    state: Any = None


@dataclass(slots=True)
class Opaque:
    what: str  # an argument too long to keep, a persistent id, an out-of-band buffer


@dataclass(slots=True)
class Dict:
    items: list[tuple[Any, Any]] = field(default_factory=list)

    def get(self, key: str) -> Any:
        return next((v for k, v in self.items if k == key), None)


class _Missing:
    pass


MISSING = _Missing()


@dataclass(slots=True)
class Walk:
    """One pickle's walk: the imports it names, in order (with repeats removed), whether it
    reached its STOP, why not, the value STOP returned (as far as it was kept), and where the
    stream stood after it."""

    imports: list[str] = field(default_factory=list)
    stopped: bool = False
    error: str | None = None
    value: Any = MISSING
    end: int = 0
    imported: bool = False  # an import opcode ran (named, or one the walk could not name)
    limit: bool = False  # it ended at one of the judgement's bounds


def _line(data: bytes) -> bytes:
    return data[:-1] if data.endswith(b"\n") else data


def _c_long(text: bytes) -> int | Opaque:
    """An INT or LONG line's value as C's strtol (base 0) reads it: leading blanks, a sign,
    0x/0o/0b or a leading 0 for octal, and the digits up to a NUL. Lenient: what it cannot
    read is a number of unknown value, never an error (CPython's own errors only stop it
    sooner)."""
    text = text.split(b"\0", 1)[0].strip().rstrip(b"Ll")
    try:
        return int(text, 0)
    except ValueError:
        try:
            return int(text, 8) if text.lstrip(b"+-").startswith(b"0") else int(text, 10)
        except ValueError:
            return Opaque("number")


def _find_class(module: str, name: str, proto: int) -> str:
    # pickle.Unpickler.find_class: protocol < 3 streams get Python 2's names mapped
    # (fix_imports, on by default for pickle.load and torch.load).
    if proto < 3:
        if (module, name) in _compat_pickle.NAME_MAPPING:
            module, name = _compat_pickle.NAME_MAPPING[(module, name)]
        elif module in _compat_pickle.IMPORT_MAPPING:
            module = _compat_pickle.IMPORT_MAPPING[module]
    return f"{module}.{name}"


class Walker:
    """Walks one pickle from `source`'s position. `joblib`: read numpy arrays inline, as
    joblib.load does (a nested plain pickle for an array of objects)."""

    def __init__(self, source: Source, *, joblib: bool = False, depth: int = 0) -> None:
        self.src = source
        self.budget = source.budget
        self.limits = source.budget.limits
        self.joblib = joblib
        self.depth = depth
        self.stack: list[Any] = []
        self.marks: list[list[Any]] = []
        self.below = 0  # values held under the marks
        self.memo: dict[int, Any] = {}
        self.proto = 0
        self.walk = Walk()
        self._ops: dict[bytes, Callable[[], None]] = self._table()

    def run(self) -> Walk:
        walk = self.walk
        try:
            self._loop()
        except LimitReached as e:
            walk.error, walk.limit = str(e), True
        except Unjudged as e:
            walk.error = str(e)
        except (struct.error, UnicodeDecodeError, OverflowError, IndexError, KeyError,
                ValueError, TypeError, EOFError, OSError, zlib.error, lzma.LZMAError) as e:
            # OSError and EOFError: a compressed stream that breaks (a range read that fails
            # raises HubError, which passes).
            walk.error = f"{type(e).__name__}: {e}"
        try:
            walk.end = self.src.tell()
        except OSError:
            walk.end = 0
        return walk

    def _loop(self) -> None:
        read, ops, opcode = self.src.read, self._ops, self.budget.opcode
        while True:
            opcode()
            code = read(1)
            if code == b".":
                if not self.stack:
                    raise Unjudged("STOP with nothing on the stack")
                self.walk.value = self.stack.pop()
                self.walk.stopped = True
                return
            op = ops.get(code)
            if op is None:
                raise Unjudged(f"opcode {code!r} at byte {self.src.tell() - 1} is not one "
                               "the unpickler knows")
            op()

    # -- the stack, as _pickle.c's Pdata with its marks

    def push(self, value: Any) -> None:
        self.stack.append(value)
        if len(self.stack) + self.below > self.limits.max_stack:
            raise LimitReached("max_stack", self.limits.max_stack)

    def pop(self) -> Any:
        if not self.stack:
            raise Unjudged("the unpickler's stack underflows")
        return self.stack.pop()

    def pop_mark(self) -> list[Any]:
        if not self.marks:
            raise Unjudged("an opcode needs a MARK that is not there")
        items, self.stack = self.stack, self.marks.pop()
        self.below -= len(self.stack)
        return items

    def top(self) -> Any:
        if not self.stack:
            raise Unjudged("the unpickler's stack underflows")
        return self.stack[-1]

    def _find_class(self, module: str, name: str) -> str:
        if not all(part.isidentifier() for part in module.split(".")):
            # `__import__` of a name that is no dotted identifier finds nothing (a text file
            # read as protocol 0, "col1,col2" as a module): the unpickler stops there, as
            # CPython's ModuleNotFoundError stops it, before anything is called.
            raise Unjudged(f"module {module[:80]!r} is not a name Python can import")
        return _find_class(module, name, self.proto)

    def imported(self, name: str) -> None:
        self.walk.imported = True
        if name not in self.walk.imports:
            self.walk.imports.append(name)
        self.push(Global(name))

    # -- arguments

    def _int(self, n: int, signed: bool = False) -> int:
        return int.from_bytes(self.src.read(n), "little", signed=signed)

    def _text(self, n: int, encoding: str) -> str | Opaque:
        if n < 0:
            raise Unjudged("a negative length")
        if n > KEEP_ARGUMENT:
            self.src.skip(n)
            return Opaque("str")
        return self.src.read(n).decode(encoding, "surrogateescape")

    def _bytes(self, n: int) -> bytes | Opaque:
        if n < 0:
            raise Unjudged("a negative length")
        if n > KEEP_ARGUMENT:
            self.src.skip(n)
            return Opaque("bytes")
        return self.src.read(n)

    def _name_line(self) -> str:
        # GLOBAL and INST: UTF-8 in CPython (it raises on anything else; kept here, as
        # surrogates, so the name is recorded and refused).
        return _line(self.src.readline()).decode("utf-8", "surrogateescape")

    def _table(self) -> dict[bytes, Callable[[], None]]:
        p = self.push
        s = self.src

        def proto() -> None:
            version = s.read(1)[0]
            if version > HIGHEST_PROTOCOL:
                raise Unjudged(f"protocol {version} is newer than the unpickler's")
            self.proto = version

        def frame() -> None:
            s.read(8)  # a hint for buffering; every opcode is read the same either way

        def stringnl() -> None:
            text = _line(s.readline()).rstrip()
            quoted = len(text) >= 2 and text[:1] == text[-1:] and text[:1] in (b"'", b'"')
            p(text[1:-1].decode("latin-1") if quoted else Opaque("str"))

        def unicodenl() -> None:
            p(_line(s.readline()).decode("raw_unicode_escape", "replace"))

        def floatnl() -> None:
            s.readline()
            p(Opaque("float"))

        def intnl() -> None:
            text = _line(s.readline())
            p(text == b"01" if text in (b"00", b"01") else _c_long(text))

        def long_n(size: int) -> Callable[[], None]:
            def load() -> None:
                n = self._int(size, signed=size == 4)
                if n < 0:
                    raise Unjudged("a negative LONG4 length")
                data = self._bytes(n)
                p(int.from_bytes(data, "little", signed=True)
                  if isinstance(data, bytes) else Opaque("number"))
            return load

        def global_() -> None:
            module = self._name_line()
            name = self._name_line()
            self.imported(self._find_class(module, name))

        def stack_global() -> None:
            name, module = self.pop(), self.pop()
            if not (isinstance(module, str) and isinstance(name, str)):
                # CPython raises for operands that are not str, but an operand this walk
                # did not keep may be one: the import it names is unknown.
                self.walk.imported = True
                raise Unjudged("STACK_GLOBAL takes operands this judgement could not read "
                               f"({type(module).__name__}, {type(name).__name__})")
            self.imported(self._find_class(module, name))

        def inst() -> None:
            # _pickle.c's load_inst looks for its MARK before it reads the names.
            if not self.marks:
                raise Unjudged("INST needs a MARK that is not there")
            module = self._name_line()
            name = self._name_line()
            self.imported(self._find_class(module, name))
            cls = self.pop()
            args = self.pop_mark()
            p(Call(cls, tuple(args[:KEEP_ITEMS])))

        def ext(size: int) -> Callable[[], None]:
            def load() -> None:
                # _pickle.c's load_extension: copyreg's registry of (module, name) by code;
                # a code not in it raises before anything is imported. The registry is
                # empty unless a library fills it (none of the field's does): what this
                # process holds is what a loader's holds.
                # So in a stream that opened with PROTO 2 or later (as pickle.dump writes
                # every stream that can hold EXT), an unregistered code is an import the
                # judgement cannot name: unknown. Without PROTO (bytes that are no pickle's,
                # a raw tensor starting 0x82), the unpickler stops there.
                code = self._int(size, signed=size == 4)
                key = copyreg._inverted_registry.get(code)  # type: ignore[attr-defined]
                if key is not None:
                    self.imported(self._find_class(*key))
                    return
                if self.proto >= 2:
                    self.walk.imported = True
                raise Unjudged(f"EXT{size} names extension code {code} of copyreg's "
                               "registry, which a judgement cannot see")
            return load

        def reduce() -> None:
            args = self.pop()
            func = self.pop()
            p(Call(func, args))

        def newobj() -> None:
            args = self.pop()
            cls = self.pop()
            p(Call(cls, args))

        def newobj_ex() -> None:
            self.pop()  # kwargs
            args = self.pop()
            cls = self.pop()
            p(Call(cls, args))

        def obj() -> None:
            items = self.pop_mark()
            if not items:
                raise Unjudged("OBJ without a class")
            p(Call(items[0], tuple(items[1:KEEP_ITEMS])))

        def build() -> None:
            state = self.pop()
            target = self.top()
            if isinstance(target, Call):
                target.state = state
                if self.joblib and isinstance(target.func, Global) and \
                        target.func.name == JOBLIB_WRAPPER:
                    self.stack[-1] = self._joblib_array(target)

        def mark() -> None:
            if len(self.marks) >= self.limits.max_depth:
                raise LimitReached("max_depth", self.limits.max_depth)
            self.marks.append(self.stack)
            self.below += len(self.stack)
            self.stack = []

        def pop_() -> None:
            if self.stack:
                self.stack.pop()
            else:
                self.pop_mark()

        def pop_mark_() -> None:
            self.pop_mark()

        def dup() -> None:
            p(self.top())

        def tuple_() -> None:
            p(tuple(self.pop_mark()[:KEEP_ITEMS]))

        def tuple_n(n: int) -> Callable[[], None]:
            def load() -> None:
                if len(self.stack) < n:
                    raise Unjudged("the unpickler's stack underflows")
                items = self.stack[-n:]
                del self.stack[-n:]
                p(tuple(items))
            return load

        def list_() -> None:
            p(self.pop_mark()[:KEEP_ITEMS])

        def dict_() -> None:
            items = self.pop_mark()
            if len(items) % 2:
                raise Unjudged("DICT with an odd number of items")
            p(Dict(list(zip(items[::2], items[1::2], strict=True))[:KEEP_ITEMS]))

        def append() -> None:
            value = self.pop()
            target = self.top()
            if isinstance(target, list) and len(target) < KEEP_ITEMS:
                target.append(value)

        def appends() -> None:
            items = self.pop_mark()
            target = self.top()
            if isinstance(target, list):
                target.extend(items[:max(0, KEEP_ITEMS - len(target))])

        def setitem() -> None:
            value, key = self.pop(), self.pop()
            target = self.top()
            if isinstance(target, Dict) and len(target.items) < KEEP_ITEMS:
                target.items.append((key, value))

        def setitems() -> None:
            items = self.pop_mark()
            if len(items) % 2:
                raise Unjudged("SETITEMS with an odd number of items")
            target = self.top()
            if isinstance(target, Dict):
                pairs = list(zip(items[::2], items[1::2], strict=True))
                target.items.extend(pairs[:max(0, KEEP_ITEMS - len(target.items))])

        def additems() -> None:
            self.pop_mark()
            self.top()

        def frozenset_() -> None:
            self.pop_mark()
            p(Opaque("frozenset"))

        def memo_key() -> int:
            # PyLong_FromString(s, NULL, 10) of the line as a C string: it ends at a NUL.
            return int(_line(s.readline()).split(b"\0", 1)[0].decode("ascii"), 10)

        def get_line() -> None:
            get(memo_key())

        def get(key: int) -> None:
            if key not in self.memo:
                raise Unjudged(f"memo entry {key} is read before it is written")
            p(self.memo[key])

        def put(key: int) -> None:
            if key < 0:
                raise Unjudged("a negative PUT index")
            if key not in self.memo and len(self.memo) >= self.limits.max_memo:
                raise LimitReached("max_memo", self.limits.max_memo)
            self.memo[key] = self.top()

        def persid() -> None:
            s.readline()
            p(Opaque("persistent id"))

        def binpersid() -> None:
            self.pop()
            p(Opaque("persistent id"))

        def buffer() -> None:
            p(Opaque("out-of-band buffer"))

        def readonly() -> None:
            self.top()

        return {
            b"\x80": proto, b"\x95": frame,
            b"I": intnl, b"L": lambda: p(_c_long(_line(s.readline()))),
            b"J": lambda: p(self._int(4, signed=True)), b"K": lambda: p(self._int(1)),
            b"M": lambda: p(self._int(2)), b"\x8a": long_n(1), b"\x8b": long_n(4),
            b"F": floatnl, b"G": lambda: p(struct.unpack(">d", s.read(8))[0]),
            b"S": stringnl, b"V": unicodenl,
            b"T": lambda: p(self._text(self._int(4, signed=True), "latin-1")),
            b"U": lambda: p(self._text(self._int(1), "latin-1")),
            b"X": lambda: p(self._text(self._int(4), "utf-8")),
            b"\x8c": lambda: p(self._text(self._int(1), "utf-8")),
            b"\x8d": lambda: p(self._text(self._int(8), "utf-8")),
            b"B": lambda: p(self._bytes(self._int(4))),
            b"C": lambda: p(self._bytes(self._int(1))),
            b"\x8e": lambda: p(self._bytes(self._int(8))),
            b"\x96": lambda: p(self._bytes(self._int(8))),
            b"\x97": buffer, b"\x98": readonly,
            b"N": lambda: p(None), b"\x88": lambda: p(True), b"\x89": lambda: p(False),
            b"]": lambda: p([]), b")": lambda: p(()), b"}": lambda: p(Dict()),
            b"\x8f": lambda: p(Opaque("set")),
            b"a": append, b"e": appends, b"l": list_, b"t": tuple_,
            b"\x85": tuple_n(1), b"\x86": tuple_n(2), b"\x87": tuple_n(3),
            b"d": dict_, b"s": setitem, b"u": setitems, b"\x90": additems,
            b"\x91": frozenset_,
            b"0": pop_, b"2": dup, b"(": mark, b"1": pop_mark_,
            b"g": get_line, b"h": lambda: get(self._int(1)), b"j": lambda: get(self._int(4)),
            b"p": lambda: put(memo_key()),
            b"q": lambda: put(self._int(1)), b"r": lambda: put(self._int(4)),
            b"\x94": lambda: put(len(self.memo)),
            b"\x82": ext(1), b"\x83": ext(2), b"\x84": ext(4),
            b"c": global_, b"\x93": stack_global, b"i": inst,
            b"R": reduce, b"b": build, b"o": obj, b"\x81": newobj, b"\x92": newobj_ex,
            b"P": persid, b"Q": binpersid,
        }

    # -- joblib's inline arrays

    def _joblib_array(self, wrapper: Call) -> Opaque:
        """Past the bytes of the array `wrapper` describes, as joblib's read_array reads
        them: an alignment pad, then `count * itemsize` bytes, or, for an array of objects,
        a plain pickle of it (walked too: its imports are the file's)."""
        state = wrapper.state
        if not isinstance(state, Dict):
            raise Unjudged("a joblib array whose header is not a dict")
        shape, dtype = state.get("shape"), state.get("dtype")
        if not isinstance(shape, tuple) or not all(isinstance(n, int) and n >= 0
                                                   for n in shape):
            raise Unjudged("a joblib array whose shape this judgement could not read")
        count = 1
        for n in shape:
            count *= n
        has_object, itemsize = _numpy_dtype(dtype)
        if has_object:
            if self.depth >= 8:
                raise LimitReached("max_depth", self.limits.max_depth)
            inner = Walker(self.src, depth=self.depth + 1).run()
            for name in inner.imports:
                if name not in self.walk.imports:
                    self.walk.imports.append(name)
            self.walk.imported |= inner.imported
            if not inner.stopped:
                self.walk.imported = self.walk.imported or bool(inner.imports)
                raise Unjudged(f"the pickle of a joblib array of objects: {inner.error}")
            return Opaque("ndarray")
        if "numpy_array_alignment_bytes" in (k for k, _ in state.items):
            pad = self.src.read(1)[0]
            if pad:
                self.src.skip(pad)
        self.src.skip(count * itemsize)
        return Opaque("ndarray")


def _numpy_dtype(dtype: Any) -> tuple[bool, int]:
    """(has objects, item size) of a pickled numpy dtype: `numpy.dtype(typestr, ...)` and
    its BUILD state (version, byte order, subarray, names, fields, elsize, ...)."""
    if not (isinstance(dtype, Call) and isinstance(dtype.func, Global)
            and dtype.func.name.rsplit(".", 1)[-1] == "dtype"
            and isinstance(dtype.args, tuple) and dtype.args
            and isinstance(dtype.args[0], str)):
        raise Unjudged("a joblib array whose dtype this judgement could not read")
    typestr = dtype.args[0]
    state = dtype.state if isinstance(dtype.state, tuple) else ()
    if len(state) > 4 and (state[2] is not None or state[3] is not None
                           or state[4] is not None):
        raise Unjudged("a joblib array of a structured dtype (its fields may hold objects)")
    if typestr.startswith("O"):
        return True, 8
    digits = "".join(c for c in typestr if c.isdigit())
    elsize = state[5] if len(state) > 5 and isinstance(state[5], int) else -1
    size = elsize if elsize > 0 else int(digits) if digits else 0
    if size <= 0 or not typestr[:1].isalpha():
        raise Unjudged(f"a joblib array of dtype {typestr!r}, whose size is unknown")
    return False, size
