"""Find every call that downloads from the Hub, with the repo id and revision it passes.

One pass of `ast` per source. A call is recognised by its name (the last part of the dotted
callee), so `transformers.AutoModel.from_pretrained`, `AutoModel.from_pretrained` and
`self.model_cls.from_pretrained` all match; what is passed decides the rest:

- a repo id that is a string literal (or a module-level string constant) is checked;
- a local path (`./x`, `/x`, `../x`, `~/x`, `Path(...)`, `os.path.join(...)`, `a / b`) is not
  a load;
- anything else (a variable, an f-string) is a dynamic id: judged by the literal default one
  hop behind it when there is one (`args.model` and `--model`'s default: lint.defaults),
  else reported in its own category.

A function that passes one of its parameters, unchanged, as a load's id is a helper
(`Wrapper`): each call of it with a literal is a load of that literal, in this file and, by
import, in the project's other files (lint.checker runs that second pass). Repo ids and
commits in another file's module constants count where they are imported.

A revision is pinned when it is a 40-hex literal, a module-level constant holding one, or
`wlock.revision("org/name")`.
"""

from __future__ import annotations

import ast
import bisect
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Literal, NamedTuple

from wlock.lint.config import Loader
from wlock.lint.defaults import Defaults, parameter_defaults
from wlock.lint.sources import Source
from wlock.models import RepoKind

RevisionKind = Literal["missing", "commit", "literal", "wlock", "dynamic"]

_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_REPO_ID = re.compile(r"^(?:[\w\-.]{1,96}/)?[\w\-.]{1,96}$")
# datasets' packaged builders: `load_dataset("json", data_files=...)` reads local files.
PACKAGED_BUILDERS = frozenset({
    "json", "csv", "parquet", "text", "arrow", "pandas", "sql", "generator", "xml",
    "imagefolder", "audiofolder", "videofolder", "pdffolder", "niftifolder", "webdataset",
    "cache", "spark", "lance",
})
DIFFUSERS_VARIANTS = frozenset({"fp16", "bf16", "fp32", "flax", "onnx", "non_ema", "ema"})
# Calls that give a local folder (wlock.snapshot_path: the locked commit's, already pinned).
_LOCAL_CALLS = frozenset({"Path", "PurePath", "PosixPath", "WindowsPath", "join", "abspath",
                          "expanduser", "realpath", "dirname", "resolve", "cwd", "home",
                          "snapshot_path"})


@dataclass(frozen=True, slots=True)
class Revision:
    kind: RevisionKind
    value: str | None = None  # the literal, or the id given to wlock.revision()
    origin: str | None = None  # where a default came from, when the call passes a variable
    expr: str | None = None  # wlock.revision(<this variable>), as written


class Repo(NamedTuple):
    """What a call passes as the repo id."""

    state: str  # "absent" | "local" | "snapshot" | "literal" | "dynamic"
    repo_id: str | None
    origin: str | None = None  # a variable's default: "the default of --model (line 12)"
    expr: str | None = None  # that variable, as written: "args.model"


@dataclass(frozen=True, slots=True)
class LoadSite:
    """One pinnable download in the code: `param` of `call` should pin `repo_id`."""

    path: str
    cell: int | None
    line: int
    col: int  # 1-based, in characters
    end_line: int
    call: str  # as written: "AutoModel.from_pretrained"
    family: str
    repo_id: str | None  # None: dynamic, or (pipeline) the task's default model
    repo_kind: RepoKind
    param: str  # "revision", "tokenizer_revision", "code_revision", or "@" (in the string)
    revision: Revision
    default_model: bool = False  # pipeline(task) with no model: the task's default
    origin: str | None = None  # the id is a variable's default (see Repo)
    expr: str | None = None
    literal: bool = True  # False: a string built with + or an f-string (--fix leaves it)
    via: str | None = None  # a helper's call: "through snapshot_download() at utils.py:12"
    helper_param: str | None = None  # that helper's parameter holding the id
    # load_dataset's config (`name=`, or the second argument) and `split=`, when literals.
    config: str | None = None
    split: str | None = None
    # A trust_remote_code load with `revision` and no `code_revision`: its own code is
    # pinned by the revision, code in another repo is not.
    code_by_revision: bool = False


@dataclass(frozen=True, slots=True)
class Exported:
    """A module-level string another file may import: a repo id or a commit."""

    name: str
    module: str
    value: str


# `NAME = "org/name"` or `NAME: str = "<40 hex>"` at the start of a line: found in the text,
# so a file that only holds constants (a config.py) costs no parse.
_EXPORTED = re.compile(
    r"^([A-Za-z_]\w*)\s*(?::\s*\w+\s*)?=\s*"  # NAME (: type) =
    r"""["']([\w\-.]{1,96}/[\w\-.]{1,96}|[0-9a-f]{40})["']\s*(?:\#.*)?$""",  # "org/x"
    re.M,
)


def exported_constants(text: str, module: str) -> list[Exported]:
    return [Exported(m.group(1), module, m.group(2)) for m in _EXPORTED.finditer(text)]


@dataclass(frozen=True, slots=True)
class Wrapper:
    """A function of the project that passes one of its parameters as the id of a load:
    its callers' literals are the ids (`snap_download_model("org/x")`)."""

    name: str
    module: str  # the file it is defined in, as a dotted path ("pkg.utils")
    param: str
    position: int | None  # None: keyword-only
    kind: RepoKind
    family: str
    inner: str  # "snapshot_download() at utils.py:12"
    revision: Revision  # what the load gets when the caller passes no revision
    revision_param: str | None = None  # the helper's own parameter that becomes the revision


# A line that could hold (part of) a load: a call we know by name, or a hub string. A file
# with none is not parsed at all.
CANDIDATE = re.compile(
    r"\b(?:from_pretrained|pipeline|hf_hub_download|snapshot_download|load_dataset"
    r"|load_dataset_builder|SentenceTransformer|CrossEncoder|SparseEncoder|LLM"
    r"|FlagModel|BGEM3FlagModel|FlagReranker|FlagLLMReranker|FlagICLModel|from_finetuned"
    r"|get_tokenizer"
    r"|model_info|dataset_info|repo_info|get_safetensors_metadata)\s*\(|hf-hub:|hf_hub:|hf://"
)
# Hub metadata calls: they resolve a ref to a commit, so an unpinned one moves with it.
METADATA = frozenset({"model_info", "dataset_info", "repo_info", "get_safetensors_metadata"})
# FlagEmbedding's models take an id and no revision (FlagAutoModel.from_finetuned too): the pin
# is the locked snapshot's folder.
FLAG_EMBEDDING = frozenset({"FlagModel", "BGEM3FlagModel", "FlagReranker", "FlagLLMReranker",
                            "FlagICLModel"})


# Loaders imported under another name: `from huggingface_hub import hf_hub_download as dl`.
ALIASABLE = ("hf_hub_download", "snapshot_download", "pipeline", "load_dataset",
             "load_dataset_builder", "SentenceTransformer", "CrossEncoder", "SparseEncoder",
             "LLM", "model_info", "dataset_info", "repo_info", "get_safetensors_metadata")
_ALIAS = re.compile(r"\b(" + "|".join(ALIASABLE) + r")\s+as\s+([A-Za-z_]\w*)")


def candidate_lines(text: str, aliases: Iterable[str] = ()) -> list[int]:
    """1-based numbers of the lines a load could start on, in order."""
    names = [re.escape(a) for a in aliases]
    extra = re.compile(r"\b(?:" + "|".join(names) + r")\s*\(") if names else None
    return [n for n, line in enumerate(text.split("\n"), start=1)
            if CANDIDATE.search(line) or (extra is not None and extra.search(line))]


def import_aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> loader name, for loaders imported under another name."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.asname and alias.name in ALIASABLE:
                    aliases[alias.asname] = alias.name
    return aliases


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A file (or notebook cell) wlock could not read or parse: its loads are unseen."""

    path: str
    cell: int | None
    line: int
    col: int
    reason: str

    def __str__(self) -> str:
        place = self.path if self.cell is None else f"{self.path}:cell {self.cell}"
        return f"{place}:{self.line}: {self.reason}"


def scan(source: Source, loaders: Iterable[Loader] = ()) -> tuple[list[LoadSite],
                                                                  Unreadable | None]:
    """The load sites in `source` (with the project's own `loaders` too), and what kept it
    from being parsed, if anything."""
    sites, error, _ = scan_all(source, loaders)
    return sites, error


def scan_all(
    source: Source, loaders: Iterable[Loader] = (), external: Iterable[Wrapper] = (),
    module: str = "", constants: Iterable[Exported] = (),
) -> tuple[list[LoadSite], Unreadable | None, list[Wrapper]]:
    """scan(), also following helpers: the load sites (with the calls of this file's helpers
    and of the `external` ones it imports, and other files' `constants` it imports), the
    parse error, and the helpers it defines."""
    own = {loader.name: loader for loader in loaders}
    called = [w for w in external if f"{w.name}(" in source.text]
    named = [c for c in constants if c.name in source.text]
    maybe_aliased = {m.group(2) for m in _ALIAS.finditer(source.text)}
    lines = candidate_lines(source.text, maybe_aliased | set(own) | {w.name for w in called})
    if not lines:
        return [], None, []
    try:
        tree = ast.parse(source.text)
    except SyntaxError as e:
        return [], Unreadable(source.path, source.cell, e.lineno or 1, e.offset or 1,
                              f"cannot parse: {e.msg}"), []
    visitor = _Visitor(source, tree)
    imports = _imported_from(tree) if called or named else {}
    imported = {w.name: w for w in called if _same_module(imports.get(w.name), w.module)}
    visitor.constants = {**{c.name: c.value for c in named
                            if _same_module(imports.get(c.name), c.module)},
                         **visitor.constants}
    visitor.loaders = own
    if maybe_aliased:
        visitor.aliases = import_aliases(tree)
    _walk(tree, lines, visitor.visit_Call)
    defined = _find_wrappers(tree, visitor.sites, module or source.path)
    helpers = {**imported, **{w.name: w for w in defined}}
    if helpers:
        # A second, narrow walk: the calls of the helpers, each a load of its literal.
        visitor.wrappers = helpers
        _walk(tree, candidate_lines(source.text, helpers), visitor.visit_helper_call)
    visitor.sites.sort(key=lambda s: (s.line, s.col, s.param))
    return visitor.sites, None, defined


def _walk(tree: ast.Module, lines: list[int], visit: Callable[[ast.Call], None]) -> None:
    """Visit the calls of the subtrees that span one of `lines`: on the transformers source
    this skips most of every file (measured: the walk went from 13 s to under 1 s)."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Call):
            visit(node)
        for child in ast.iter_child_nodes(node):
            end = getattr(child, "end_lineno", None)
            if end is not None:
                start = child.lineno  # type: ignore[attr-defined]
                i = bisect.bisect_left(lines, start)
                if i == len(lines) or lines[i] > end:
                    continue
            stack.append(child)


def _find_wrappers(tree: ast.Module, sites: list[LoadSite], module: str) -> list[Wrapper]:
    """The functions that pass a parameter of theirs, unchanged, as a load's id."""
    # In the order they are written: a helper with several loads is described by its first.
    passed = sorted((s for s in sites if s.repo_id is None and s.expr
                     and s.expr.isidentifier() and not s.default_model),
                    key=lambda s: (s.line, s.col))
    if not passed:
        return []
    found: dict[str, Wrapper] = {}
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        positional = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
        if positional[:1] in (["self"], ["cls"]):
            continue  # methods: their callers are not matched by name
        names = positional + [a.arg for a in fn.args.kwonlyargs]
        defaults = {name: node.value if isinstance(node, ast.Constant)
                    and isinstance(node.value, str) else None
                    for name, node in parameter_defaults(fn).items()}
        end = fn.end_lineno or fn.lineno
        for site in passed:
            if not (fn.lineno <= site.line <= end and site.expr in names):
                continue
            assert site.expr is not None
            rev = site.revision
            revision_param = None
            if rev.kind == "wlock":
                continue  # wlock.revision(<the parameter>): pinned for every caller
            if rev.expr in names:  # the helper's own parameter (with or without a default)
                revision_param = rev.expr
                default = defaults.get(revision_param)
                rev = (Revision("missing") if default is None else Revision(
                    "commit" if _COMMIT.match(default) else "literal", default,
                    f"the default of {fn.name}()'s {revision_param}"))
            elif rev.kind == "dynamic":
                continue  # a revision from elsewhere: nothing to say about its callers
            found.setdefault(fn.name, Wrapper(
                name=fn.name, module=module, param=site.expr,
                position=positional.index(site.expr) if site.expr in positional else None,
                kind=site.repo_kind, family=site.family,
                inner=f"{site.call}() at {site.path.rsplit('/', 1)[-1]}:{site.line}",
                revision=rev, revision_param=revision_param))
    return list(found.values())


def _imported_from(tree: ast.Module) -> dict[str, str]:
    """Each name imported as itself (`from pkg.utils import load`, on one line or in
    parentheses over several), with the module it comes from."""
    return {alias.name: node.module or "" for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
            for alias in node.names if alias.asname in (None, alias.name)}


def _same_module(imported: str | None, defined: str) -> bool:
    """An import's module names the file that defines a helper or a constant: matched by
    the last part (`pkg.utils`, `.utils` and `utils` all name `src/pkg/utils.py`)."""
    return imported is not None and bool(imported) and (
        imported.rsplit(".", 1)[-1] == defined.rsplit(".", 1)[-1])


def _last_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Call):
        return _last_name(node.func)
    return None


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Call):
        return f"{_dotted(node.func)}()"
    return "…"


class _Visitor:
    def __init__(self, source: Source, tree: ast.Module) -> None:
        self.source = source
        self.lines = source.text.split("\n")
        self.sites: list[LoadSite] = []
        self.constants = _module_constants(tree)
        self.tree = tree
        self.vllm = "vllm" in source.text
        self._defaults: Defaults | None = None  # built on the first dynamic id
        self.wlock_modules: set[str] = set()  # names bound to the wlock module
        self.wlock_revision: set[str] = set()  # names bound to wlock.revision
        # variable -> (line, the wlock.revision call or None) of each assignment to it
        self._wlock_bindings: dict[str, list[tuple[int, ast.Call | None]]] | None = None
        self.aliases: dict[str, str] = {}  # local name -> loader name (`import … as …`)
        self.loaders: dict[str, Loader] = {}  # the project's own ([tool.wlock.lint] loaders)
        self.wrappers: dict[str, Wrapper] = {}  # helpers that pass a parameter as an id
        if "wlock" not in source.text:
            return  # walking a whole tree for imports costs more than parsing it
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == "wlock":
                        self.wlock_modules.add(alias.asname or "wlock")
            elif isinstance(node, ast.ImportFrom) and node.module == "wlock":
                for alias in node.names:
                    if alias.name == "revision":
                        self.wlock_revision.add(alias.asname or "revision")

    # -- helpers -----------------------------------------------------------------------------

    def _col(self, node: ast.expr) -> int:
        """ast counts UTF-8 bytes; people (and libcst) count characters."""
        line = self.lines[node.lineno - 1] if node.lineno - 1 < len(self.lines) else ""
        return len(line.encode()[: node.col_offset].decode(errors="replace")) + 1

    @staticmethod
    def _arg(call: ast.Call, position: int | None, *names: str) -> ast.expr | None:
        for kw in call.keywords:
            if kw.arg in names:
                return kw.value
        starred = any(isinstance(a, ast.Starred) for a in call.args)
        if position is not None and not starred and len(call.args) > position:
            return call.args[position]
        return None

    def _string(self, node: ast.expr | None) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name) and node.id in self.constants:
            return self.constants[node.id]
        return None

    def _default(self, node: ast.expr) -> tuple[str, str] | None:
        """The literal default behind a variable, and where it is (lint.defaults)."""
        if self._defaults is None:
            self._defaults = Defaults(self.tree)
        found = self._defaults.resolve(node, node.lineno)
        return (found.value, found.origin) if found else None

    def _repo(self, node: ast.expr | None) -> Repo:
        if node is None or (isinstance(node, ast.Constant) and node.value is None):
            return Repo("absent", None)
        text = self._string(node)
        if text is not None:
            return _literal_repo(text)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            return Repo("local", None)  # Path arithmetic
        if isinstance(node, ast.Call) and _last_name(node.func) in ("str", "fspath") and \
                len(node.args) == 1:
            node = node.args[0]
        if isinstance(node, ast.Call) and _last_name(node.func) == "snapshot_path" and \
                node.args and (named := self._string(node.args[0])) is not None:
            # wlock.snapshot_path("org/name"): the README's offline load, pinned by the
            # lock; still judged for what the lock must hold (WL104, WL108).
            return Repo("snapshot", named)
        if isinstance(node, ast.Call) and _last_name(node.func) in _LOCAL_CALLS:
            return Repo("local", None)
        if isinstance(node, ast.Call) and _last_name(node.func) in ("str", "fspath") and \
                len(node.args) == 1 and self._repo(node.args[0]).state == "local":
            # str(wlock.snapshot_path(id)): the README's offline load of a dataset.
            return Repo("local", None)
        if isinstance(node, ast.Constant):
            return Repo("local", None)  # bytes, numbers: not a repo
        default = self._default(node)
        if default is not None:
            state, repo_id, _, _ = _literal_repo(default[0])
            return Repo(state, repo_id, default[1], ast.unparse(node))
        return Repo("dynamic", None, None, ast.unparse(node))

    def _revision(self, call: ast.Call, param: str) -> Revision:
        node = self._arg(call, None, param)
        if node is None:
            if any(kw.arg is None for kw in call.keywords):
                return Revision("dynamic")  # it may come in **kwargs
            return Revision("missing")
        if isinstance(node, ast.Constant) and node.value is None:
            return Revision("missing")
        text = self._string(node)
        if text is not None:
            return Revision("commit" if _COMMIT.match(text) else "literal", text)
        if isinstance(node, ast.Call) and self._is_wlock_revision(node.func):
            named = self._string(node.args[0]) if node.args else None
            if named is None and node.args:
                return Revision("wlock", None, expr=ast.unparse(node.args[0]))
            return Revision("wlock", named) if named else Revision("dynamic")
        if isinstance(node, ast.Name) and (bound := self._bound_to_wlock(node)) is not None:
            # rev = wlock.revision("org/name") ... revision=rev: pinned through the lock.
            named = self._string(bound.args[0]) if bound.args else None
            return Revision("wlock", named) if named else Revision(
                "wlock", None, expr=ast.unparse(bound.args[0]) if bound.args else None)
        default = self._default(node)
        if default is not None:
            text, origin = default
            return Revision("commit" if _COMMIT.match(text) else "literal", text, origin,
                            expr=ast.unparse(node))
        return Revision("dynamic", expr=ast.unparse(node))

    def _bound_to_wlock(self, name: ast.Name) -> ast.Call | None:
        """The wlock.revision(...) call the variable `name` was last assigned before its use,
        anywhere in the file (a plain `x = wlock.revision(...)`); None when its last
        assignment before that line is anything else, or there is none."""
        if self._wlock_bindings is None:
            self._wlock_bindings = {}
            for node in ast.walk(self.tree):
                if isinstance(node, ast.Assign | ast.AnnAssign):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    for target in targets:
                        if isinstance(target, ast.Name):
                            value = node.value
                            call = value if isinstance(value, ast.Call) and \
                                self._is_wlock_revision(value.func) else None
                            self._wlock_bindings.setdefault(target.id, []).append(
                                (node.lineno, call))
        before = [(line, call) for line, call in self._wlock_bindings.get(name.id, [])
                  if line <= name.lineno]
        return max(before, key=lambda b: b[0])[1] if before else None

    def _is_wlock_revision(self, func: ast.expr) -> bool:
        if isinstance(func, ast.Name):
            return func.id in self.wlock_revision
        return (isinstance(func, ast.Attribute) and func.attr == "revision"
                and isinstance(func.value, ast.Name) and func.value.id in self.wlock_modules)

    def _add(
        self, call: ast.Call, family: str, repo: Repo, kind: RepoKind,
        param: str = "revision", *, default_model: bool = False,
        revision: Revision | None = None, config: str | None = None,
        split: str | None = None,
    ) -> None:
        state, repo_id, origin, expr = repo
        if state == "local" or (state == "absent" and not default_model):
            return
        if state == "snapshot":
            revision = Revision("wlock", repo_id)
        self.sites.append(LoadSite(
            path=self.source.path, cell=self.source.cell, line=call.lineno,
            col=self._col(call), end_line=call.end_lineno or call.lineno,
            call=_dotted(call.func), family=family, repo_id=repo_id, repo_kind=kind,
            param=param, revision=revision or self._revision(call, param),
            default_model=default_model, origin=origin, expr=expr, config=config, split=split,
        ))

    def _remote_code(self, call: ast.Call, family: str, repo: Repo) -> None:
        """The commit of the code a trust_remote_code load runs: transformers loads the
        repo's own code at `revision` when `code_revision` is not given, but code in another
        repo (`other/repo--module.Class`) at `code_revision` alone, `main` by default
        (get_class_from_dynamic_module). The judge, which knows from the lock where the
        code is, decides whether a `revision` pins it (`code_by_revision`)."""
        flag = self._arg(call, None, "trust_remote_code")
        if not (isinstance(flag, ast.Constant) and flag.value is True):
            return
        by_revision = (self._arg(call, None, "code_revision") is None
                       and self._arg(call, None, "revision") is not None)
        before = len(self.sites)
        self._add(call, family, repo, "model", "code_revision")
        if by_revision and len(self.sites) > before:
            self.sites[-1] = replace(self.sites[-1], code_by_revision=True)

    # -- the families ------------------------------------------------------------------------

    def visit_Call(self, node: ast.Call) -> None:
        name = _last_name(node.func)
        if isinstance(node.func, ast.Name) and name in self.aliases:
            name = self.aliases[name]
        receiver = _last_name(node.func.value) if isinstance(node.func, ast.Attribute) else None
        if name in self.loaders:
            own = self.loaders[name]
            own_kind: RepoKind = "dataset" if own.kind == "dataset" else "model"
            repo = self._repo(self._arg(node, own.position, own.id))
            if own.revision:
                self._add(node, "project", repo, own_kind, own.revision)
            else:
                self._add(node, "project (no revision)", repo, own_kind)
        elif name == "from_pretrained" and receiver is not None:
            self._from_pretrained(node, receiver)
        elif name == "pipeline":
            repo = self._repo(self._arg(node, 1, "model"))
            if repo[0] == "absent" and self._arg(node, 0, "task") is not None:
                self._add(node, "transformers", repo, "model", default_model=True)
            else:
                self._add(node, "transformers", repo, "model")
                self._remote_code(node, "transformers", repo)
        elif name in ("hf_hub_download", "snapshot_download"):
            repo_type = self._string(self._arg(node, None, "repo_type"))
            if repo_type != "space":
                kind: RepoKind = "dataset" if repo_type == "dataset" else "model"
                self._add(node, "huggingface_hub", self._repo(self._arg(node, 0, "repo_id")),
                          kind)
        elif name in ("load_dataset", "load_dataset_builder"):
            repo = self._repo(self._arg(node, 0, "path"))
            if repo[1] not in PACKAGED_BUILDERS:
                self._add(node, "datasets", repo, "dataset",
                          config=self._string(self._arg(node, 1, "name")),
                          split=self._string(self._arg(node, None, "split")))
        elif name in METADATA:
            repo_type = self._string(self._arg(node, None, "repo_type"))
            if repo_type != "space":
                meta_kind: RepoKind = ("dataset" if name == "dataset_info"
                                       or repo_type == "dataset" else "model")
                self._add(node, "huggingface_hub", self._repo(self._arg(node, 0, "repo_id")),
                          meta_kind)
        elif name in FLAG_EMBEDDING or (name == "from_finetuned"
                                        and (receiver or "").startswith("FlagAuto")):
            self._add(node, "FlagEmbedding",
                      self._repo(self._arg(node, 0, "model_name_or_path")), "model")
        elif name == "get_tokenizer" and self.vllm:
            # vLLM's (vllm.transformers_utils.tokenizer); open_clip's takes an "hf-hub:" string.
            self._add(node, "vllm", self._repo(self._arg(node, 0, "tokenizer_name")), "model")
        elif name in ("SentenceTransformer", "CrossEncoder", "SparseEncoder"):
            self._add(node, "sentence-transformers",
                      self._repo(self._arg(node, 0, "model_name_or_path", "model_name")),
                      "model")
        elif name == "LLM":
            repo = self._repo(self._arg(node, 0, "model"))
            self._add(node, "vllm", repo, "model")
            tokenizer = self._arg(node, None, "tokenizer")
            self._add(node, "vllm", self._repo(tokenizer) if tokenizer else repo, "model",
                      "tokenizer_revision")
        self._hub_strings(node)

    def visit_helper_call(self, node: ast.Call) -> None:
        """A call of a helper (Wrapper): a load of the id its caller passes."""
        if not isinstance(node.func, ast.Name | ast.Attribute):
            return
        helper = self.wrappers.get(_last_name(node.func) or "")
        if helper is None or (isinstance(node.func, ast.Attribute) and isinstance(
                node.func.value, ast.Name) and node.func.value.id in ("self", "cls")):
            return
        repo = self._repo(self._arg(node, helper.position, helper.param))
        state, repo_id, origin, expr = repo
        if state not in ("literal",):
            return  # dynamic here too: the warning inside the helper says it
        param, revision = "revision", helper.revision
        if helper.revision_param is not None:
            param = helper.revision_param
            if self._arg(node, None, param) is not None:
                revision = self._revision(node, param)
        family = helper.family if helper.revision_param else "helper (no revision)"
        self.sites.append(LoadSite(
            path=self.source.path, cell=self.source.cell, line=node.lineno,
            col=self._col(node), end_line=node.end_lineno or node.lineno,
            call=_dotted(node.func), family=family, repo_id=repo_id, repo_kind=helper.kind,
            param=param, revision=revision, origin=origin, expr=expr,
            via=f"through {helper.inner}", helper_param=helper.param,
        ))

    def _from_pretrained(self, node: ast.Call, receiver: str) -> None:
        if receiver.startswith("PeftModel"):
            family, repo = "peft", self._repo(self._arg(node, 1, "model_id"))
        else:
            repo = self._repo(self._arg(
                node, 0, "pretrained_model_name_or_path", "model_id", "identifier"
            ))
            family = (
                "peft" if receiver.startswith("AutoPeftModel")
                else "diffusers" if receiver.endswith("Pipeline")
                else "tokenizers" if receiver == "Tokenizer"
                else "transformers"
            )
        self._add(node, family, repo, "model")
        self._remote_code(node, family, repo)

    def _hub_strings(self, node: ast.Call) -> None:
        """`"hf-hub:org/name@rev"` (timm, open_clip; timm's older `hf_hub:` too) and
        `"hf://…@rev/…"` (fsspec) arguments, also built with `+` or an f-string as long as
        the repo id itself is written out."""
        values = [*node.args, *(kw.value for kw in node.keywords)]
        for value in values:
            leading = _leading_text(value, self.constants)
            if leading is None:
                continue
            text, complete = leading
            kind: RepoKind = "model"
            if text.startswith(("hf-hub:", "hf_hub:")):
                spec, family = text[len("hf-hub:"):], "timm/open_clip"
            elif text.startswith("hf://"):
                spec, family = text[len("hf://"):], "hf://"
                if spec.startswith("datasets/"):
                    kind, spec = "dataset", spec[len("datasets/"):]
                elif spec.startswith(("spaces/", "buckets/")):
                    continue
                elif spec.startswith("models/"):
                    spec = spec[len("models/"):]
            else:
                continue
            # The id ends at "@" or at the "/" after "org/name"; written out only if that end
            # is in the literal text (or the text is all literal).
            head = spec.split("@", 1)[0]
            parts = head.split("/")
            if family == "hf://":
                ended = "@" in spec or len(parts) > 2 or complete
                head = "/".join(parts[:2])
            else:
                ended = "@" in spec or complete
            if not ended or not _REPO_ID.match(head):
                continue
            revision = Revision("missing")
            if "@" in spec:
                rev = spec.split("@", 1)[1]
                cut = rev.split("/", 1)[0]
                if "/" not in rev and not complete:
                    revision = Revision("dynamic")  # f"…@{rev}"
                elif cut:
                    revision = Revision("commit" if _COMMIT.match(cut) else "literal", cut)
            self.sites.append(LoadSite(
                path=self.source.path, cell=self.source.cell, line=value.lineno,
                col=self._col(value), end_line=value.end_lineno or value.lineno,
                call=_dotted(node.func), family=family, repo_id=head, repo_kind=kind,
                param="@", revision=revision,
                literal=isinstance(value, ast.Constant),
            ))


def _leading_text(node: ast.expr, constants: dict[str, str]) -> tuple[str, bool] | None:
    """The literal text a string expression starts with, and whether that is all of it:
    a literal or a module constant, an f-string (up to its first field that is not a module
    constant), or `+` of those."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value, True
    if isinstance(node, ast.Name) and node.id in constants:
        return constants[node.id], True
    if isinstance(node, ast.JoinedStr):
        text = ""
        for part in node.values:
            if isinstance(part, ast.FormattedValue) and part.format_spec is None and (
                    isinstance(part.value, ast.Name) and part.value.id in constants):
                text += constants[part.value.id]
                continue
            if not (isinstance(part, ast.Constant) and isinstance(part.value, str)):
                return (text, False) if text else None
            text += part.value
        return text, True
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left = _leading_text(node.left, constants)
        if left is None or not left[1]:
            return left
        right = _leading_text(node.right, constants)
        if right is None:
            return left[0], False
        return left[0] + right[0], right[1]
    return None


def _literal_repo(text: str) -> Repo:
    if text.startswith((".", "/", "~")) or "\\" in text or not _REPO_ID.match(text):
        return Repo("local", None)
    return Repo("literal", text)


def _module_constants(tree: ast.Module) -> dict[str, str]:
    """Module-level names bound exactly once to a string literal."""
    seen: dict[str, int] = {}
    values: dict[str, str] = {}
    for stmt in tree.body:
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(stmt, ast.Assign):
            targets, value = stmt.targets, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            targets, value = [stmt.target], stmt.value
        for target in targets:
            if isinstance(target, ast.Name):
                seen[target.id] = seen.get(target.id, 0) + 1
                if isinstance(value, ast.Constant) and isinstance(value.value, str):
                    values[target.id] = value.value
    return {k: v for k, v in values.items() if seen[k] == 1}
