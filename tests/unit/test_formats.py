"""The judges of the formats beyond pickle, on their own: ONNX's wire walk and its locations,
Keras's configs, and what is unknown (never clean)."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest

from tests.conftest import needs
from tests.format_corpus import (
    KERAS_BENIGN,
    KERAS_MALICIOUS,
    ONNX_BENIGN,
    ONNX_MALICIOUS,
)
from wlock.models import FormatScan
from wlock.scan import ScanLimits, is_format_judged, judge_file, judge_formats
from wlock.scan.keras import code_in
from wlock.scan.onnx import escapes_folder

pytestmark = needs("keras", "onnx")


def judged(path: Path, name: str | None = None) -> tuple[FormatScan, ...]:
    return judge_formats(io.BytesIO(path.read_bytes()), name or path.name)


@pytest.mark.parametrize("location", ["/etc/passwd", "../x", "a/../../x", "..\\x",
                                      "C:\\secret", "a/b/../../../x", "x\x00y", "//host/x"])
def test_locations_that_leave_the_folder(location: str) -> None:
    assert escapes_folder(location) is not None


@pytest.mark.parametrize("location", ["model.onnx_data", "a/b.bin", "a/../b.bin", "./x",
                                      "a/b/../../c", "..data", "x..y"])
def test_locations_inside_the_folder(location: str) -> None:
    assert escapes_folder(location) is None


@pytest.mark.parametrize("name", sorted(ONNX_MALICIOUS))
def test_every_onnx_payload_is_found_wherever_its_tensor_sits(tmp_path: Path, name: str
                                                              ) -> None:
    [found] = judged(ONNX_MALICIOUS[name](tmp_path))
    assert found.kind == "onnx-external-data" and found.key == "w" and found.findings
    assert found.unreadable is None


@pytest.mark.parametrize("name", sorted(ONNX_BENIGN))
def test_onnx_twins_say_nothing(tmp_path: Path, name: str) -> None:
    assert judged(ONNX_BENIGN[name](tmp_path)) == ()


def test_onnx_bytes_protobuf_cannot_parse_say_nothing_and_what_it_can_is_walked(
        tmp_path: Path) -> None:
    """The walk accepts what protobuf accepts: a model cut short, or bytes that are no
    message, are refused by onnx's own parser (so no runtime reads their external data) and
    say nothing; a payload behind an unknown field and a group, which protobuf skips, is
    still found."""
    import onnx
    from google.protobuf.message import DecodeError

    data = ONNX_MALICIOUS["absolute"](tmp_path).read_bytes()
    for bytes_ in (data[: len(data) // 3], data[:-1], b"o" * 4000, b"\xff" * 64):
        with pytest.raises(DecodeError):
            onnx.load_model_from_string(bytes_)
        assert judge_formats(io.BytesIO(bytes_), "model.onnx") == ()
    # Field 99 as a group (start 99<<3|3, a varint inside, end 99<<3|4), then field 98 as
    # bytes: unknown to onnx.proto, skipped by protobuf.
    padded = b"\x9b\x06\x08\x01\x9c\x06" + b"\x92\x06\x03abc" + data
    assert onnx.load_model_from_string(padded).graph.initializer[0].name == "w"
    [found] = judge_formats(io.BytesIO(padded), "model.onnx")
    assert found.findings == ("'/tmp/wlock-onnx-secret': it is absolute",)


def test_an_onnx_walk_past_its_bounds_is_unknown(tmp_path: Path) -> None:
    data = ONNX_BENIGN["beside"](tmp_path).read_bytes()
    [found] = judge_formats(io.BytesIO(data), "model.onnx", ScanLimits(max_opcodes=3))
    assert found.unreadable and "max-opcodes" in found.unreadable
    # Graphs nested past protobuf's own recursion limit: a parser that allows more would go on.
    nested = b""
    for _ in range(120):
        nested = b"\x32" + _varint(len(nested)) + nested  # attribute.g, a graph in a graph
        nested = b"\x2a" + _varint(len(nested)) + nested  # node.attribute
        nested = b"\x0a" + _varint(len(nested)) + nested  # graph.node
    model = b"\x3a" + _varint(len(nested)) + nested  # model.graph
    [deep] = judge_formats(io.BytesIO(model), "model.onnx")
    assert deep.unreadable and "nested deeper" in deep.unreadable


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def test_inline_weights_are_passed_over_not_read(tmp_path: Path) -> None:
    """A model of 64 MiB of inline weights is judged within a walk of a few kB: raw_data is
    seeked over (at lock, ranges never fetch it)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.zeros(16 * 1024 * 1024, dtype=np.float32), "w")
    graph = helper.make_graph([helper.make_node("Identity", ["w"], ["y"])], "g", [],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [weight])
    path = tmp_path / "big.onnx"
    onnx.save_model(helper.make_model(graph), path)
    limits = ScanLimits(max_bytes=64 * 1024)  # far below the file's 64 MiB
    with open(path, "rb") as f:
        assert judge_formats(f, "big.onnx", limits) == ()


@pytest.mark.parametrize("name", sorted(KERAS_MALICIOUS))
def test_every_keras_payload_is_named(tmp_path: Path, name: str) -> None:
    [found] = judged(KERAS_MALICIOUS[name](tmp_path))
    assert found.kind == "keras" and found.findings and found.unreadable is None


@pytest.mark.parametrize("name", sorted(KERAS_BENIGN))
def test_keras_twins_say_nothing(tmp_path: Path, name: str) -> None:
    assert judged(KERAS_BENIGN[name](tmp_path)) == ()


def test_keras_files_that_cannot_be_read_are_unknown(tmp_path: Path) -> None:
    archive = KERAS_BENIGN["archive"](tmp_path).read_bytes()
    [cut] = judge_formats(io.BytesIO(archive[: len(archive) // 2]), "model.keras")
    assert cut.unreadable, cut
    h5 = KERAS_BENIGN["h5"](tmp_path).read_bytes()
    [cut_h5] = judge_formats(io.BytesIO(h5[: len(h5) // 4]), "model.h5")
    assert cut_h5.unreadable and "h5py" in cut_h5.unreadable


def test_a_keras_config_naming_code_in_any_corner_is_found() -> None:
    deep = {"class_name": "Functional", "config": {"layers": [{"class_name": "Dense", "config": {
        "name": "d", "kernel_regularizer": {"module": "keras.regularizers", "class_name": "L2",
                                            "config": {"l2": {"class_name": "__lambda__",
                                                              "config": {"value": "x"}}}}}}]}}
    assert code_in(deep) == ["a Python lambda (marshalled bytecode)"]
    legacy = {"class_name": "Lambda", "config": {"name": "l", "function": ["YWJj", None, None],
                                                 "function_type": "lambda"}}
    assert code_in(legacy) == ["a Lambda layer (l)", "a Python lambda (marshalled bytecode)"]
    keras_own = {"module": "keras.layers", "class_name": "Dense", "config": {"name": "d"}}
    assert code_in(keras_own) == []


def test_a_keras_archive_with_config_json_that_is_not_json_runs_nothing(tmp_path: Path) -> None:
    path = tmp_path / "x.keras"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("config.json", b"{not json")
        z.writestr("metadata.json", json.dumps({"keras_version": "3.5.0"}))
    assert judged(path) == ()


def test_which_files_are_judged() -> None:
    for name in ("m.keras", "tf_model.h5", "w.hdf5", "onnx/model.onnx", "x.gguf",
                 "tokenizer_config.json", "chat_template.jinja", "processor_config.json",
                 "config.json"):  # Keras 3's folder layout keeps its model in config.json
        assert is_format_judged(name), name
    for name in ("model.onnx_data", "model.safetensors", "vocab.txt"):
        assert not is_format_judged(name), name


def _pt2(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("m/archive_format", b"pt2")
        for name, data in members.items():
            z.writestr(f"m/{name}", data)
    return out.getvalue()


def test_a_pt2_archive_is_judged_as_torch_export_reads_it() -> None:
    """Each member torch.export.load unpickles is walked (a weight its config marks
    use_pickle, an opaque constant); raw tensor bytes are not; a config that cannot be read
    leaves the archive unknown, never clean."""
    evil = b"\x80\x04\x8c\x05posix\x8c\x06system\x93\x8c\x04true\x85R."
    config = {"config": {"w": {"path_name": "weight_0", "use_pickle": True},
                         "b": {"path_name": "weight_1", "use_pickle": False}}}
    found = judge_file(io.BytesIO(_pt2({
        "data/weights/model_weights_config.json": json.dumps(config).encode(),
        "data/weights/weight_0": evil, "data/weights/weight_1": evil})), "model.pt2")
    assert found.imports == ("posix.system",)
    opaque = judge_file(io.BytesIO(_pt2({"data/constants/opaque_obj_0": evil})), "x.pt2")
    assert opaque.imports == ("posix.system",)
    raw = judge_file(io.BytesIO(_pt2({"data/weights/weight_1": evil})), "x.pt2")
    assert raw.imports == ()  # no config marks it: raw bytes torch never unpickles
    broken = judge_file(io.BytesIO(_pt2({
        "data/weights/model_weights_config.json": b"not json"})), "x.pt2")
    assert broken.unreadable and "PT2 archive whose configs cannot be read" in broken.unreadable
