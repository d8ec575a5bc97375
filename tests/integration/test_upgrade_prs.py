"""The CI recipe for upgrades (docs/ci/upgrade-prs.sh, which docs/ci/wlock-upgrades.yml runs
on a schedule), run as it is against the emulator in a git checkout: one branch per moved
entry, each committing that entry's upgrade alone, with the markdown report as the body of
its pull request; an unmoved entry gets no branch; the base branch is left as it was."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, Hub, run_wlock, write_project
from wlock.lock.lockfile import read_lock

SCRIPT = ROOT / "docs" / "ci" / "upgrade-prs.sh"


def git(project: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=project, capture_output=True, text=True,
                          check=True).stdout


def test_one_branch_per_moved_entry_with_the_report_as_its_body(hub: Hub, tmp_path: Path
                                                                  ) -> None:
    if shutil.which("git") is None:
        pytest.skip("git")
    ids = [hub.unique_id(f"pr{n}") for n in range(3)]
    for repo_id in ids:
        hub.builder.commit("model", repo_id, {"config.json": b'{"v": 1}\n',
                                              "LICENSE": b"MIT\n"})
    project = write_project(tmp_path / "p", "".join(f'[[model]]\nid = "{i}"\n\n' for i in ids))
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    git(project, "init", "-q", "-b", "main")
    git(project, "add", "weights.toml", "weights.lock")
    git(project, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "lock")
    before = read_lock(project / "weights.lock")
    hub.builder.commit("model", ids[0], {"config.json": b'{"v": 2}\n'})
    hub.builder.commit("model", ids[2], {"LICENSE": b"GPL-3.0\n"})

    # The wlock on PATH is this checkout's (the recipe calls `wlock`).
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "wlock").write_text(f"#!/bin/sh\nexec {sys.executable} -m wlock \"$@\"\n")
    (bin_dir / "wlock").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "HF_ENDPOINT": hub.endpoint,
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "WLOCK_UPGRADE_BODIES": str(tmp_path / "bodies")}
    env.pop("WLOCK_UPGRADE_PUSH", None)
    done = subprocess.run(["bash", str(SCRIPT)], cwd=project, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr

    branches = sorted(git(project, "branch", "--format=%(refname:short)").split())
    expected = sorted(f"wlock/upgrade/{i.replace('/', '--')}" for i in (ids[0], ids[2]))
    assert branches == sorted(["main", *expected]), branches
    assert git(project, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"
    assert (project / "weights.lock").read_bytes() == git(project, "show", "main:weights.lock"
                                                          ).encode()
    for moved, branch in zip((ids[0], ids[2]), expected, strict=True):
        # The branch moves that entry's pin, and no other.
        shown = git(project, "show", f"{branch}:weights.lock")
        (tmp_path / "l.lock").write_text(shown)
        after = read_lock(tmp_path / "l.lock")
        for repo in after.repos:
            was = before.find("model", repo.id)
            assert was is not None
            assert (repo.revision != was.revision) == (repo.id == moved), repo.id
        body = (tmp_path / "bodies" / f"{branch.replace('/', '_')}.md").read_text()
        assert body.startswith("## Weights upgrade") and f"`{moved}`" in body, body
        assert body in git(project, "log", "-1", "--format=%B", branch)
    licence_body = (tmp_path / "bodies" / f"{expected[1].replace('/', '_')}.md").read_text()
    assert "- **licence**: LICENSE changed" in licence_body


def test_the_renovate_presets_managers_find_every_pin_of_a_real_lock() -> None:
    """The preset itself is not run (no Renovate here); what can be checked is: its managers'
    patterns (RE2 in Renovate; these use nothing Python's re reads otherwise) find every
    entry of a lock wlock wrote, with its id, ref and commit."""
    import json
    import re

    preset = json.loads((ROOT / "docs" / "ci" / "renovate.json").read_text())
    text = (ROOT / "weights.lock.example").read_text()
    found = {}
    for manager in preset["customManagers"]:
        kind = "dataset" if "datasets/" in manager["packageNameTemplate"] else "model"
        for pattern in manager["matchStrings"]:
            for m in re.finditer(pattern.replace("(?<", "(?P<"), text):
                found[(kind, m["depName"])] = (m["currentValue"], m["currentDigest"])
    lock = read_lock(ROOT / "weights.lock.example")
    assert found == {(r.kind, r.id): (r.requested, r.revision) for r in lock.repos}
