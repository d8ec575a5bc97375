"""`wlock run` and the `wlock.revision()` API, with a child Python process that loads through
huggingface_hub offline: what is locked works, what is not fails loudly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import Hub, run_wlock, write_project
from wlock.lock.lockfile import read_lock

CHILD = """
import sys
import wlock
from huggingface_hub import hf_hub_download

commit = wlock.revision("acme/tiny-bert")
path = hf_hub_download("acme/tiny-bert", "config.json", revision=commit)
print("locked ok", commit, path)
from huggingface_hub.errors import LocalEntryNotFoundError
try:
    hf_hub_download("acme/gated-llama", "config.json")
except LocalEntryNotFoundError as e:  # offline and not in the cache: nothing else counts
    print("unlocked refused:", type(e).__name__)
    sys.exit(3)
print("unlocked loaded?!")
"""


@pytest.fixture
def synced(hub: Hub, tmp_path: Path) -> tuple[Path, Path]:
    project = write_project(tmp_path / "p", '[[model]]\nid = "acme/tiny-bert"\n')
    cache = tmp_path / "cache"
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    assert run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                     cwd=project).code == 0
    return project, cache


def test_locked_loads_work_and_unlocked_ones_fail(hub: Hub, synced: tuple[Path, Path]) -> None:
    project, cache = synced
    (project / "child.py").write_text(CHILD)
    hub.process.reset_stats()
    result = run_wlock("run", "--cache-dir", str(cache), "--", sys.executable, "child.py",
                       cwd=project, env={"HF_ENDPOINT": hub.endpoint})
    commit = read_lock(project / "weights.lock").repos[0].revision
    # Served from the project's view (.wlock/), whose links lead into the shared cache.
    loaded = result.stdout.splitlines()[0]
    assert loaded.startswith(f"locked ok {commit} {project}/.wlock/hub-")
    assert os.path.realpath(loaded.split()[-1]).startswith(f"{cache}/")
    assert result.stdout.splitlines()[1].startswith("unlocked refused: ")
    assert result.code == 3  # the command's own status
    assert hub.process.stats()["requests"] == {"hub": 0, "cdn": 0}


def test_run_refuses_an_incomplete_cache_and_names_the_sync(hub: Hub, tmp_path: Path) -> None:
    project = write_project(tmp_path / "p", '[[model]]\nid = "acme/tiny-bert"\n')
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    cache = tmp_path / "empty-cache"
    result = run_wlock("run", "--cache-dir", str(cache), "--", "true", cwd=project)
    assert result.code == 1
    assert result.stderr == (
        f"error: the cache at {cache} does not hold the locked set (acme/tiny-bert: 9 file(s); "
        "329.0 kB to fetch)\n"
        f"hint: Run `wlock sync --cache-dir {cache}` first.\n"
    )


def test_run_reports_a_missing_command(synced: tuple[Path, Path]) -> None:
    project, cache = synced
    result = run_wlock("run", "--cache-dir", str(cache), "--", "no-such-command-xyz",
                       cwd=project)
    assert result.code == 2
    assert result.stderr.startswith("error: command not found: no-such-command-xyz\n")


def test_revision_api(synced: tuple[Path, Path]) -> None:
    project, _ = synced
    code = (
        "import sys, wlock\n"
        "assert 'huggingface_hub' not in sys.modules\n"
        "print(wlock.revision('acme/tiny-bert'))\n"
        "assert wlock.revision('ACME/Tiny-BERT') == wlock.revision('acme/tiny-bert')\n"
        "print(len(wlock.locked('acme/tiny-bert').files))\n"
        "assert 'huggingface_hub' not in sys.modules\n"
        "try:\n    wlock.revision('acme/nope')\n"
        "except wlock.NotLockedError as e:\n    print(e); print(e.hint)\n"
    )
    nested = project / "src" / "deep"
    nested.mkdir(parents=True)  # found by walking up, as from anywhere in the project
    child = subprocess.run([sys.executable, "-c", code], cwd=nested, capture_output=True,
                           text=True)
    assert child.returncode == 0, child.stderr
    commit = read_lock(project / "weights.lock").repos[0].revision
    assert child.stdout.splitlines() == [
        commit, "9", f"'acme/nope' is not in {project / 'weights.lock'}",
        "Add it with `wlock add acme/nope` (which locks it). Locked: acme/tiny-bert.",
    ]


def test_concurrent_runs_share_one_view(synced: tuple[Path, Path]) -> None:
    """A test runner may start several `wlock run` at once in one project: each refreshes
    the same view, none may break another's."""
    project, cache = synced
    argv = [sys.executable, "-m", "wlock", "run", "--cache-dir", str(cache), "--",
            sys.executable, "-c", "import wlock; print(wlock.revision('acme/tiny-bert'))"]
    for _ in range(3):
        procs = [subprocess.Popen(argv, cwd=project, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(6)]
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err
            assert out.strip() == read_lock(project / "weights.lock").repos[0].revision
