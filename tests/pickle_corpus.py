"""A corpus of pickles for the policy's tests and bench/pickle_scanners.py: benign checkpoints
written by torch itself, and malicious pickles built by hand the ways attacks on the Hub have
used (a `__reduce__` calling os.system, eval, runpy, subprocess; hidden behind every protocol,
STACK_GLOBAL with names from the memo, a nested pickle, getattr on an import). None of them is
ever loaded: a test proves nothing ran by the marker file each would create."""

from __future__ import annotations

import io
import pickle
import zipfile
from collections.abc import Callable
from pathlib import Path

MARKER = "wlock-pickle-ran"  # every malicious payload would create /tmp/<this>


def _g(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def _str(text: str) -> bytes:
    data = text.encode()
    return b"X" + len(data).to_bytes(4, "little") + data  # BINUNICODE


def reduce_call(module: str, name: str, arg: str, proto: int = 2) -> bytes:
    """`module.name(arg)` on load: GLOBAL, the argument tuple, REDUCE."""
    head = b"\x80" + bytes([proto]) if proto >= 2 else b""
    if proto == 0:
        return _g(module, name) + b"(V" + arg.encode() + b"\ntR."
    return head + _g(module, name) + _str(arg) + b"\x85R."  # TUPLE1, REDUCE, STOP


def stack_global_from_memo(module: str, name: str, arg: str) -> bytes:
    """Protocol 4's STACK_GLOBAL with its two names put in the memo first and fetched back,
    so no GLOBAL opcode names them (a scanner must follow the memo)."""
    return (b"\x80\x04" + _str(module) + b"\x94" + _str(name) + b"\x94" + b"0"  # POP
            + b"h\x00h\x01" + b"\x93" + _str(arg) + b"\x85R.")


def nested(inner: bytes) -> bytes:
    """A benign-looking outer pickle that unpickles `inner` (pickle.loads of bytes)."""
    data = b"B" + len(inner).to_bytes(4, "little") + inner  # BINBYTES
    return b"\x80\x03" + _g("pickle", "loads") + data + b"\x85R."


def getattr_import(module: str, name: str, arg: str) -> bytes:
    """builtins.getattr(builtins.__import__(module), name)(arg): no GLOBAL names `name`."""
    return (b"\x80\x02" + _g("builtins", "getattr") + _g("builtins", "__import__")
            + _str(module) + b"\x85R" + _str(name) + b"\x86R" + _str(arg) + b"\x85R.")


def torch_zip(data_pkl: bytes, name: str = "archive") -> bytes:
    """A file laid out as torch.save writes it: a zip whose `<name>/data.pkl` is the pickle,
    stored uncompressed, beside the version record."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        z.writestr(f"{name}/data.pkl", data_pkl)
        z.writestr(f"{name}/byteorder", b"little")
        z.writestr(f"{name}/version", b"3\n")
    return out.getvalue()


def malicious() -> dict[str, bytes]:
    """Name -> bytes of a pickle that would run code, each naming what it calls."""
    cmd = f"touch /tmp/{MARKER}"
    cases = {f"os.system-proto{p}.pkl": reduce_call("os", "system", cmd, p) for p in range(6)}
    cases.update({
        "posix.system.pkl": reduce_call("posix", "system", cmd),
        "builtins.eval.pkl": reduce_call("builtins", "eval", f"__import__('os').system('{cmd}')"),
        "builtins.exec.pkl": reduce_call("builtins", "exec", f"import os; os.system('{cmd}')"),
        "runpy._run_code.pkl": reduce_call("runpy", "_run_code", f"open('/tmp/{MARKER}','w')"),
        "subprocess.Popen.pkl": reduce_call("subprocess", "Popen", f"/tmp/{MARKER}"),
        "stack-global-memo.pkl": stack_global_from_memo("os", "system", cmd),
        "nested-pickle.pkl": nested(reduce_call("os", "system", cmd)),
        "getattr-import.pkl": getattr_import("os", "system", cmd),
        "torch-zip-os.system.bin": torch_zip(reduce_call("os", "system", cmd)),
        "torch-zip-eval.pt": torch_zip(reduce_call("builtins", "eval", "1"), "model"),
    })
    return cases


def benign(folder: Path) -> dict[str, Path]:
    """Checkpoints written by torch.save (zip and legacy) and a plain pickle of numpy
    arrays: what `safe-imports` must pass."""
    import numpy as np
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 4)).sum().backward()
    optimizer.step()
    writers: dict[str, Callable[[Path], None]] = {
        "pytorch_model.bin": lambda p: torch.save(model.state_dict(), p),
        "legacy.pt": lambda p: torch.save(model.state_dict(), p,
                                          _use_new_zipfile_serialization=False),
        "optimizer.pt": lambda p: torch.save(optimizer.state_dict(), p),
        "half.bin": lambda p: torch.save({k: v.half() for k, v in model.state_dict().items()},
                                         p),
        "arrays.pkl": lambda p: p.write_bytes(pickle.dumps(
            {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "n": 3}, protocol=4)),
    }
    out = {}
    for name, write in writers.items():
        write(folder / name)
        out[name] = folder / name
    return out
