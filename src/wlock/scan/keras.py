"""What a Keras model's config would make `load_model` run, read as Keras reads it.

Reader: Keras 3 (`saving_lib.load_model`, through Python's `zipfile`) and Keras 2 / tf.keras
(`hdf5_format`, through h5py and libhdf5). A Keras 3 archive (`.keras`) is a zip whose
`config.json` is the model (the folder layout `save_model("hf://...")` writes has the same
`config.json` beside `model.weights.h5`), every object a
`{"module", "class_name", "config", "registered_name"}`; a Keras 2 file (`.h5`) holds the same
as JSON in its root's `model_config` attribute (and the compile step's in `training_config`).
Deserializing a config runs code in three ways, each named here:

- a Python lambda, stored as marshalled bytecode (`__lambda__` in Keras 3, a `Lambda` layer's
  `function_type = "lambda"` in Keras 2) and any `Lambda` layer: CVE-2024-3660, refused by
  `safe_mode` only in the loaders that have it, and only for the forms they know;
- a class or function from a module outside Keras's own packages, which Keras before 3.9
  imported by name (CVE-2025-1550);
- a Keras function that reads or writes files or the network (`keras.utils.get_file`,
  CVE-2025-8747, and the rest of what Keras 3.11 calls non-modeling APIs).

The verdict is as wide as the widest of those loaders: what any Keras would run is named,
whatever this machine's Keras refuses. An archive or HDF5 file that cannot be read is
unknown; a config that is not JSON runs nothing (every Keras fails on it).
"""

from __future__ import annotations

import io
import json
import zipfile
from typing import Any, BinaryIO

from wlock.scan.budget import Unjudged

HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
MAX_CONFIG = 64 * 1024 * 1024
_KERAS_PACKAGES = frozenset({"keras", "keras_hub", "keras_cv", "keras_nlp", "tf_keras",
                             "builtins"})
# keras/src/saving/serialization_lib.py NON_MODELING_APIS (3.11+), by the name a config
# gives them (module and function), plus the same functions under tf.keras's names.
_NON_MODELING = frozenset({
    "get_file", "load_model", "save_model", "load_weights", "save_weights",
    "load_img", "save_img", "image_dataset_from_directory", "text_dataset_from_directory",
    "audio_dataset_from_directory", "timeseries_dataset_from_array", "deserialize_keras_object",
    "register_keras_serializable", "serialize_keras_object", "clear_session",
    "set_random_seed", "enable_unsafe_deserialization", "model_from_json",
})


def is_keras_name(path: str) -> bool:
    return path.lower().endswith((".keras", ".h5", ".hdf5"))


def configs(stream: BinaryIO | io.RawIOBase) -> list[tuple[str, Any]]:
    """(where, config) for each model config in a Keras archive or HDF5 file read from
    `stream` (seekable, at its start); [] for a file that is neither. Found where their
    readers find them: a zip by its end record whatever precedes it (Python's `zipfile`,
    which Keras 3 opens `.keras` with), an HDF5 file by its superblock at 0 or at any
    user-block offset libhdf5 searches (512, 1024, 2048, ... up to the file's end). Unjudged
    where the file cannot be read as what it is."""
    head = stream.read(8) or b""
    if head[:4] == b"PK\x03\x04" or _is_zip(stream):
        stream.seek(0)
        return _archive(stream)
    if head == HDF5_MAGIC or _hdf5_user_block(stream):
        stream.seek(0)
        return _hdf5(stream)
    stream.seek(0)
    return []


def _is_zip(stream: BinaryIO | io.RawIOBase) -> bool:
    try:
        stream.seek(0)
        return zipfile.is_zipfile(stream)
    except OSError:
        return False


def _hdf5_user_block(stream: BinaryIO | io.RawIOBase) -> bool:
    """libhdf5's `H5FD_locate_signature`: the superblock at 0, then at every power of two
    from 512 while it is inside the file."""
    size = stream.seek(0, io.SEEK_END)
    offset = 512
    while offset + len(HDF5_MAGIC) <= size:
        stream.seek(offset)
        if stream.read(len(HDF5_MAGIC)) == HDF5_MAGIC:
            return True
        offset *= 2
    return False


def folder_config(data: bytes) -> list[tuple[str, Any]]:
    """The model config of Keras 3's folder layout (`save_model("hf://...")` writes
    `config.json`, `metadata.json` and `model.weights.h5`; `load_model` reads the config as
    it reads an archive's): a `config.json` that is one serialized Keras object (its
    `class_name` and `config`); [] for any other config.json."""
    try:
        config = json.loads(data)
    except (ValueError, RecursionError):
        return []
    if isinstance(config, dict) and "class_name" in config and isinstance(
            config.get("config"), dict) and ("module" in config or "registered_name" in config):
        return [("config.json", config)]
    return []


def _archive(stream: BinaryIO | io.RawIOBase) -> list[tuple[str, Any]]:
    try:
        with zipfile.ZipFile(stream) as archive:
            if "config.json" not in archive.namelist():
                return []
            info = archive.getinfo("config.json")
            if info.file_size > MAX_CONFIG:
                raise Unjudged(f"a config.json of {info.file_size:,} bytes")
            with archive.open(info) as member:
                data = member.read(MAX_CONFIG + 1)
    except (zipfile.BadZipFile, OSError, EOFError, RuntimeError, ValueError) as e:
        raise Unjudged(f"the archive cannot be read: {e}") from e
    if len(data) > MAX_CONFIG:
        raise Unjudged(f"a config.json of more than {MAX_CONFIG:,} bytes")
    return _parsed([("config.json", data)])


def _hdf5(stream: BinaryIO | io.RawIOBase) -> list[tuple[str, Any]]:
    import h5py

    found = []
    try:
        with h5py.File(stream, "r") as f:
            for name in ("model_config", "training_config"):
                if name in f.attrs:
                    value = f.attrs[name]
                    if hasattr(value, "tobytes"):
                        value = value.tobytes()
                    data = value.encode() if isinstance(value, str) else bytes(value)
                    if len(data) > MAX_CONFIG:
                        raise Unjudged(f"a {name} of {len(data):,} bytes")
                    found.append((name, data))
    except Unjudged:
        raise
    except Exception as e:
        raise Unjudged(f"h5py cannot read it: {type(e).__name__}: {e}") from e
    return _parsed(found)


def _parsed(found: list[tuple[str, bytes]]) -> list[tuple[str, Any]]:
    out = []
    for where, data in found:
        try:
            out.append((where, json.loads(data)))
        except (ValueError, RecursionError):
            continue  # Keras fails on it too: nothing of it runs
    return out


def code_in(config: Any, depth: int = 0) -> list[str]:
    """Every way `config` would run code when Keras deserializes it, in words."""
    if depth > 500:
        raise Unjudged("a config nested deeper than 500 levels")
    out: list[str] = []
    if isinstance(config, list):
        for item in config:
            out += code_in(item, depth + 1)
        return out
    if not isinstance(config, dict):
        return out
    name = config.get("class_name")
    inner = config.get("config")
    label = inner.get("name") if isinstance(inner, dict) else None
    where = f" ({label})" if isinstance(label, str) else ""
    if name == "__lambda__":
        out.append("a Python lambda (marshalled bytecode)")
    elif name == "Lambda":
        out.append(f"a Lambda layer{where}")
    if config.get("function_type") == "lambda" or config.get("output_shape_type") == "lambda":
        out.append(f"a Python lambda (marshalled bytecode){where}")
    module = config.get("module")
    if isinstance(module, str) and isinstance(name, str):
        package = module.split(".", 1)[0]
        called = config.get("config") if name == "function" else name
        if package not in _KERAS_PACKAGES:
            out.append(f"code from the module {module} ({called})")
        elif isinstance(called, str) and called.rsplit(".", 1)[-1] in _NON_MODELING:
            out.append(f"a function that reads or writes files ({module}.{called})")
    for value in config.values():
        if isinstance(value, (dict, list)):
            out += code_in(value, depth + 1)
    return out
