"""Where an ONNX model's tensors say their bytes live, read as onnx and onnxruntime read it.

A tensor stored outside the `.onnx` file names its file in `external_data` (the entry whose
key is `location`), and the loader opens that path joined to the model's folder
(`onnx.external_data_helper`, onnxruntime's `ExternalDataInfo`). A location that is absolute
or climbs out of the folder (`../../home/me/.ssh/id_rsa`, CVE-2022-25882, CVE-2024-27318)
reads a file of the machine into the model's weights, where inference can hand it back.

The file is read at the protobuf's wire level (protobuf/encoding: a tag, then a varint, a
fixed 32- or 64-bit value or a length-prefixed body), walking only the messages that can hold
a tensor, as onnx's own walk does and more: the graph's initializers and sparse
initializers, every node's attributes (a tensor, tensors, a sparse tensor, a subgraph, as
If and Loop hold), subgraphs to any depth, functions' nodes, training graphs. Every other
body, `raw_data` included, is passed over by its length: at lock, a model of 2 GB of inline
weights costs the ranges around its fields, not its bytes. Only tensors' fields are read.

The walk accepts what protobuf's parser accepts (unknown fields of any wire type, groups
included, skipped), so a file it cannot parse is one the runtimes cannot parse either: they
refuse the model before they read any external data, and such a file says nothing
(`NotOnnx`). A walk that reaches a bound (nesting, the judgement's budget) is unknown, never
clean: the runtime would have gone on.
"""

from __future__ import annotations

from wlock.scan.budget import Source, Truncated, Unjudged

# For each message the walk enters: which field holds which message (onnx/onnx.proto).
_MESSAGES: dict[str, dict[int, str]] = {
    "model": {7: "graph", 20: "training", 25: "function"},
    "training": {1: "graph", 2: "graph"},  # TrainingInfoProto initialization, algorithm
    "function": {7: "node", 11: "attribute"},
    "graph": {1: "node", 5: "tensor", 15: "sparse"},
    "node": {5: "attribute"},
    "attribute": {5: "tensor", 6: "graph", 10: "tensor", 11: "graph", 22: "sparse",
                  23: "sparse"},
    "sparse": {1: "tensor", 2: "tensor"},  # SparseTensorProto values, indices
    "tensor": {13: "entry"},  # TensorProto external_data
}
_TENSOR_NAME, _ENTRY_KEY, _ENTRY_VALUE = 8, 1, 2
MAX_DEPTH = 100  # protobuf's own recursion limit for a parse
MAX_STRING = 64 * 1024  # a tensor's name, an entry's key or value


class NotOnnx(Truncated):
    """The bytes are not a protobuf message: no runtime loads them."""


def external_locations(src: Source, size: int) -> list[tuple[str, str]]:
    """(tensor name, location) for every tensor of the ONNX model read from `src` (at its
    start, `size` bytes) that names a file of its external data. Raises NotOnnx or Truncated
    where protobuf's parser would fail too, Unjudged past a bound."""
    found: list[tuple[str, str]] = []
    _walk(src, size, "model", 0, found, [""])
    return found


def _walk(src: Source, end: int, message: str, depth: int, found: list[tuple[str, str]],
          name: list[str]) -> None:
    if depth > MAX_DEPTH:
        raise Unjudged(f"messages nested deeper than {MAX_DEPTH}")
    inner = _MESSAGES.get(message, {})
    entry = {_ENTRY_KEY: "", _ENTRY_VALUE: ""}
    tensor_name = [""]
    while src.tell() < end:
        field, wire = _tag(src)
        if wire == 2:
            length = _varint(src)
            body_end = src.tell() + length
            if body_end > end:
                raise NotOnnx(f"a field of {length:,} bytes runs past its message's end")
            if field in inner:
                _walk(src, body_end, inner[field], depth + 1, found, tensor_name)
            elif (message == "entry" and field in entry) or \
                    (message == "tensor" and field == _TENSOR_NAME):
                if length > MAX_STRING:
                    raise Unjudged(f"a string of {length:,} bytes in a tensor's fields")
                text = src.read(length).decode("utf-8", "replace")
                if message == "entry":
                    entry[field] = text
                else:
                    tensor_name[0] = text
            else:
                src.skip(length)
        else:  # a number, or a group: no ONNX field is one, but protobuf skips it as unknown
            _skip(src, wire, end, field, depth)
    if src.tell() != end:
        raise NotOnnx("a field runs past its message's end")
    if message == "entry" and entry[_ENTRY_KEY] == "location":
        found.append((name[0], entry[_ENTRY_VALUE]))


def _tag(src: Source) -> tuple[int, int]:
    """The next field's number and wire type."""
    src.budget.opcode()
    tag = _varint(src)
    if tag >> 3 == 0:
        raise NotOnnx(f"a field numbered 0 at byte {src.tell()}")
    return tag >> 3, tag & 7


def _skip(src: Source, wire: int, end: int, field: int, depth: int) -> None:
    """Past a field's value of any wire type but the end of a group, as protobuf skips an
    unknown field: a varint, 8 or 4 bytes, a length-prefixed body, a whole group."""
    if wire == 0:
        _varint(src)
    elif wire == 1:
        src.skip(8)
    elif wire == 5:
        src.skip(4)
    elif wire == 2:
        src.skip(_varint(src))
    elif wire == 3:
        _skip_group(src, end, field, depth + 1)
    else:
        raise NotOnnx(f"wire type {wire} at byte {src.tell()}")


def _skip_group(src: Source, end: int, number: int, depth: int) -> None:
    """Past the end-group tag that closes group `number`."""
    if depth > MAX_DEPTH:
        raise Unjudged(f"groups nested deeper than {MAX_DEPTH}")
    while src.tell() < end:
        field, wire = _tag(src)
        if wire == 4:
            if field != number:
                raise NotOnnx(f"a group closed by another's end at byte {src.tell()}")
            return
        _skip(src, wire, end, field, depth)
    raise NotOnnx("a group that is never closed")


def _varint(src: Source) -> int:
    out = 0
    for shift in range(0, 70, 7):
        byte = src.read(1)[0]
        out |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return out
    raise NotOnnx("a varint longer than ten bytes")


def escapes_folder(location: str) -> str | None:
    """Why a location leaves the model's folder (in words), or None. Either separator counts
    (onnxruntime on Windows takes `\\`), and so do a drive and a NUL."""
    if "\x00" in location:
        return "it holds a NUL byte"
    path = location.replace("\\", "/")
    if path.startswith("/") or (len(path) > 1 and path[1] == ":"):
        return "it is absolute"
    depth = 0
    for part in path.split("/"):
        if part == "..":
            depth -= 1
            if depth < 0:
                return "it climbs out of the model's folder"
        elif part not in ("", "."):
            depth += 1
    return None
