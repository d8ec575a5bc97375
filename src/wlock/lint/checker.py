"""Lint files: read, scan, judge, suppress. Returns a report; the CLI picks the exit code."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from wlock.lint.config import LintSettings, Loader
from wlock.lint.judge import Finding, judge, suppressed
from wlock.lint.scanner import (
    Exported,
    LoadSite,
    Unreadable,
    Wrapper,
    exported_constants,
    scan_all,
)
from wlock.lint.sources import Source, iter_files, mask_ipython_lines, read_sources
from wlock.models import Lock

# A file that names none of these cannot load from the Hub in a way we recognise: skip the parse.
TRIGGERS = ("from_pretrained", "pipeline", "hf_hub_download", "snapshot_download",
            "load_dataset", "SentenceTransformer", "CrossEncoder", "SparseEncoder", "LLM",
            "hf-hub:", "hf_hub:", "hf://", "Flag", "get_tokenizer", "model_info",
            "dataset_info", "repo_info", "get_safetensors_metadata")
PARALLEL_FROM = 200  # files; below this, starting workers costs more than it saves


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
    paths: Iterable[Path], lock: Lock | None, settings: LintSettings, *, root: Path | None = None,
    python: str | None = None,
) -> LintReport:
    """Scan every Python file and notebook under `paths`; judge each load against `lock`.
    `python`: the project's interpreter; a file the running one cannot parse is parsed
    again by it when it is newer (code written for 3.12 or later)."""
    started = time.monotonic()
    files = [(path, os.path.relpath(path, root) if root else str(path))
             for path in iter_files(paths, settings.exclude)]
    findings: list[Finding] = []
    errors: list[str] = []
    sites = 0
    results = list(_scan_all(files, settings.loaders, (), ()))
    helpers = tuple(w for result in results for w in result[3])
    constants = tuple(c for result in results for c in result[4])
    if helpers or constants:
        # What other files of the project export (helpers that pass their parameter as an
        # id, repo ids and commits in module constants): the files that import one are
        # scanned again, following it to the literal.
        names = tuple({w.name for w in helpers} | {c.name for c in constants})
        again = [i for i, (path, _) in enumerate(files) if _mentions(path, names)]
        redone = _scan_all([files[i] for i in again], settings.loaders, helpers, constants)
        for i, result in zip(again, redone, strict=True):
            results[i] = result
    unparsed = [i for i, result in enumerate(results)
                if any(e.reason.startswith("cannot parse") for e in result[2])]
    newer = newer_python(python) if unparsed and python else None
    if newer is not None:
        helpers = tuple(w for result in results for w in result[3])
        constants = tuple(c for result in results for c in result[4])
        parsed = scan_with(newer[0], [files[i] for i in unparsed], settings.loaders, helpers,
                           constants)
        for i, result in zip(unparsed, parsed or [], strict=False):
            results[i] = result
        if parsed is None:
            for i in unparsed:  # the interpreter could not run the scan: say which
                results[i][2][:] = [replace(e, reason=f"{e.reason} (nor could {newer[1]} "
                                              "run wlock's parser)") for e in results[i][2]]
    for found, lines_by_cell, file_errors, _, _ in results:
        for problem in file_errors:
            errors.append(str(problem))
            # A file wlock cannot parse hides its loads: an error (WL001), not a silent pass.
            level = settings.level("WL001")
            if level != "off":
                findings.append(Finding(
                    code="WL001", severity=level, path=problem.path, cell=problem.cell,
                    line=problem.line, col=problem.col, call="", repo_id=None, param="",
                    message=f"{problem.reason}; wlock cannot see the Hub loads in it. Fix the "
                    "syntax, or exclude the file in [tool.wlock.lint]", fix=None))
        sites += len(found)
        for site in found:
            finding = judge(site, lock, settings)
            if finding is not None and not suppressed(lines_by_cell[site.cell], site,
                                                      finding.code):
                findings.append(finding)
    findings.sort(key=lambda f: (f.path, f.cell or 0, f.line, f.col, f.code))
    return LintReport(findings=tuple(findings), files=len(files), sites=sites,
                      errors=tuple(errors), seconds=time.monotonic() - started)


ScanResult = tuple[list[LoadSite], dict[int | None, list[str]], list[Unreadable],
                   list[Wrapper], list[Exported]]


def newer_python(python: str) -> tuple[str, str] | None:
    """(`python`, "Python 3.N") when that interpreter is newer than the running one (its
    grammar reads what ours cannot), else None."""
    import subprocess
    import sys

    try:
        done = subprocess.run([python, "-c", "import sys; print(*sys.version_info[:2])"],
                              capture_output=True, text=True, timeout=30, check=False,
                              stdin=subprocess.DEVNULL)
        major, minor = (int(n) for n in done.stdout.split())
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None
    if (major, minor) <= sys.version_info[:2]:
        return None
    return python, f"Python {major}.{minor}"


# Run by the project's interpreter: wlock's linter (the standard library only) scans the files
# it is handed, as this process would, with that interpreter's own `ast`.
_CHILD = """
import pickle, sys
sys.path.insert(0, sys.argv[1])
from wlock.lint.checker import scan_file
args = pickle.load(sys.stdin.buffer)
pickle.dump([scan_file(*a) for a in args], sys.stdout.buffer, protocol=4)
"""


def scan_with(python: str, files: list[tuple[Path, str]], loaders: tuple[Loader, ...],
              helpers: tuple[Wrapper, ...], constants: tuple[Exported, ...],
              ) -> list[ScanResult] | None:
    """`files` scanned by another interpreter (each as scan_file does here); None when it
    cannot run the scan (older than wlock's own code, or broken)."""
    import pickle
    import subprocess
    import tempfile

    package = Path(__file__).resolve().parents[1]  # the wlock package: stdlib-only here
    with tempfile.TemporaryDirectory(prefix="wlock-lint-") as only:
        # Only wlock on the path, not the site-packages it is installed in (built for this
        # interpreter).
        (Path(only) / "wlock").symlink_to(package, target_is_directory=True)
        given = pickle.dumps([(path, display, loaders, helpers, constants)
                              for path, display in files], protocol=4)
        try:
            done = subprocess.run([python, "-I", "-B", "-c", _CHILD, only], input=given,
                                  capture_output=True, timeout=600, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
    if done.returncode != 0:
        return None
    try:
        results: list[ScanResult] = pickle.loads(done.stdout)  # noqa: S301 - our own child
    except (pickle.UnpicklingError, EOFError, ValueError):
        return None
    return results


def _mentions(path: Path, names: tuple[str, ...]) -> bool:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return "import" in text and any(name in text for name in names)


def scan_file(path: Path, display: str, loaders: tuple[Loader, ...] = (),
              helpers: tuple[Wrapper, ...] = (),
              constants: tuple[Exported, ...] = ()) -> ScanResult:
    """Sites of one file, each source's lines (for suppression comments), errors, and what
    it exports (helpers it defines, repo ids and commits in module constants). `helpers`
    and `constants`: other files', followed where this one imports them."""
    try:
        raw = path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        return [], {}, [Unreadable(display, None, 1, 1, f"cannot read: {e.strerror}")], [], []
    module = display.removesuffix(".py").replace(os.sep, ".").lstrip(".")
    exported = exported_constants(raw, module) if path.suffix == ".py" else []
    if (not any(t in raw for t in TRIGGERS) and not any(x.name in raw for x in loaders)
            and not any(f"{w.name}(" in raw for w in helpers)):
        return [], {}, [], [], exported
    try:
        sources = read_sources(path, display) if path.suffix == ".ipynb" else [
            Source(display, raw)
        ]
    except ValueError as e:  # a notebook that is not JSON
        return [], {}, [Unreadable(display, None, 1, 1,
                                   f"cannot read the notebook: {e}")], [], []
    found: list[LoadSite] = []
    lines: dict[int | None, list[str]] = {}
    errors: list[Unreadable] = []
    defined: list[Wrapper] = []
    for source in sources:
        sites, error, wrappers = scan_all(source, loaders, helpers, module, constants)
        if error and path.suffix == ".py" and (masked := mask_ipython_lines(raw)):
            # A script exported from a notebook (jupytext, Colab's "download .py") keeps its
            # `!pip install` and `%magic` lines: blanked as in a notebook (nbqa, ruff), the
            # rest is checked; a file that still does not parse is reported as before.
            source = Source(display, masked)
            sites, error, wrappers = scan_all(source, loaders, helpers, module, constants)
        defined.extend(wrappers)
        if error:
            errors.append(error)
        if sites:
            found.extend(sites)
            lines[source.cell] = source.text.split("\n")
    return found, lines, errors, defined, exported


def _scan_all(files: list[tuple[Path, str]], loaders: tuple[Loader, ...],
              helpers: tuple[Wrapper, ...], constants: tuple[Exported, ...],
              ) -> Iterable[ScanResult]:
    """Scan in worker processes when there is enough to share: parsing is CPU-bound and
    holds the GIL (the transformers source, 2,900 files, takes 11 s of `ast.parse`)."""
    workers = min(os.cpu_count() or 1, 8)
    if len(files) < PARALLEL_FROM or workers < 2 or not hasattr(os, "fork"):
        return (scan_file(path, display, loaders, helpers, constants)
                for path, display in files)
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # fork: the linter runs no threads, and forked workers need no re-import of __main__.
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))
    with pool:
        paths, displays = zip(*files, strict=True)
        return list(pool.map(scan_file, paths, displays, [loaders] * len(paths),
                             [helpers] * len(paths), [constants] * len(paths), chunksize=16))
