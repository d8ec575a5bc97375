"""Lint files: read, scan, judge, suppress. Returns a report; the CLI picks the exit code."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from wlock.lint.config import LintSettings
from wlock.lint.judge import Finding, judge, suppressed
from wlock.lint.scanner import LoadSite, scan
from wlock.lint.sources import iter_files, read_sources
from wlock.models import Lock

# A file that names none of these cannot load from the Hub in a way we recognise: skip the parse.
TRIGGERS = ("from_pretrained", "pipeline", "hf_hub_download", "snapshot_download",
            "load_dataset", "SentenceTransformer", "CrossEncoder", "LLM", "hf-hub:", "hf://")


@dataclass(frozen=True, slots=True)
class LintReport:
    findings: tuple[Finding, ...]
    files: int
    sites: int
    errors: tuple[str, ...]  # files that could not be read or parsed
    seconds: float

    @property
    def failed(self) -> bool:
        return any(f.severity == "error" for f in self.findings)


def lint_paths(
    paths: Iterable[Path], lock: Lock | None, settings: LintSettings, *, root: Path | None = None
) -> LintReport:
    started = time.monotonic()
    findings: list[Finding] = []
    errors: list[str] = []
    files = sites = 0
    for path in iter_files(paths, settings.exclude):
        files += 1
        display = os.path.relpath(path, root) if root else str(path)
        try:
            raw = path.read_text(encoding="utf-8", errors="replace")
        except OSError as e:
            errors.append(f"{display}: cannot read: {e.strerror}")
            continue
        if not any(t in raw for t in TRIGGERS):
            continue
        try:
            sources = read_sources(path, display)
        except ValueError as e:  # a notebook that is not JSON
            errors.append(f"{display}: cannot read notebook: {e}")
            continue
        for source in sources:
            found, error = scan(source)
            if error:
                errors.append(error)
            sites += len(found)
            lines = source.text.split("\n")
            findings.extend(_judged(found, lines, lock, settings))
    findings.sort(key=lambda f: (f.path, f.cell or 0, f.line, f.col, f.code))
    return LintReport(findings=tuple(findings), files=files, sites=sites, errors=tuple(errors),
                      seconds=time.monotonic() - started)


def _judged(
    found: list[LoadSite], lines: list[str], lock: Lock | None, settings: LintSettings
) -> Iterable[Finding]:
    for site in found:
        finding = judge(site, lock, settings)
        if finding is not None and not suppressed(lines, site, finding.code):
            yield finding
