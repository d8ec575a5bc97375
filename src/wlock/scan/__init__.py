"""What a locked file would make an unpickler call: judged by its bytes, failing closed.

`judge_file` reads a file as the loader that opens it would (torch.load's zip, legacy and
tar formats, numpy's .npy/.npz, joblib's compressed and inline arrays, pickle.load) and walks
every pickle in it to its STOP, as CPython's unpickler reads it (`scan.unpickle`). The
result names every import; a file that could not be read to its end is `unreadable`, with
the reason, and the policy refuses it: what was not read is never called clean.

Which files: every file of a model repo, whatever its name (a pickle renamed `.dat` or
named as a shard in an index is read by torch.load all the same); in a dataset repo, every
file but those of the formats `datasets` reads with readers that never unpickle (Parquet,
Arrow, JSON, CSV, text, images, audio), since a dataset may hold tens of thousands of them.

`sync` judges every such file from its verified bytes before it becomes visible, and
`audit` what is on disk: they are the authority. `lock` judges from HTTP ranges, a preview
that refuses early (the zip's directory and its pickles, never the tensors), and leaves out
the files whose readers never unpickle (safetensors, JSON, text, GGUF, ONNX, images:
`judged_at_lock`), unless an index of pickle weights names them as its shards, where
torch.load reads whatever the index names.

Formats other than pickle that run code or read past their folder (`judge_formats`): chat
templates (`scan.template`, in a GGUF's header: `scan.gguf`), Keras configs (`scan.keras`),
ONNX external data (`scan.onnx`). Each is a policy class of its own, judged by lock from
ranges, by sync from the verified bytes and by audit on disk, as pickles are.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Sequence
from typing import BinaryIO

from wlock.models import FormatScan, LockedFile, PickleScan, RepoKind
from wlock.scan.budget import ScanLimits
from wlock.scan.formats import judge_stream
from wlock.scan.template import judge_template

# datasets' packaged builders for these read them with pyarrow, json, csv, PIL, soundfile
# (datasets/packaged_modules/): none unpickles.
DATASET_UNPICKLED_NEVER = (
    ".parquet", ".arrow", ".json", ".jsonl", ".json.gz", ".jsonl.gz", ".csv", ".tsv",
    ".txt", ".md", ".png", ".jpg", ".jpeg", ".webp", ".gif", ".bmp", ".tif", ".tiff",
    ".wav", ".flac", ".mp3", ".ogg", ".opus", ".m4a", ".mp4", ".webm", ".avi",
    ".gitattributes", ".xml", ".html", ".yaml", ".yml",
)


# Read by safetensors, json, tokenizers, gguf, onnx, PIL, jinja2, the import system: the
# readers of these never unpickle (lock-time only; sync judges them all the same).
READ_BY_OTHERS = (
    ".safetensors", ".json", ".jsonl", ".md", ".txt", ".gguf", ".onnx", ".onnx_data",
    ".msgpack", ".h5", ".tflite", ".ot", ".model", ".py", ".jinja", ".tiktoken", ".vocab",
    ".spm", ".bpe", ".yaml", ".yml", ".gitattributes", ".png", ".jpg", ".jpeg", ".gif",
    ".webp", ".svg", ".html", ".css", ".xml",
)
# transformers' WEIGHTS_INDEX_NAME and the other pickle indexes: torch.load reads every shard
# its weight_map names, whatever the shard's name.
_PICKLE_INDEXES = (".bin.index.json", ".pt.index.json", ".pth.index.json", ".ckpt.index.json")


def is_judged(kind: RepoKind, path: str) -> bool:
    """Whether sync and audit judge a locked file (see the module's docstring)."""
    return kind == "model" or not path.lower().endswith(DATASET_UNPICKLED_NEVER)


def judged_at_lock(kind: RepoKind, path: str, shards: frozenset[str] = frozenset()) -> bool:
    """Whether `lock` judges a locked file from ranges: every file sync judges but those
    READ_BY_OTHERS, unless a pickle index names it (`shards`)."""
    if not is_judged(kind, path):
        return False
    return path in shards or not path.lower().endswith(READ_BY_OTHERS)


def pickle_shards(files: Sequence[LockedFile], read: Callable[[str], bytes]) -> frozenset[str]:
    """Every path a locked pickle index (`pytorch_model.bin.index.json`, ...) names as a
    shard, read with `read(path)`; an index that is not one names none (the loader that
    chose it says so)."""
    out: set[str] = set()
    for f in files:
        if not f.path.lower().endswith(_PICKLE_INDEXES):
            continue
        folder = f.path.rpartition("/")[0]
        try:
            weight_map = json.loads(read(f.path)).get("weight_map", {})
            out.update((f"{folder}/" if folder else "") + str(v) for v in weight_map.values())
        except (ValueError, AttributeError, TypeError):
            continue
    return frozenset(out)


def judge_file(stream: BinaryIO | io.RawIOBase, path: str, limits: ScanLimits | None = None,
               size: int | None = None) -> PickleScan:
    """The judgement of the file at `path` (for the record) read from `stream` (seekable,
    from its start). Raises only what the stream raises (a range read's HubError)."""
    found = judge_stream(stream, limits, size)
    return PickleScan(path, tuple(sorted(found.imports)), found.pickle, found.unreadable)


def judge_formats(stream: BinaryIO | io.RawIOBase, path: str,
                  limits: ScanLimits | None = None, size: int | None = None,
                  ) -> tuple[FormatScan, ...]:
    """What the file at `path` (read from `stream`, from its start) would run or read past its
    folder in a format other than pickle, or could not be judged (`is_format_judged` says
    which files): its chat templates that reach past the renderers' sandbox (a GGUF's header,
    a tokenizer's or processor's config, a `.jinja` file), a Keras config's code (a `.keras`
    archive, a Keras 2 `.h5`), an ONNX model's external data outside its folder. () for a
    file with nothing to say. Raises only what the stream raises."""
    stream.seek(0)
    head = stream.read(4) or b""
    stream.seek(0)
    name = path.rsplit("/", 1)[-1].lower()
    if name.endswith(_KERAS):
        return _keras(stream, path)
    if name == "config.json":
        return _keras_folder(stream, path)
    if name.endswith(".onnx"):
        return _onnx(stream, path, limits, size)
    return _templates(stream, path, head, name, limits, size)


def _templates(stream: BinaryIO | io.RawIOBase, path: str, head: bytes, name: str,
               limits: ScanLimits | None, size: int | None) -> tuple[FormatScan, ...]:
    from wlock.scan.budget import Budget, Source, Unjudged
    from wlock.scan.gguf import TEMPLATE_KEY, chat_templates, is_gguf

    found: list[tuple[str, str]] = []
    try:
        if is_gguf(head):
            found = chat_templates(Source(stream, Budget(limits or ScanLimits()), size))
        elif name.endswith(".jinja") or name in _TEMPLATE_CONFIGS:
            data = stream.read(MAX_TEMPLATE_FILE + 1) or b""
            if len(data) > MAX_TEMPLATE_FILE:
                raise Unjudged(f"a file of more than {MAX_TEMPLATE_FILE:,} bytes")
            found = _config_templates(path.rsplit("/", 1)[-1], data)
    except Unjudged as e:
        return (FormatScan("chat-template", path,
                           TEMPLATE_KEY if is_gguf(head) else "chat_template", (),
                           f"it could not be read: {e}"),)
    out = []
    for key, text in found:
        escapes, unreadable = judge_template(text)
        if escapes or unreadable:
            out.append(FormatScan("chat-template", path, key, escapes, unreadable))
    return tuple(out)


def _keras(stream: BinaryIO | io.RawIOBase, path: str) -> tuple[FormatScan, ...]:
    from wlock.scan.budget import Unjudged
    from wlock.scan.keras import code_in, configs

    out = []
    try:
        for where, config in configs(stream):
            found = tuple(sorted(set(code_in(config))))
            if found:
                out.append(FormatScan("keras", path, where, found))
    except Unjudged as e:
        return (FormatScan("keras", path, "config", (), f"it could not be read: {e}"),)
    return tuple(out)


def _keras_folder(stream: BinaryIO | io.RawIOBase, path: str) -> tuple[FormatScan, ...]:
    from wlock.scan.keras import MAX_CONFIG, code_in, folder_config

    data = stream.read(MAX_CONFIG + 1) or b""
    if len(data) > MAX_CONFIG:
        return (FormatScan("keras", path, "config.json", (),
                           f"it could not be read: more than {MAX_CONFIG:,} bytes"),)
    out = []
    for where, config in folder_config(data):
        found = tuple(sorted(set(code_in(config))))
        if found:
            out.append(FormatScan("keras", path, where, found))
    return tuple(out)


def _onnx(stream: BinaryIO | io.RawIOBase, path: str, limits: ScanLimits | None,
          size: int | None) -> tuple[FormatScan, ...]:
    from wlock.scan.budget import Budget, Source, Truncated, Unjudged
    from wlock.scan.onnx import escapes_folder, external_locations

    if size is None:
        size = stream.seek(0, io.SEEK_END)
        stream.seek(0)
    try:
        found = external_locations(Source(stream, Budget(limits or ScanLimits()), size), size)
    except Truncated:
        return ()  # protobuf cannot parse it either: no runtime reads anything it names
    except Unjudged as e:
        return (FormatScan("onnx-external-data", path, "model", (),
                           f"it could not be read: {e}"),)
    by_tensor: dict[str, set[str]] = {}
    for tensor, location in found:
        why = escapes_folder(location)
        if why is not None:
            by_tensor.setdefault(tensor, set()).add(f"{location!r}: {why}")
    return tuple(FormatScan("onnx-external-data", path, tensor, tuple(sorted(findings)))
                 for tensor, findings in sorted(by_tensor.items()))


# The names Keras loads models from: Keras 3's archive, Keras 2's HDF5 (load_model and
# from_pretrained_keras read these; a weights-only .h5 holds no config and says nothing).
_KERAS = (".keras", ".h5", ".hdf5")
# The configs transformers reads a chat template from: tokenizer_config.json's
# `chat_template` (a string, a list of {name, template}, or a dict of name -> template, as
# `PreTrainedTokenizerBase.apply_chat_template` takes it), a processor's chat_template.json
# and `processor_config.json` (transformers 5 passes its `chat_template` to the processor), and
# the other processor configs `ProcessorMixin` reads kwargs from; and their largest judged size.
_TEMPLATE_CONFIGS = ("tokenizer_config.json", "chat_template.json", "processor_config.json",
                     "preprocessor_config.json", "video_preprocessor_config.json")
MAX_TEMPLATE_FILE = 64 * 1024 * 1024


def _config_templates(name: str, data: bytes) -> list[tuple[str, str]]:
    from wlock.scan.budget import Unjudged

    if name.endswith(".jinja"):
        stem = name.removesuffix(".jinja")
        key = "chat_template" if stem == "chat_template" else f"chat_template.{stem}"
        return [(key, data.decode("utf-8", "replace"))]
    try:
        config = json.loads(data)
    except ValueError:
        return []  # the library fails on it too: nothing of it is rendered
    value = config.get("chat_template") if isinstance(config, dict) else None
    if isinstance(value, str):
        return [("chat_template", value)]
    if isinstance(value, dict):  # named templates: {"default": ..., "tool_use": ...}
        if not all(isinstance(v, str) for v in value.values()):
            raise Unjudged("a chat_template dict whose values are not templates")
        return [(f"chat_template.{k}", v) for k, v in value.items()]
    if isinstance(value, list):  # named templates: [{"name": ..., "template": ...}]
        out = []
        for item in value:
            if not (isinstance(item, dict) and isinstance(item.get("template"), str)):
                raise Unjudged("a chat_template list whose items are not {name, template}")
            out.append((f"chat_template.{item.get('name')}", item["template"]))
        return out
    return []


def formats_judged_at_lock(kind: RepoKind, path: str) -> bool:
    """Whether `lock` reads a locked file for `judge_formats`: by its name
    (`is_format_judged`), and every file it reads for pickles besides (the resolver skips
    those found to hold one), whose first bytes may be a GGUF's under any name (gguf's
    reader and transformers' `gguf_file=` take any)."""
    return is_format_judged(path) or judged_at_lock(kind, path)


def formats_judged(kind: RepoKind, path: str) -> bool:
    """Whether sync and audit read a file for `judge_formats`: every file they judge, and
    every file `is_format_judged` names; its first bytes decide (a GGUF by its magic)."""
    return is_format_judged(path) or is_judged(kind, path)


def is_format_judged(path: str) -> bool:
    """Whether `judge_formats` reads a locked file (by its name, to keep lock's range reads
    to the files these loaders read; its bytes decide after): a GGUF file, a tokenizer's or
    processor's config, a `.jinja` template, a Keras archive or HDF5 file, an ONNX model."""
    name = path.rsplit("/", 1)[-1].lower()
    return name.endswith((".gguf", ".jinja", ".onnx", *_KERAS)) or name in _TEMPLATE_CONFIGS \
        or name == "config.json"


__all__ = ["ScanLimits", "formats_judged", "formats_judged_at_lock", "is_format_judged",
           "is_judged", "judge_file", "judge_formats", "judged_at_lock", "pickle_shards"]
