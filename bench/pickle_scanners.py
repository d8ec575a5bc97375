"""Which pickle scanner wlock builds on: picklescan, fickling and modelscan on one corpus
(tests/pickle_corpus.py): 16 malicious pickles (os.system in protocols 0 to 5, posix.system,
eval, exec, runpy, subprocess, STACK_GLOBAL from the memo, a nested pickle, getattr on an
import, two torch zips) and 5 benign checkpoints written by torch.save (zip and legacy, an
optimizer's state, fp16, numpy arrays).

    python bench/pickle_scanners.py

For each: malicious caught, benign passed, whether it lists the imports (what wlock records
in the lock and judges against an allowlist), and the time over the corpus.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.pickle_corpus import benign, malicious

logging.disable(logging.WARNING)


def picklescan_verdict(path: Path) -> tuple[bool, list[str]]:
    from picklescan.scanner import scan_file_path

    result = scan_file_path(str(path))
    return result.infected_files > 0 or result.scan_err, sorted(
        f"{g.module}.{g.name}" for g in result.globals)


def fickling_verdict(path: Path) -> tuple[bool, list[str]]:
    import fickling

    with contextlib.redirect_stdout(io.StringIO()):
        try:
            return not fickling.is_likely_safe(str(path)), []
        except Exception:  # noqa: BLE001 - a file it cannot read counts as flagged
            return True, []


def modelscan_verdict(path: Path) -> tuple[bool, list[str]]:
    from modelscan.modelscan import ModelScan

    with contextlib.redirect_stdout(io.StringIO()):
        scanner = ModelScan()
        result = scanner.scan(str(path))
    issues = result.get("issues", []) if isinstance(result, dict) else []
    errors = result.get("errors", []) if isinstance(result, dict) else []
    return bool(issues) or bool(errors), []


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="wlock-pickles-") as tmp:
        root = Path(tmp)
        bad = {}
        for name, data in malicious().items():
            (root / "bad" / name).parent.mkdir(parents=True, exist_ok=True)
            (root / "bad" / name).write_bytes(data)
            bad[name] = root / "bad" / name
        good = benign(root / "good")
        print(f"{'scanner':<12} {'malicious caught':>17} {'benign passed':>14} "
              f"{'lists imports':>14} {'time':>8}")
        for label, verdict in (("picklescan", picklescan_verdict),
                               ("fickling", fickling_verdict),
                               ("modelscan", modelscan_verdict)):
            started = time.perf_counter()
            try:
                caught = [n for n, p in bad.items() if verdict(p)[0]]
                passed = [n for n, p in good.items() if not verdict(p)[0]]
                lists = bool(verdict(good["pytorch_model.bin"])[1])
            except Exception as e:  # noqa: BLE001 - a scanner that cannot run is reported
                print(f"{label:<12} failed: {type(e).__name__}: {e}")
                continue
            took = time.perf_counter() - started
            print(f"{label:<12} {len(caught):>9}/{len(bad):<7} {len(passed):>7}/{len(good):<6} "
                  f"{'yes' if lists else 'no':>14} {took:>7.2f}s")
            missed = sorted(set(bad) - set(caught))
            flagged = sorted(set(good) - set(passed))
            if missed:
                print(f"{'':<12} missed: {', '.join(missed)}")
            if flagged:
                print(f"{'':<12} flagged benign: {', '.join(flagged)}")
    print(f"marker left by a payload that ran: {os.path.exists('/tmp/wlock-pickle-ran')}")


if __name__ == "__main__":
    main()
