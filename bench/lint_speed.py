"""`wlock lint` on a large real tree (the transformers package from PyPI), beside bandit's
B615 (huggingface_unsafe_download) on the same tree.

    python bench/lint_speed.py [--wheel PATH] [--runs 3]

Downloads the transformers wheel with pip unless --wheel is given (no install: the source is
only read), unpacks it, and times both tools over the same .py files. Needs bandit >= 1.8.3
(`pip install bandit`, in the `bench` extra).

It also judges the tree a second time in this process with the one-hop defaults switched
off (lint.defaults), and reports what became of the loads that were dynamic (WL200) without
them: judged by a literal default (a finding naming it, or pinned), a local path by default
(no longer a load), or still dynamic.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from _common import compile_wlock, machine, median, timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--wheel", type=Path)
    parser.add_argument("--runs", type=int, default=3, help="runs of wlock lint")
    args = parser.parse_args()
    compile_wlock()
    wlock = str(Path(sys.executable).with_name("wlock"))
    bandit = str(Path(sys.executable).with_name("bandit"))

    with tempfile.TemporaryDirectory(prefix="wlock-bench-") as tmp:
        root = Path(tmp)
        wheel = args.wheel
        if wheel is None:
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                            "transformers", "-d", str(root)], check=True)
            wheel = next(root.glob("transformers-*.whl"))
        with zipfile.ZipFile(wheel) as z:
            z.extractall(root / "tree")
        tree = root / "tree" / "transformers"
        files = sum(1 for _ in tree.rglob("*.py"))
        lines = sum(p.read_bytes().count(b"\n") for p in tree.rglob("*.py"))

        def run_wlock() -> subprocess.CompletedProcess[str]:
            return subprocess.run([wlock, "lint", str(tree), "--format", "json"], cwd=root,
                                  capture_output=True, text=True)

        def run_bandit() -> subprocess.CompletedProcess[str]:
            return subprocess.run([bandit, "-r", str(tree), "-t", "B615", "-f", "json", "-q"],
                                  capture_output=True, text=True)

        w_times = [timed(run_wlock) for _ in range(args.runs)]
        started = time.perf_counter()
        bandit_result = run_bandit()  # minutes each: once is enough to compare
        b_times = [time.perf_counter() - started]
        w_report = json.loads(run_wlock().stdout)
        b_report = json.loads(bandit_result.stdout)

        hop = one_hop(tree)

    codes: dict[str, int] = {}
    for f in w_report["findings"]:
        codes[f["code"]] = codes.get(f["code"], 0) + 1
    w, b = median(w_times), median(b_times)
    print(f"machine: {machine()}")
    print(f"tree: {wheel.name}: {files} .py files, {lines:,} lines")
    print(f"wlock lint:      {w:6.2f}s  {w_report['loads']} Hub loads found, findings by code: "
          f"{dict(sorted(codes.items()))}")
    print(f"bandit -t B615:  {b:6.2f}s  {len(b_report['results'])} findings (one run)")
    print(f"wlock lint takes {w / b:.2f}x bandit's time on the same tree")
    print(f"dynamic loads without the one-hop defaults: {hop['before']}; with them: "
          f"{hop['judged']} judged by a literal default ({hop['judged_codes']}, plus "
          f"{hop['pinned']} pinned), {hop['local']} local paths by default, "
          f"{hop['after']} still dynamic")
    helper_codes: dict[str, int] = {}
    for f in w_report["findings"]:
        if "(through " in f["message"]:
            helper_codes[f["code"]] = helper_codes.get(f["code"], 0) + 1
    print(f"calls of helpers that pass their parameter as the id, judged at the caller's "
          f"literal: {sum(helper_codes.values())} findings {helper_codes}")


def one_hop(tree: Path) -> dict[str, object]:
    """The tree judged with and without lint.defaults, in this process."""
    from wlock.lint.checker import lint_paths
    from wlock.lint.config import LintSettings
    from wlock.lint.defaults import Defaults
    from wlock.lint.scanner import LoadSite, scan
    from wlock.lint.sources import Source

    def sites(hop: bool) -> list[LoadSite]:
        saved = Defaults.resolve
        if not hop:
            Defaults.resolve = lambda self, node, line: None  # type: ignore[method-assign]
        try:
            found: list[LoadSite] = []
            for path in sorted(tree.rglob("*.py")):
                found += scan(Source(str(path), path.read_text(errors="replace")))[0]
            return found
        finally:
            Defaults.resolve = saved  # type: ignore[method-assign]

    before = {(s.path, s.line, s.col, s.param) for s in sites(False)
              if s.repo_id is None and not s.default_model}
    after_sites = {(s.path, s.line, s.col, s.param): s for s in sites(True)}
    report = lint_paths([tree], None, LintSettings())
    by_place = {(str(tree / f.path) if not Path(f.path).is_absolute() else f.path,
                 f.line, f.col, f.param): f for f in report.findings}
    judged_codes: dict[str, int] = {}
    judged = pinned = local = after = 0
    for place in before:
        site = after_sites.get(place)
        if site is None:
            local += 1
        elif site.repo_id is None:
            after += 1
        elif place in by_place:
            judged += 1
            code = by_place[place].code
            judged_codes[code] = judged_codes.get(code, 0) + 1
        else:
            pinned += 1
    return {"before": len(before), "judged": judged, "judged_codes": judged_codes,
            "pinned": pinned, "local": local, "after": after}


if __name__ == "__main__":
    main()
