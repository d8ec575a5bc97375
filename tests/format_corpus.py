"""Keras and ONNX files that run code or read outside their folder, each citing its source, and
benign twins that the real loaders read (keras.saving.load_model in safe mode, onnxruntime
with its external data). Every Keras payload would create /tmp/<MARKER> if a loader ran it (Keras
saves the lambdas itself: real bytecode); every ONNX payload would read /tmp/<SECRET> into a
tensor. Written on demand into a folder: keras (torch backend), onnx and onnxruntime are
test tools."""

from __future__ import annotations

import json
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path

MARKER = "wlock-keras-ran"
SECRET = "wlock-onnx-secret"


def _payload() -> str:
    """A lambda that touches the marker, as Keras marshals one (its bytecode, base64): made,
    never called (Keras calls a Lambda layer's function as it builds the model, so a payload
    runs at load; the corpus is spliced into configs, never built)."""
    from keras.src.utils.python_utils import func_dump

    # The marker's path written out: unmarshalled, the lambda has no globals of this module.
    code, _, _ = func_dump(lambda x: (open("/tmp/wlock-keras-ran", "w").close(), x)[1])
    return str(code)


def _benign_model():  # type: ignore[no-untyped-def]
    import keras

    return keras.Sequential([keras.Input((4,)),
                             keras.layers.Dense(2, activation="relu", name="dense")])


def keras_archive(path: Path, code: bool) -> Path:
    """A `.keras` archive as Keras 3 saves one; with `code`, a Lambda layer whose lambda
    touches the marker (CVE-2024-3660), in the form Keras 3 writes it."""
    if not code:
        _benign_model().save(path)
        return path

    def edit(config: dict) -> None:
        config["config"]["layers"].append({
            "module": "keras.layers", "class_name": "Lambda", "registered_name": None,
            "config": {"name": "payload", "trainable": True, "arguments": {},
                       "function": {"class_name": "__lambda__", "config": {
                           "code": _payload(), "defaults": None, "closure": None}}},
            "build_config": {"input_shape": [None, 2]}})
    return _edit_config(keras_archive(path.with_name("base.keras"), False), path, edit)


def keras_h5(path: Path, code: bool) -> Path:
    """A Keras 2 style `.h5` (Keras saves the legacy format by the suffix), its config in the
    root's `model_config`; with `code`, a Lambda layer as Keras 2 wrote one (CVE-2024-3660's
    original form: `function_type = "lambda"`)."""
    import h5py

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Keras calls HDF5 legacy
        _benign_model().save(path)
    if code:
        with h5py.File(path, "r+") as f:
            config = json.loads(f.attrs["model_config"])
            config["config"]["layers"].append({"class_name": "Lambda", "config": {
                "name": "payload", "function": [_payload(), None, None],
                "function_type": "lambda", "module": "__main__", "output_shape": None,
                "output_shape_type": "raw", "arguments": {}}})
            f.attrs["model_config"] = json.dumps(config)
    return path


def _edit_config(src: Path, dst: Path, edit: Callable[[dict], None]) -> Path:
    """`src`'s archive with its config.json changed by `edit` (the hand-made payloads)."""
    with zipfile.ZipFile(src) as old, zipfile.ZipFile(dst, "w") as new:
        for item in old.infolist():
            data = old.read(item)
            if item.filename == "config.json":
                config = json.loads(data)
                edit(config)
                data = json.dumps(config).encode()
            new.writestr(item, data)
    return dst


def _dense(config: dict) -> dict:
    return next(x for x in config["config"]["layers"] if x["class_name"] == "Dense")


def keras_module_import(folder: Path) -> Path:
    """CVE-2025-1550: a layer whose module is outside Keras, imported by name before 3.9."""
    def edit(config: dict) -> None:
        _dense(config)["config"]["kernel_initializer"] = {
            "module": "subprocess", "class_name": "Popen", "registered_name": None,
            "config": {"args": ["touch", f"/tmp/{MARKER}"]}}
    return _edit_config(keras_archive(folder / "base.keras", False), folder / "module.keras",
                        edit)


def keras_get_file(folder: Path) -> Path:
    """CVE-2025-8747: keras.utils.get_file reached from a config, writing where it is told."""
    def edit(config: dict) -> None:
        _dense(config)["config"]["kernel_initializer"] = {
            "module": "keras.utils", "class_name": "get_file", "registered_name": None,
            "config": {"fname": MARKER, "origin": "file:///etc/hostname", "cache_dir": "/tmp"}}
    return _edit_config(keras_archive(folder / "base.keras", False), folder / "getfile.keras",
                        edit)


def keras_lambda_activation(folder: Path) -> Path:
    """A `__lambda__` where a function goes (a Dense's activation), not in a Lambda layer:
    Keras 3 deserializes it wherever it sits."""
    def edit(config: dict) -> None:
        _dense(config)["config"]["activation"] = {
            "class_name": "__lambda__", "config": {"value": _payload()}}
    return _edit_config(keras_archive(folder / "base.keras", False), folder / "act.keras",
                        edit)


def prefixed(path: Path, prefix: bytes = b"WLCK") -> Path:
    """`path` with bytes before its zip: Python's zipfile (and so Keras 3) finds a zip by its
    end record, whatever precedes it."""
    path.write_bytes(prefix + path.read_bytes())
    return path


def with_user_block(path: Path, block: int = 512) -> Path:
    """`path`'s HDF5 file rewritten with a user block of `block` bytes before its superblock,
    which libhdf5 finds at 512, 1024, 2048, ... (h5py's `userblock_size`)."""
    import h5py

    source = path.with_name("base." + path.name)
    path.rename(source)
    with h5py.File(source, "r") as old, h5py.File(path, "w", userblock_size=block) as new:
        for key in old:
            old.copy(old[key], new, name=key)
        for key, value in old.attrs.items():
            new.attrs[key] = value
    source.unlink()
    return path


def keras_folder(folder: Path, code: bool) -> Path:
    """The folder Keras 3's `save_model("hf://...")` uploads (saving_lib._upload_model_to_hf):
    `config.json`, `metadata.json` and `model.weights.h5`, the archive's members as they are;
    with `code`, the archive's config carries the Lambda layer."""
    elsewhere = folder.parent / f"{folder.name}-archive"
    elsewhere.mkdir(exist_ok=True)
    archive = keras_archive(elsewhere / "model.keras", code)
    with zipfile.ZipFile(archive) as z:
        for name in z.namelist():
            (folder / name).write_bytes(z.read(name))
    return folder / "config.json"


def keras_training_config(path: Path) -> Path:
    """A Keras 2 `.h5` whose model is plain and whose `training_config` (the compile step,
    read on a load with compile=True) names a loss from outside Keras."""
    import h5py

    keras_h5(path, False)
    with h5py.File(path, "r+") as f:
        f.attrs["training_config"] = json.dumps({"loss": {
            "module": "subprocess", "class_name": "Popen", "registered_name": None,
            "config": {"args": ["touch", f"/tmp/{MARKER}"]}}, "optimizer_config": {
            "class_name": "SGD", "config": {"name": "SGD", "learning_rate": 0.01}}})
    return path


KERAS_MALICIOUS: dict[str, Callable[[Path], Path]] = {
    # Where the readers find them (issue 58): a zip after other bytes, an HDF5 user block,
    # Keras 3's folder layout, Keras 2's compile config.
    "archive-prefixed": lambda d: prefixed(keras_archive(d / "model.keras", True)),
    "h5-user-block": lambda d: with_user_block(keras_h5(d / "model.h5", True)),
    "folder-layout": lambda d: keras_folder(d, True),
    "h5-training-config": lambda d: keras_training_config(d / "model.h5"),
    "archive-lambda": lambda d: keras_archive(d / "model.keras", True),
    "h5-lambda": lambda d: keras_h5(d / "model.h5", True),
    "module-import": keras_module_import,
    "get-file": keras_get_file,
    "lambda-activation": keras_lambda_activation,
}
KERAS_BENIGN: dict[str, Callable[[Path], Path]] = {
    "archive": lambda d: keras_archive(d / "model.keras", False),
    "h5": lambda d: keras_h5(d / "model.h5", False),
    "archive-prefixed": lambda d: prefixed(keras_archive(d / "model.keras", False)),
    "h5-user-block": lambda d: with_user_block(keras_h5(d / "model.h5", False)),
    "folder-layout": lambda d: keras_folder(d, False),
}


def keras_loads(path: Path) -> bool:
    """Keras's own loader, in safe mode, reads the file."""
    import keras

    if path.name == "config.json":  # the folder layout, as load_model("hf://...") reads it
        from keras.src.saving.saving_lib import _load_model_from_dir

        model = _load_model_from_dir(str(path.parent), None, False, True)
    else:
        model = keras.saving.load_model(path, safe_mode=True, compile=False)
    return bool(model.count_params() > 0)


# --- ONNX ---------------------------------------------------------------------------------


def onnx_model(folder: Path, location: str, where: str = "initializer",
               name: str = "model.onnx") -> Path:
    """An ONNX model (Add of an input and a weight) whose weight is external data at
    `location`, the weight sitting where `where` says: a graph initializer, a Constant node's
    tensor, an If node's branch, a sparse initializer. The bytes are written at `location`
    when it is inside the folder."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnx.external_data_helper import set_external_data

    weight = np.arange(4, dtype=np.float32)
    tensor = numpy_helper.from_array(weight, "w")
    inside = not (location.startswith(("/", "\\")) or ".." in location.replace("\\", "/")
                  .split("/"))
    if inside:
        (folder / location).parent.mkdir(parents=True, exist_ok=True)
        (folder / location).write_bytes(weight.tobytes())
    set_external_data(tensor, location=location, offset=0, length=weight.nbytes)
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    nodes, inits, sparse = [], [], []
    if where == "initializer":
        inits = [tensor]
        nodes = [helper.make_node("Add", ["x", "w"], ["y"])]
    elif where == "constant":
        nodes = [helper.make_node("Constant", [], ["w"], value=tensor),
                 helper.make_node("Add", ["x", "w"], ["y"])]
    elif where == "subgraph":
        branch = helper.make_graph([helper.make_node("Identity", ["w"], ["b"])], "then", [],
                                   [helper.make_tensor_value_info("b", TensorProto.FLOAT, [4])],
                                   [tensor])
        other = helper.make_graph([helper.make_node("Identity", ["x"], ["o"])], "else", [],
                                  [helper.make_tensor_value_info("o", TensorProto.FLOAT, [4])])
        cond = numpy_helper.from_array(np.array(True), "c")
        inits = [cond]
        nodes = [helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=other)]
    elif where == "sparse":
        indices = numpy_helper.from_array(np.arange(4, dtype=np.int64), "w_i")
        sparse = [helper.make_sparse_tensor(tensor, indices, [4])]
        nodes = [helper.make_node("Add", ["x", "w"], ["y"])]
    graph = helper.make_graph(nodes, "g", [x], [y], inits, sparse_initializer=sparse)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, path)
    return path


ONNX_MALICIOUS: dict[str, Callable[[Path], Path]] = {
    # CVE-2024-27318 / CVE-2022-25882: a location that climbs out of the model's folder.
    "dotdot": lambda d: onnx_model(d, f"../../../../../../tmp/{SECRET}"),
    # An absolute location (onnx before 1.16 joined it and read it).
    "absolute": lambda d: onnx_model(d, f"/tmp/{SECRET}"),
    # Windows separators (onnxruntime on Windows): the same climb.
    "backslash": lambda d: onnx_model(d, f"..\\..\\..\\..\\..\\tmp\\{SECRET}"),
    # The tensor where onnx's own walk goes last: a Constant node's attribute...
    "constant": lambda d: onnx_model(d, f"/tmp/{SECRET}", "constant"),
    # ... an If node's branch, a subgraph the loader reaches through the attribute...
    "subgraph": lambda d: onnx_model(d, f"../../../../tmp/{SECRET}", "subgraph"),
    # ... and a sparse initializer's values.
    "sparse": lambda d: onnx_model(d, f"/tmp/{SECRET}", "sparse"),
}
ONNX_BENIGN: dict[str, Callable[[Path], Path]] = {
    # The layouts exporters write: beside the model, and in a folder below it.
    "beside": lambda d: onnx_model(d, "model.onnx_data"),
    "below": lambda d: onnx_model(d, "weights/w.bin", "constant"),
}


def onnx_loads(path: Path) -> list[float]:
    """onnxruntime, the runtime that serves these models, loads the model with its external
    data (through the cache's symlinks, as 1.24.2 and later allow) and runs it on ones."""
    import numpy as np
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    [out] = session.run(None, {"x": np.ones(4, dtype=np.float32)})
    return [float(v) for v in out]
