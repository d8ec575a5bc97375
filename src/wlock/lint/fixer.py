"""`wlock lint --fix`: write the locked commit where a finding says which one, keeping the
file's formatting (libcst). A pin that is not in weights.lock is never invented: findings
without a locked commit are left for a person."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from wlock.atomic import write_text_atomic
from wlock.lint.judge import FOLDER_FIX, Finding
from wlock.lint.sources import mask_ipython_lines, mask_magics, unmask_magics

FIXABLE = frozenset({"WL101", "WL102", "WL103", "WL105"})


def fix_findings(findings: Iterable[Finding], root: Path) -> tuple[int, int]:
    """Apply every fixable finding. Returns (fixes applied, files changed)."""
    by_file: dict[str, list[Finding]] = defaultdict(list)
    for f in findings:
        if f.code in FIXABLE and f.fix:
            by_file[f.path].append(f)
    applied = changed = 0
    for display, items in by_file.items():
        path = root / display
        if path.suffix == ".ipynb":
            n = _fix_notebook(path, items)
        else:
            text = path.read_text(encoding="utf-8")
            masked = mask_ipython_lines(text)  # a script exported from a notebook
            if masked is not None:
                new, n = fix_source(masked, items)
                new = unmask_magics(new)
            else:
                new, n = fix_source(text, items)
            if n:
                write_text_atomic(path, new)
        applied += n
        changed += bool(n)
    return applied, changed


def _fix_notebook(path: Path, items: list[Finding]) -> int:
    data = json.loads(path.read_text(encoding="utf-8"))
    by_cell: dict[int, list[Finding]] = defaultdict(list)
    for f in items:
        if f.cell is not None:
            by_cell[f.cell].append(f)
    applied = 0
    for index, cell in enumerate(data.get("cells", []), start=1):
        if index not in by_cell:
            continue
        source = cell.get("source", "")
        text = "".join(source) if isinstance(source, list) else source
        new, n = fix_source(mask_magics(text), by_cell[index])
        if n:
            new = unmask_magics(new)
            cell["source"] = new.splitlines(keepends=True) if isinstance(source, list) else new
            applied += n
    if applied:
        # nbformat's own layout: one-space indent, non-ASCII kept, a final newline.
        write_text_atomic(path, json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    return applied


def fix_source(text: str, findings: list[Finding]) -> tuple[str, int]:
    """The source with each finding's locked commit written in; and how many were applied."""
    import libcst as cst
    from libcst.metadata import MetadataWrapper, PositionProvider

    # One call can carry several findings (vLLM: revision and tokenizer_revision).
    wanted: dict[tuple[int, int], list[Finding]] = defaultdict(list)
    for f in findings:
        wanted[(f.line, f.col - 1)].append(f)
    applied = 0

    class Pin(cst.CSTTransformer):
        METADATA_DEPENDENCIES = (PositionProvider,)

        def _findings(self, node: cst.CSTNode) -> list[Finding]:
            pos = self.get_metadata(PositionProvider, node).start
            return wanted.get((pos.line, pos.column), [])

        def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
            nonlocal applied
            # `HfApi().hf_hub_download(…)` and `HfApi()` start at the same place: the name
            # tells them apart.
            name = _dotted(original.func)
            pinned: cst.BaseExpression = updated
            for finding in self._findings(original):
                if finding.param == "path" and finding.fix and finding.call == name:
                    pinned = _set_path(pinned)
                    applied += 1
                    needs_import[0] = True
                elif finding.param != "@" and finding.fix and finding.call == name:
                    pinned = _set_keyword(pinned, finding.param, finding.fix)
                    applied += 1
                    needs_import[0] |= finding.fix.startswith("wlock.")
            return pinned

        def leave_SimpleString(
            self, original: cst.SimpleString, updated: cst.SimpleString
        ) -> cst.BaseExpression:
            nonlocal applied
            finding = next((f for f in self._findings(original) if f.param == "@"), None)
            if finding is None or finding.fix is None:
                return updated
            value = updated.evaluated_value
            if not isinstance(value, str) or finding.repo_id is None:
                return updated
            applied += 1
            quote = updated.quote
            return updated.with_changes(
                value=f"{updated.prefix}{quote}"
                f"{_pin_string(value, finding.repo_id, finding.fix)}{quote}"
            )

    needs_import = [False]  # a fix wrote wlock.snapshot_path(...) or wlock.revision(...)
    module = MetadataWrapper(cst.parse_module(text)).visit(Pin())
    if needs_import[0] and not _imports_wlock(module):
        module = _with_import(module)
    return module.code, applied


def _set_path(call: Any) -> Any:
    """`load_dataset("org/name", revision=...)` -> `load_dataset(str(wlock.snapshot_path(
    "org/name")))`: the id (first argument, or `path=`) wrapped as the locked commit's folder
    (judge.FOLDER_FIX), as written (a constant stays a constant), and the revision, which
    does not apply to a folder, removed."""
    import libcst as cst

    args = []
    replaced = False
    for i, arg in enumerate(call.args):
        if arg.keyword is not None and arg.keyword.value == "revision":
            continue
        if not replaced and ((arg.keyword is None and i == 0) or (
                arg.keyword is not None and arg.keyword.value == "path")):
            written = cst.Module([]).code_for_node(arg.value)
            arg = arg.with_changes(value=cst.parse_expression(f"{FOLDER_FIX}{written}))"))
            replaced = True
        args.append(arg)
    if not replaced:
        return call
    if args and call.args and args[-1] is not call.args[-1]:
        args[-1] = args[-1].with_changes(comma=call.args[-1].comma)
    return call.with_changes(args=args)


def _imports_wlock(module: Any) -> bool:
    import libcst as cst

    for statement in module.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if isinstance(small, cst.Import) and any(
                    isinstance(a.name, cst.Name) and a.name.value == "wlock" and a.asname is None
                    for a in small.names):
                return True
    return False


def _with_import(module: Any) -> Any:
    """`import wlock` after the module's last top-level import (or at its top)."""
    import libcst as cst

    body = list(module.body)
    at = 0
    for i, statement in enumerate(body):
        if isinstance(statement, cst.SimpleStatementLine) and any(
                isinstance(s, cst.Import | cst.ImportFrom) for s in statement.body):
            at = i + 1
    body.insert(at, cst.parse_statement("import wlock\n"))
    return module.with_changes(body=body)


def _pin_string(value: str, repo_id: str, commit: str) -> str:
    """`hf-hub:org/name[@rev]` or `hf://[datasets/]org/name[@rev]/path` with @commit."""
    start = value.index(repo_id) + len(repo_id)
    rest = value[start:]
    if rest.startswith("@"):
        end = rest.find("/")
        rest = rest[end:] if end >= 0 else ""
    return f"{value[:start]}@{commit}{rest}"


def _set_keyword(call: Any, name: str, pin: str) -> Any:
    """`name=pin` in `call`: the locked commit as a string, or `wlock.revision(...)`."""
    import libcst as cst

    value = cst.parse_expression(pin) if pin.startswith("wlock.") else \
        cst.SimpleString(f'"{pin}"')
    args = list(call.args)
    for i, arg in enumerate(args):
        if arg.keyword is not None and arg.keyword.value == name:
            args[i] = arg.with_changes(value=value)
            return call.with_changes(args=args)
    new = cst.Arg(
        keyword=cst.Name(name), value=value,
        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                              whitespace_after=cst.SimpleWhitespace("")),
    )
    if args:
        last = args[-1]
        comma = last.comma
        indent = call.whitespace_before_args
        if isinstance(comma, cst.Comma) and isinstance(comma.whitespace_after,
                                                       cst.ParenthesizedWhitespace):
            # One argument per line with a trailing comma: the new one goes on its own line.
            args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=indent))
            new = new.with_changes(comma=comma)
        elif isinstance(last.whitespace_after_arg, cst.ParenthesizedWhitespace):
            # The closing parenthesis on its own line, no trailing comma: keep it there.
            if not isinstance(indent, cst.ParenthesizedWhitespace):
                indent = cst.SimpleWhitespace(" ")
            args[-1] = last.with_changes(whitespace_after_arg=cst.SimpleWhitespace(""),
                                         comma=cst.Comma(whitespace_after=indent))
            new = new.with_changes(whitespace_after_arg=last.whitespace_after_arg)
    args.append(new)
    return call.with_changes(args=args)


def _dotted(node: Any) -> str:
    """The callee as the scanner names it: `a.b.c`, with `()` for a call in the chain."""
    import libcst as cst

    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return f"{_dotted(node.value)}.{node.attr.value}"
    if isinstance(node, cst.Call):
        return f"{_dotted(node.func)}()"
    return "…"
