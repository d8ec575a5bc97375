"""The pickle scan on its own: every malicious pickle of the corpus names what it would call,
torch's own checkpoints name only what `safe-imports` allows, and a file that is no pickle
is said to be none, each read through a RangeReader that counts what it fetched."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.pickle_corpus import MARKER, benign, malicious
from wlock.lock.pickles import RangeReader, scan
from wlock.policy import Policy, judge_pickle, safe_import


def reader(data: bytes) -> RangeReader:
    return RangeReader(len(data), lambda start, end: data[start:end], block=4096)


@pytest.mark.parametrize("name", sorted(malicious()))
def test_each_malicious_pickle_is_refused_by_safe_imports(name: str) -> None:
    found = scan(reader(malicious()[name]), name)
    assert found.pickle and found.imports
    refused = judge_pickle("acme/evil", found, Policy())
    assert refused, found.imports
    assert not os.path.exists(f"/tmp/{MARKER}")


def test_torch_checkpoints_import_only_what_safe_imports_allows(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    for name, path in benign(tmp_path).items():
        found = scan(reader(path.read_bytes()), name)
        assert found.pickle and found.imports, name
        assert all(safe_import(i) for i in found.imports), (name, found.imports)
        assert judge_pickle("acme/ok", found, Policy()) == []
        assert judge_pickle("acme/ok", found, Policy(pickle="deny"))


STACK_GLOBAL_ALONE = b"\x93" + os.urandom(5000)  # STACK_GLOBAL with nothing before it
TERABYTE_STRING = b"\x8d" + (2**40).to_bytes(8, "little") + os.urandom(5000)


@pytest.mark.parametrize(("name", "data"), [
    ("pytorch_model.bin", STACK_GLOBAL_ALONE), ("shard.bin", STACK_GLOBAL_ALONE),
    ("weights.pkl", STACK_GLOBAL_ALONE), ("pytorch_model.bin", TERABYTE_STRING),
    ("shard.bin", TERABYTE_STRING),  # a plain .pkl reads such a string lazily: no error
])
def test_a_pickle_the_scanner_cannot_follow_is_unknown_not_a_crash(name: str, data: bytes,
                                                                  ) -> None:
    """Random bytes a test wrote as a `.bin` made picklescan raise (ValueError for a
    STACK_GLOBAL without operands, MemoryError for a torch file declaring a 1 TiB string):
    the lock must not end in a traceback, and the file must not pass as safe."""
    found = scan(reader(data), name)
    assert found.pickle and found.imports == ("unknown.unknown",)
    assert judge_pickle("acme/odd", found, Policy())


def test_a_file_that_is_no_pickle_says_so_and_a_zip_is_read_by_its_ends() -> None:
    assert not scan(reader(b"\x07" + os.urandom(5000)), "openvino_model.bin").pickle
    from tests.pickle_corpus import reduce_call, torch_zip

    big = torch_zip(reduce_call("os", "system", "true"))
    import io
    import zipfile

    padded = io.BytesIO(big)
    with zipfile.ZipFile(padded, "a", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data/0", os.urandom(2_000_000))
    data = padded.getvalue()
    r = reader(data)
    assert scan(r, "pytorch_model.bin").imports == ("os.system",)
    assert r.bytes_read < 40_000 < len(data)
