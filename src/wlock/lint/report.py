"""Renderings of a LintReport: text for people, json for scripts, github workflow
annotations, and SARIF 2.1.0 for code scanning."""

from __future__ import annotations

import json
from typing import Any

from wlock.lint.checker import LintReport
from wlock.lint.config import CODES
from wlock.version import __version__

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def render(report: LintReport, fmt: str) -> str:
    return {"text": _text, "json": _json, "github": _github, "sarif": _sarif}[fmt](report)


def _text(report: LintReport) -> str:
    return "".join(f"{f.where}: {f.code} {f.message}\n" for f in report.findings)


def _json(report: LintReport) -> str:
    return json.dumps(as_dict(report), indent=2) + "\n"


def as_dict(report: LintReport) -> dict[str, Any]:
    """The report as data: what `--format json` prints."""
    return {
        "files": report.files,
        "loads": report.sites,
        "failed": report.failed,
        "errors": list(report.errors),
        "findings": [
            {"code": f.code, "severity": f.severity, "path": f.path, "cell": f.cell,
             "line": f.line, "col": f.col, "call": f.call, "repo": f.repo_id,
             "param": f.param, "message": f.message, "fix": f.fix, "origin": f.origin}
            for f in report.findings
        ],
    }


def _escape(text: str, *, prop: bool = False) -> str:
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if prop else text


def _github(report: LintReport) -> str:
    out = []
    for f in report.findings:
        level = "error" if f.severity == "error" else "warning"
        cell = f" (cell {f.cell})" if f.cell else ""
        out.append(
            f"::{level} file={_escape(f.path, prop=True)},line={f.line},col={f.col},"
            f"title={_escape(f'wlock {f.code}', prop=True)}::{_escape(f.message + cell)}\n"
        )
    return "".join(out)


def _sarif(report: LintReport) -> str:
    rules = [
        {"id": code, "name": code, "shortDescription": {"text": text}}
        for code, text in CODES.items()
    ]
    results: list[dict[str, Any]] = []
    for f in report.findings:
        message = f.message + (f" (notebook cell {f.cell})" if f.cell else "")
        results.append({
            "ruleId": f.code,
            "ruleIndex": list(CODES).index(f.code),
            "level": "error" if f.severity == "error" else "warning",
            "message": {"text": message},
            "locations": [{"physicalLocation": {
                "artifactLocation": {"uri": f.path},
                "region": {"startLine": f.line, "startColumn": f.col},
            }}],
        })
    return json.dumps({
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "wlock", "version": __version__, "rules": rules}},
            "results": results,
        }],
    }, indent=2) + "\n"
