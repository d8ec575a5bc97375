"""`wlock lint` on a large real tree (the transformers package from PyPI), beside bandit's
B615 (huggingface_unsafe_download) on the same tree.

    python bench/lint_speed.py [--wheel PATH] [--runs 3]

Downloads the transformers wheel with pip unless --wheel is given (no install: the source is
only read), unpacks it, and times both tools over the same .py files. Needs bandit >= 1.8.3
(`pip install bandit`, in the `bench` extra).
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


if __name__ == "__main__":
    main()
