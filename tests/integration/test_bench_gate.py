"""bench/gate.py, the benchmark gate (issue 62), run once as CI's smoke run of it: every
figure is measured at tiny sizes, and judged against a record doctored so that one figure
has slipped (its recorded ratio better than any run can be) and the others hold: the gate
exits 1 naming that figure alone. The timings themselves are never asserted (the gate's
real run is on a quiet machine, before a release: docs/contributing/benchmarks.md)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.newest_only(
    "a smoke run of a benchmark script; its figures are the newest stack's")


def test_the_gate_measures_every_figure_and_fails_on_the_one_that_slipped(tmp_path: Path
                                                                          ) -> None:
    record = tomllib.loads((ROOT / "bench" / "gate.toml").read_text())
    assert set(record) == {"noop-sync", "check", "paced-best-fixed", "paced-snapshot",
                           "slow-start-best-fixed"}
    doctored = tmp_path / "gate.toml"
    # A no-op sync faster than the interpreter starting: no run can meet it. The others
    # recorded so that any run that completes holds them.
    lines = []
    for name, figure in record.items():
        impossible = name == "noop-sync"
        lower = figure["better"] == "lower"
        ratio = (0.5 if lower else 1e6) if impossible else (1e6 if lower else 1e-6)
        lines.append(f'[{name}]\nratio = {ratio}\nbetter = "{figure["better"]}"\n'
                     f'margin = {figure["margin"]}\n')
    doctored.write_text("\n".join(lines))
    done = subprocess.run([sys.executable, "gate.py", "--smoke", "--judge", "--recorded",
                           str(doctored)], cwd=ROOT / "bench", capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr
    slipped = [line.split()[0] for line in done.stdout.splitlines() if "SLIPPED" in line]
    assert slipped == ["noop-sync"], done.stdout
    measured = [line.split()[0] for line in done.stdout.splitlines() if "x (" in line]
    assert measured == list(record), done.stdout
    assert "noop-sync slipped past the margin" in done.stderr, done.stderr
