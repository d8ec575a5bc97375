"""weights.lock.example is `wlock lock` of fixtures/example/weights.toml against the fixture
Hub, byte for byte: commit ids are content-derived, so a drift here means a change to the
fixtures, the emulator or the lock format."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.conftest import ROOT, Hub, run_wlock
from wlock.hubserver.fixtures import example_manifest


def test_example_lock_is_reproduced_byte_for_byte(hub: Hub, tmp_path: Path) -> None:
    shutil.copyfile(example_manifest(), tmp_path / "weights.toml")
    result = run_wlock("lock", "--endpoint", hub.endpoint, cwd=tmp_path)
    assert result.code == 0, result.stderr
    assert (tmp_path / "weights.lock").read_bytes() == (ROOT / "weights.lock.example").read_bytes()
