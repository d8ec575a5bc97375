"""Safe to load: the project's policy over what a lock holds, judged offline.

`[tool.wlock.policy]` in weights.toml:

    pickle = "safe-imports"   # | "deny" | "allow"
    licenses = ["apache-2.0", "mit"]      # SPDX ids as cards write them; absent: any
    remote-code = "locked"    # | "deny"
    chat-template = "sandboxed"   # | "allow"
    keras = "safe-mode"       # | "allow"
    onnx-external-data = "inside"   # | "allow"

The judge reads the lock's records (what each pickle imports, each repo's licence, the
classes `auto_map` names, what the other formats would run or read), so `lock --check`
enforces it in CI without a request; `sync` judges the verified bytes before they are
published (policy/gate.py) and `wlock audit` the bytes on disk (wlock.scan reads them). What
was not read to its end is refused as unknown. An allowlist is not a proof of safety: it
says which functions a pickle names, not what they do with their arguments. "deny" refuses
every pickle that imports anything (one of plain data, importing nothing, calls nothing).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wlock.errors import InvalidFileError, PolicyError
from wlock.models import FormatScan, Lock, LockedRepo, PickleScan
from wlock.scan.budget import ScanLimits

PICKLE_MODES = ("safe-imports", "deny", "allow")
REMOTE_CODE_MODES = ("locked", "deny")
# The formats other than pickle, each a setting (models.FORMAT_KINDS), its modes default first:
# "sandboxed", a chat template (a GGUF's, a tokenizer's) that reaches past the renderers'
# sandbox is refused; "safe-mode", a Keras config that names code (a lambda, a Lambda layer,
# a module outside Keras, a function that reads or writes files) is refused, as Keras's own
# safe_mode means to and more; "inside", an ONNX tensor whose external data lies outside the
# model's folder is refused. Under each, what could not be judged is refused too; "allow"
# judges nothing of that format.
FORMAT_MODES = {"chat-template": ("sandboxed", "allow"), "keras": ("safe-mode", "allow"),
                "onnx-external-data": ("inside", "allow")}

# What `safe-imports` lets a pickle import: the functions torch.load(weights_only=True)
# accepts to rebuild tensors, storages and containers (torch/_weights_only_unpickler.py,
# _get_allowed_globals), and numpy's array reconstruction (np.save's pickles). Nothing that
# runs code given a string, imports a module or opens a file.
SAFE_IMPORTS: dict[str, frozenset[str]] = {
    "collections": frozenset({"OrderedDict", "Counter", "defaultdict"}),
    "torch._utils": frozenset({
        "_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_tensor_v3", "_rebuild_parameter",
        "_rebuild_parameter_with_state", "_rebuild_qtensor", "_rebuild_sparse_tensor",
        "_rebuild_meta_tensor_no_storage", "_rebuild_nested_tensor",
        "_rebuild_wrapper_subclass", "_rebuild_device_tensor_from_numpy",
        "_rebuild_device_tensor_from_cpu_tensor"}),
    "torch._tensor": frozenset({"_rebuild_from_type_v2"}),
    "torch": frozenset({
        "Size", "device", "Tensor", "float16", "float32", "float64", "bfloat16", "int8",
        "int16", "int32", "int64", "uint8", "bool", "complex64", "complex128", "float8_e4m3fn",
        "float8_e5m2", "per_tensor_affine", "per_channel_affine", "strided", "sparse_coo",
        "ByteStorage", "CharStorage", "ShortStorage", "IntStorage", "LongStorage",
        "HalfStorage", "FloatStorage", "DoubleStorage", "BFloat16Storage", "BoolStorage",
        "ComplexFloatStorage", "ComplexDoubleStorage", "QInt8Storage", "QUInt8Storage",
        "QInt32Storage", "QUInt4x2Storage", "QUInt2x4Storage", "UntypedStorage"}),
    "torch.storage": frozenset({"UntypedStorage", "TypedStorage"}),
    "numpy": frozenset({"ndarray", "dtype"}),
    "numpy.core.multiarray": frozenset({"_reconstruct", "scalar"}),
    "numpy._core.multiarray": frozenset({"_reconstruct", "scalar"}),
    "_codecs": frozenset({"encode"}),  # how protocol 2 pickles bytes
    # joblib.dump's header of each numpy array it writes inline (joblib/numpy_pickle.py): a
    # record of shape, dtype and order, whose bytes joblib.load reads raw (wlock.scan walks
    # past them as joblib does, and judges an array of objects' own pickle).
    "joblib.numpy_pickle": frozenset({"NumpyArrayWrapper"}),
    "builtins": frozenset({"set", "frozenset", "slice", "complex", "bytearray"}),
}


def safe_import(name: str) -> bool:
    module, _, attr = name.rpartition(".")
    if module == "numpy.dtypes" and attr.endswith("DType"):
        return True
    return attr in SAFE_IMPORTS.get(module, frozenset())


@dataclass(frozen=True, slots=True)
class Policy:
    pickle: str = "safe-imports"
    licenses: tuple[str, ...] | None = None  # None: any licence
    remote_code: str = "locked"
    chat_template: str = "sandboxed"
    keras: str = "safe-mode"
    onnx_external_data: str = "inside"
    path: str = "weights.toml"  # where it was read, for messages
    # [tool.wlock.policy.scan]: each judgement's bounds (a frozen value: one default is safe)
    limits: ScanLimits = ScanLimits()  # noqa: RUF009


@dataclass(frozen=True, slots=True)
class Violation:
    kind: str  # "pickle", "license", "remote-code", or a format (models.FORMAT_KINDS)
    repo: str
    path: str | None  # the file, when one is at fault
    detail: str  # the import, the licence, the class
    message: str


def read_policy(manifest: Path) -> Policy:
    """`[tool.wlock.policy]` of weights.toml (the defaults when absent). Raises
    InvalidFileError (exit 4) naming the line of a bad value."""
    from wlock.lock.tomlpos import read_toml

    data, locator = read_toml(manifest, missing="Run `wlock init`.")
    tool = data.get("tool", {})
    wlock = tool.get("wlock", {}) if isinstance(tool, dict) else {}
    raw: Any = wlock.get("policy", {}) if isinstance(wlock, dict) else {}
    display = str(manifest)

    def fail(key: str, problem: str, hint: str) -> InvalidFileError:
        # The key's line: its first assignment after the [tool.wlock.policy] header.
        lines: list[str] = list(locator.lines)
        start = next((n for n, text in enumerate(lines)
                      if text.strip().replace(" ", "") == "[tool.wlock.policy]"), 0)
        line = next((n for n, text in enumerate(lines[start:], start + 1)
                     if text.strip().startswith(key)), start + 1)
        return InvalidFileError(display, problem, line=line, key=f"tool.wlock.policy.{key}",
                                hint=hint)

    if not isinstance(raw, dict):
        raise fail("policy", "must be a table", "Write [tool.wlock.policy].")
    for key in raw:
        if key not in ("pickle", "licenses", "remote-code", *FORMAT_MODES, "scan"):
            raise fail(key, "unknown key",
                       "The policy takes pickle, licenses, remote-code, "
                       f"{', '.join(FORMAT_MODES)}, scan.")
    pickle = raw.get("pickle", "safe-imports")
    if pickle not in PICKLE_MODES:
        raise fail("pickle", f"{pickle!r} is not a pickle policy",
                   f"One of: {', '.join(PICKLE_MODES)}.")
    licenses = raw.get("licenses")
    if licenses is not None and (not isinstance(licenses, list) or not all(
            isinstance(x, str) and x for x in licenses)):
        raise fail("licenses", "must be a list of licence ids", 'Like ["apache-2.0", "mit"].')
    remote = raw.get("remote-code", "locked")
    if remote not in REMOTE_CODE_MODES:
        raise fail("remote-code", f"{remote!r} is not a remote-code policy",
                   f"One of: {', '.join(REMOTE_CODE_MODES)}.")
    modes = {}
    for kind, allowed in FORMAT_MODES.items():
        modes[kind.replace("-", "_")] = mode = raw.get(kind, allowed[0])
        if mode not in allowed:
            raise fail(kind, f"{mode!r} is not a {kind} policy", f"One of: {', '.join(allowed)}.")
    scan = raw.get("scan", {})
    if not isinstance(scan, dict):
        raise fail("scan", "must be a table", "Write [tool.wlock.policy.scan].")
    bounds: dict[str, Any] = {}
    for key, value in scan.items():
        if key not in ScanLimits.keys():  # noqa: SIM118 (a classmethod, not a dict)
            raise fail(key, "unknown key of [tool.wlock.policy.scan]",
                       f"The judgement's bounds are: {', '.join(ScanLimits.keys())}.")
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise fail(key, "must be a positive number",
                       "Bytes as a number (268435456), seconds as a number.")
        bounds[key.replace("-", "_")] = value
    return Policy(pickle=pickle, licenses=tuple(x.lower() for x in licenses)
                  if licenses is not None else None, remote_code=remote, **modes,
                  path=display, limits=ScanLimits(**bounds))


def expected_scan(repo: LockedRepo, path: str,
                  recorded: Mapping[str, PickleScan] | None = None) -> PickleScan | None:
    """What the lock says the bytes of `path` hold, for sync's gate and audit to compare them
    with: its record; "no pickle" for a file `lock` judges in a repo whose pickles were
    recorded (a lock written by a judging wlock records every pickle it judged); None when
    the lock says nothing: a file lock never judges (a README: its reader never unpickles;
    "N.B." at its start is a pickle of None) or a repo locked before records were kept.
    `recorded`: the repo's records by path, where the caller has them."""
    from wlock.scan import judged_at_lock

    found = (recorded.get(path) if recorded is not None
             else next((p for p in repo.pickles if p.path == path), None))
    if found is not None:
        return found
    if repo.pickles and judged_at_lock(repo.kind, path):
        return PickleScan(path, (), False)
    return None


def judge_pickle(repo: str, scan: PickleScan, policy: Policy) -> list[Violation]:
    if not scan.pickle or policy.pickle == "allow":
        return []
    if scan.unreadable is not None and policy.pickle == "safe-imports":
        # Failing closed: what the judgement could not read to its end may call anything.
        seen = f" (imports seen before: {', '.join(scan.imports)})" if scan.imports else ""
        return [Violation("pickle", repo, scan.path, "unknown",
                          f"{repo}: {scan.path} could not be judged to its end, so "
                          f"`safe-imports` refuses it as unknown: {scan.unreadable}{seen}")]
    if policy.pickle == "deny":
        if not scan.imports and scan.unreadable is None:
            return []  # plain data read to its end (None, numbers, lists): it calls nothing
        return [Violation("pickle", repo, scan.path, "pickle",
                          f"{repo}: {scan.path} is a pickle, and the policy denies pickles "
                          f"(pickle = \"deny\"): torch.load runs what it names")]
    return [Violation("pickle", repo, scan.path, name,
                      f"{repo}: {scan.path} imports {name}, which `safe-imports` does not "
                      "allow: torch.load would call it")
            for name in scan.imports if not safe_import(name)]


def format_mode(policy: Policy, kind: str) -> str:
    """The policy's setting for a format (`kind`, one of models.FORMAT_KINDS)."""
    mode: str = getattr(policy, kind.replace("-", "_"))
    return mode


def judges_formats(policy: Policy) -> bool:
    """Whether any format other than pickle is judged (not every one set to "allow")."""
    return any(format_mode(policy, kind) != "allow" for kind in FORMAT_MODES)


# How each format's findings read in a refusal: what the file would do, then why it matters.
_FORMAT_WORDS = {
    "chat-template": ("reaches past the renderers' sandbox", "rendered, it could run code"),
    "keras": ("names code Keras runs as it loads", "loaded, it could run code"),
    "onnx-external-data": ("reads its external data from outside the model's folder",
                           "loaded, it reads that file into the model"),
}


def judge_format(repo: str, scan: FormatScan, policy: Policy) -> list[Violation]:
    """What a format's setting refuses in one record: its findings, or that it could not be
    judged; nothing under "allow"."""
    mode = format_mode(policy, scan.kind)
    if mode == "allow":
        return []
    if scan.unreadable is not None:
        return [Violation(scan.kind, repo, scan.path, "unknown",
                          f"{repo}: {scan.path}'s {scan.key} could not be judged, so "
                          f"`{scan.kind} = \"{mode}\"` refuses it: {scan.unreadable}")]
    what, why = _FORMAT_WORDS[scan.kind]
    return [Violation(scan.kind, repo, scan.path, ", ".join(scan.findings),
                      f"{repo}: {scan.path}'s {scan.key} {what} "
                      f"({'; '.join(scan.findings)}): {why}")]


def judge_repo(repo: LockedRepo, lock: Lock, policy: Policy,
               scans: Iterable[PickleScan] | None = None,
               formats: Iterable[FormatScan] | None = None) -> list[Violation]:
    """What `policy` refuses in one locked repo. `scans`, `formats`: the pickles' imports
    and the other formats' findings to judge (default: what the lock recorded)."""
    out: list[Violation] = []
    for scan in repo.pickles if scans is None else scans:
        out += judge_pickle(repo.id, scan, policy)
    for found in repo.formats if formats is None else formats:
        out += judge_format(repo.id, found, policy)
    if policy.licenses is not None and repo.kind == "model":
        # Every licence a card lists must be allowed (a list does not say "any of").
        for licence in repo.licenses or ("",):
            lowered = licence.lower()
            if lowered in policy.licenses or (
                    lowered == "other" and (repo.license_name or "").lower() in policy.licenses):
                continue
            shown = licence or "none recorded"
            if lowered == "other":
                shown = f"other ({repo.license_name or 'no license_name'})"
            out.append(Violation("license", repo.id, None, licence,
                                 f"{repo.id}: licence {shown} is not in the policy's "
                                 f"licenses ({', '.join(policy.licenses)})"))
    if repo.remote_code:
        locked = {f.path for f in repo.files}
        for reference in repo.remote_code:
            where = code_words(reference)
            if policy.remote_code == "deny":
                out.append(Violation("remote-code", repo.id, None, reference,
                                     f"{repo.id}: {where}, and the policy denies remote code "
                                     "(remote-code = \"deny\")"))
                continue
            if reference.startswith("import:"):
                continue  # an installed module: the environment's lock (uv.lock) pins it
            if reference.startswith("kernel:"):
                kernel = kernel_repo(reference)
                if lock.find("model", kernel) is None:
                    out.append(Violation(
                        "remote-code", repo.id, None, reference,
                        f"{repo.id}: {where}, which weights.lock does not lock: add "
                        f"{kernel} to weights.toml at the revision the kernels library loads "
                        "(its version branch, such as v1), or deny remote code"))
                continue
            owner, _, name = reference.rpartition("--")
            module = name.split(".")[0] + ".py"
            if owner and lock.find("model", owner) is None:
                out.append(Violation("remote-code", repo.id, None, reference,
                                     f"{repo.id}: auto_map runs {reference} from {owner}, "
                                     "which weights.lock does not lock"))
            elif not owner and module not in locked:
                out.append(Violation("remote-code", repo.id, module, reference,
                                     f"{repo.id}: auto_map runs {reference}, but {module} is "
                                     "not in the lock (excluded?)"))
    return out


def kernel_repo(reference: str) -> str:
    """The repo of a `kernel:org/name@revision:function` reference."""
    return reference.removeprefix("kernel:").split("@")[0].split(":")[0]


def code_words(reference: str) -> str:
    """Where a remote-code reference comes from and what runs it, in words."""
    if reference.startswith("kernel:"):
        return (f"config.json names the Hub kernel {reference.removeprefix('kernel:')} as "
                "its attention or experts implementation, compiled code the kernels library "
                "runs on a plain from_pretrained")
    if reference.startswith("import:"):
        return (f"a sentence-transformers Dense module imports {reference.removeprefix('import:')}"
                ", a module outside torch, under trust_remote_code")
    if reference.startswith("custom_generate/"):
        return "custom_generate/ is remote code transformers imports on a trust_remote_code load"
    owner, _, _ = reference.rpartition("--")
    if "--custom_generate/" in reference:
        return (f"generation_config.json picks a generation mode transformers runs from "
                f"{owner}'s custom_generate/ (trust_remote_code)")
    return f"auto_map names remote code {reference}"


def judge_lock(lock: Lock, policy: Policy) -> list[Violation]:
    """Every violation of `policy` that the lock's records show, repo by repo."""
    return [v for repo in lock.repos for v in judge_repo(repo, lock, policy)]


def judge_rescan(lock: Lock, rescanned: Lock, policy: Policy) -> list[Violation]:
    """`lock --check --rescan`: the policy over the Hub's bytes as they are now
    (`rescanned`), and every record of `lock` that differs from them (edited by hand, or
    shown a decoy when it was made)."""
    out: list[Violation] = []
    for repo, now in zip(lock.repos, rescanned.repos, strict=True):
        recorded = {p.path: p for p in repo.pickles}
        found = {p.path: p for p in now.pickles}
        for path in sorted(set(recorded) | set(found)):
            old = recorded.get(path) or PickleScan(path, (), False)
            new = found.get(path) or PickleScan(path, (), False)
            if (old.imports, old.pickle) != (new.imports, new.pickle):
                out.append(Violation(
                    "changed", repo.id, path, ", ".join(new.imports),
                    f"{repo.id}: {path} on the Hub holds "
                    f"{_shown(new)}, where weights.lock records {_shown(old)}"))
        for scan in now.pickles:
            out += judge_pickle(repo.id, scan, policy)
        was = {(t.path, t.kind, t.key): t for t in repo.formats}
        found_now = {(t.path, t.kind, t.key): t for t in now.formats}
        for path, kind, key in sorted(set(was) | set(found_now)):
            old_t, new_t = was.get((path, kind, key)), found_now.get((path, kind, key))
            if (old_t and (old_t.findings, old_t.unreadable)) != (
                    new_t and (new_t.findings, new_t.unreadable)):
                out.append(Violation(
                    "changed", repo.id, path, key,
                    f"{repo.id}: {path}'s {key} on the Hub "
                    f"{_format_shown(kind, new_t)}, where weights.lock records "
                    f"{_format_shown(kind, old_t) if old_t else 'nothing'}"))
        for found_format in now.formats:
            out += judge_format(repo.id, found_format, policy)
    return out


_FORMAT_VERBS = {"chat-template": "reaches", "keras": "runs", "onnx-external-data": "reads"}


def _format_shown(kind: str, scan: FormatScan | None) -> str:
    if scan is None:
        return f"{_FORMAT_VERBS[kind]} nothing the policy judges"
    if scan.unreadable:
        return f"could not be judged ({scan.unreadable})"
    return f"{_FORMAT_VERBS[kind]} " + "; ".join(scan.findings)


def _shown(scan: PickleScan) -> str:
    if not scan.pickle:
        return "no pickle"
    return "a pickle importing " + (", ".join(scan.imports) or "nothing")


def refusal(violations: list[Violation], policy: Policy, what: str) -> PolicyError:
    """The error for a refused lock: every violation named, and what was left alone."""
    shown = violations[:100]
    more = f"\n  ... and {len(violations) - 100} more" if len(violations) > 100 else ""
    return PolicyError(
        f"the policy in {policy.path} refuses {len(violations)} thing(s) in the lock:\n"
        + "\n".join(f"  {v.message}" for v in shown) + more,
        hint=" ".join([what, *(_HINTS[kind] for kind in _HINTS
                               if any(v.kind == kind for v in violations))]))


# What to do about each kind of refusal, said once per kind in a refusal's hint.
_HINTS = {
    "pickle": "For a pickle: change the entry (another ref, `exclude` the file, a loader that "
    "takes safetensors), or the policy's `pickle` if you trust its author.",
    "changed": "For bytes that differ from the lock's record: lock again from the Hub "
    "(`wlock lock --upgrade-package ID`) and review the diff.",
    "license": "For a licence: choose a model under a licence the policy lists, or add the "
    "licence to `licenses` in [tool.wlock.policy] once your use complies with it.",
    "remote-code": "For remote code: lock the repo that holds it (`wlock add ORG/NAME`), or "
    "set `remote-code` in [tool.wlock.policy] if you mean to allow it.",
    "chat-template": "For a chat template: take another file or repo (a real chat template "
    "names nothing the sandbox hides), or set `chat-template = \"allow\"` in "
    "[tool.wlock.policy] if your renderer is not a Jinja sandbox you rely on.",
    "keras": "For a Keras model that names code: take its weights alone (model.weights.h5, "
    "safetensors) and build the model in your code, or set `keras = \"allow\"` in "
    "[tool.wlock.policy] if you mean to run the code it names.",
    "onnx-external-data": "For ONNX external data outside the model's folder: take another "
    "file or repo (exporters write it beside the model), or set `onnx-external-data = "
    "\"allow\"` in [tool.wlock.policy] if you mean the loader to read those files.",
}


def enforcer(manifest: Path, what: str) -> Callable[[Lock], None]:
    """A check for `lock_project(accept=...)`: raises PolicyError (exit 7) naming every
    violation of weights.toml's policy in the lock about to be written or checked."""
    policy = read_policy(manifest)

    def accept(lock: Lock) -> None:
        if violations := judge_lock(lock, policy):
            raise refusal(violations, policy, what)

    return accept
