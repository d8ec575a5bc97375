"""The literal one hop behind a dynamic id: the default a user gets when they pass nothing.

Most real loads take their id from a variable (`from_pretrained(args.model)`), yet most of
those variables have a literal default close by, in the same file:

    parser.add_argument("--model", default="org/x")          args.model
    model_name_or_path: str = field(default="org/x")         model_args.model_name_or_path
    class Meta: model_id = "org/x"                           self.meta.model_id
    @click.option("--model-name", default="org/x")           model_name   (in that function)
    def main(model="org/x"): ...                             model        (in that function)
    os.environ.get("MODEL", "org/x") / os.getenv(...)        inline, or a module constant

`Defaults.resolve(expr, line)` returns that literal and where it was found, or None. A name
defined twice with different defaults is ambiguous and not resolved.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Resolved:
    value: str
    origin: str  # "the default of --model (line 12)"


_AMBIGUOUS = Resolved("", "")


class Defaults:
    def __init__(self, tree: ast.Module) -> None:
        self._options: dict[str, Resolved] = {}  # argparse dest -> default
        self._fields: dict[str, Resolved] = {}  # class field -> default
        self._env: dict[str, Resolved] = {}  # module name bound to an environment default
        # (first line, last line, parameter -> default) per function, innermost last.
        self._functions: list[tuple[int, int, dict[str, Resolved]]] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _name(node.func) == "add_argument":
                self._add_argument(node)
            elif isinstance(node, ast.ClassDef):
                self._class_fields(node)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                self._function(node)
        for stmt in tree.body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(
                    stmt.targets[0], ast.Name):
                found = env_default(stmt.value)
                if found is not None:
                    _put(self._env, stmt.targets[0].id, found)
        self._functions.sort(key=lambda f: (f[0], -f[1]))

    def resolve(self, node: ast.expr, line: int) -> Resolved | None:
        found: Resolved | None = None
        if isinstance(node, ast.Attribute):
            found = self._options.get(node.attr) or self._fields.get(node.attr)
        elif isinstance(node, ast.Name):
            for start, end, params in self._functions:  # innermost enclosing one wins
                if start <= line <= end and node.id in params:
                    found = params[node.id]
            found = found or self._env.get(node.id)
        else:
            found = env_default(node)
        return None if found is None or found is _AMBIGUOUS else found

    # -- what declares a default -------------------------------------------------------------

    def _add_argument(self, call: ast.Call) -> None:
        flags = [a.value for a in call.args
                 if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        default = _keyword_string(call, "default")
        if not flags or default is None:
            return
        dest = _keyword_string(call, "dest") or _dest(flags)
        shown = next((f for f in flags if f.startswith("--")), flags[0])
        _put(self._options, dest, Resolved(default, f"the default of {shown}, "
                                           f"line {call.lineno}"))

    def _class_fields(self, cls: ast.ClassDef) -> None:
        """Dataclass fields (`name: str = field(default=...)`) and plain class attributes
        (`model_id = "org/x"`, metadata a class keeps and passes on)."""
        for stmt in cls.body:
            target: ast.expr
            if isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
                target, value_node = stmt.target, stmt.value
            elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                target, value_node = stmt.targets[0], stmt.value
            else:
                continue
            if not isinstance(target, ast.Name):
                continue
            value = _string(value_node)
            if value is None and isinstance(value_node, ast.Call) and _name(
                    value_node.func) == "field":
                value = _keyword_string(value_node, "default")
            if value is not None:
                _put(self._fields, target.id, Resolved(
                    value, f"the default of {cls.name}.{target.id}, line {stmt.lineno}"))

    def _function(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        params: dict[str, Resolved] = {}
        for name, default in parameter_defaults(fn).items():
            value = _string(default)
            if value is not None:
                params[name] = Resolved(value, f"the default of parameter {name}, "
                                        f"line {default.lineno}")
        for decorator in fn.decorator_list:  # click.option / typer-style option decorators
            if isinstance(decorator, ast.Call) and _name(decorator.func) == "option":
                flags = [a.value for a in decorator.args
                         if isinstance(a, ast.Constant) and isinstance(a.value, str)]
                option_default = _keyword_string(decorator, "default")
                if flags and option_default is not None:
                    named = [f for f in flags if not f.startswith("-")]
                    param = named[0] if named else _dest(flags)
                    shown = next((f for f in flags if f.startswith("--")), flags[0])
                    params[param] = Resolved(option_default, f"the default of {shown}, "
                                             f"line {decorator.lineno}")
        if params:
            self._functions.append((fn.lineno, fn.end_lineno or fn.lineno, params))


def parameter_defaults(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, ast.expr]:
    """Each parameter that has a default, with it (positional and keyword-only)."""
    args = fn.args
    positional = [*args.posonlyargs, *args.args]
    pairs = [*zip(positional[len(positional) - len(args.defaults):], args.defaults,
                  strict=True),
             *zip(args.kwonlyargs, args.kw_defaults, strict=True)]
    return {arg.arg: default for arg, default in pairs if default is not None}


def env_default(node: ast.expr) -> Resolved | None:
    """`os.environ.get("K", "d")`, `os.getenv("K", "d")`, `environ.get(...)`: "d"."""
    if not (isinstance(node, ast.Call) and len(node.args) >= 2):
        return None
    func = node.func
    getter = (isinstance(func, ast.Attribute) and (
        func.attr == "getenv" or (func.attr == "get" and _name(func.value) == "environ")))
    key, value = _string(node.args[0]), _string(node.args[1])
    if not getter or key is None or value is None:
        return None
    return Resolved(value, f"the default of ${key}, line {node.lineno}")


def _put(table: dict[str, Resolved], key: str, found: Resolved) -> None:
    known = table.get(key)
    table[key] = found if known is None or known.value == found.value else _AMBIGUOUS


def _dest(flags: list[str]) -> str:
    """argparse's rule: the first long option, else the first; dashes become underscores."""
    chosen = next((f for f in flags if f.startswith("--")), flags[0])
    return chosen.lstrip("-").replace("-", "_")


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _string(node: ast.expr) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _keyword_string(call: ast.Call, name: str) -> str | None:
    return next((_string(kw.value) for kw in call.keywords if kw.arg == name), None)
