"""The code that runs is the code locked: remote code in another repo, after that repo's
`main` moved (issue 48). transformers loads such code at `code_revision` alone (`main` unless
given), whatever `revision` the call pins; `wlock lint` says so and `--fix` pins it through
the lock, and the fixed load, online, runs the locked code (the real transformers)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import Hub, default_signals, run_wlock, write_project
from wlock.lock.lockfile import read_lock

pytest.importorskip("transformers")

CODE = """from transformers import PretrainedConfig


class XConfig(PretrainedConfig):
    model_type = "x-remote"
    code_version = "{version}"
"""


def run_online(hub: Hub, tmp_path: Path, script: Path) -> str:
    env = {**os.environ, "HF_ENDPOINT": hub.endpoint, "HF_HOME": str(tmp_path / "hf"),
           "HF_HUB_DISABLE_TELEMETRY": "1"}
    env.pop("HF_HUB_OFFLINE", None)
    env.pop("HF_HUB_CACHE", None)
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                          text=True, timeout=300, preexec_fn=default_signals,
                          cwd=script.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def test_code_in_another_repo_is_pinned_by_lint_fix_and_the_locked_code_runs(
        hub: Hub, tmp_path: Path) -> None:
    code = hub.unique_id("xcode")
    hub.builder.commit("model", code, {"configuration_x.py": CODE.format(version="v1").encode()})
    repo_id = hub.unique_id("xmodel")
    hub.builder.commit("model", repo_id, {"config.json": json.dumps({
        "model_type": "x-remote",
        "auto_map": {"AutoConfig": f"{code}--configuration_x.XConfig"}}).encode()})
    project = write_project(tmp_path / "project", "")
    added = run_wlock("add", repo_id, "--endpoint", hub.endpoint, cwd=project)
    assert added.code == 0, added.stderr
    lock = read_lock(project / "weights.lock")
    model, locked_code = lock.find("model", repo_id), lock.find("model", code)
    assert model is not None and locked_code is not None
    assert f"{code}--configuration_x.XConfig" in model.remote_code
    # The code repo's main moves on.
    hub.builder.commit("model", code, {"configuration_x.py": CODE.format(version="v2").encode()})
    script = project / "load.py"
    script.write_text(
        "from transformers import AutoConfig\n"
        f'config = AutoConfig.from_pretrained("{repo_id}", revision="{model.revision}", '
        "trust_remote_code=True)\nprint(config.code_version)\n")
    assert run_online(hub, tmp_path / "before", script) == "v2"  # pinned revision, new code
    found = json.loads(run_wlock("lint", "--format", "json", cwd=project).stdout)["findings"]
    assert [(f["code"], f["param"]) for f in found] == [("WL105", "code_revision")], found
    assert f"its code is in {code}" in found[0]["message"]
    assert locked_code.revision in found[0]["message"]
    fixed = run_wlock("lint", "--fix", cwd=project)
    assert fixed.code == 0, fixed.stderr + fixed.stdout
    # The pin follows weights.lock (the README's form), and runs the locked code.
    assert f'code_revision=wlock.revision("{code}")' in script.read_text()
    assert run_online(hub, tmp_path / "after", script) == "v1"  # the locked code
    # Its own code, at the revision the call pins, is not a finding.
    own = project / "own.py"
    own.write_text("from transformers import AutoConfig\n"
                   f'AutoConfig.from_pretrained("{code}", revision="{locked_code.revision}", '
                   "trust_remote_code=True)\n")
    found = json.loads(run_wlock("lint", "--format", "json", "own.py", cwd=project).stdout)
    assert found["findings"] == []
    # The README's form, pinned through the lock, is not a finding either.
    script.write_text(
        "import wlock\nfrom transformers import AutoConfig\n"
        f'config = AutoConfig.from_pretrained("{repo_id}", revision=wlock.revision("{repo_id}"),'
        f' trust_remote_code=True, code_revision=wlock.revision("{code}"))\n')
    found = json.loads(run_wlock("lint", "--format", "json", "load.py", cwd=project).stdout)
    assert found["findings"] == []
    script.write_text(script.read_text().replace(f'code_revision=wlock.revision("{code}")',
                                                 f'code_revision=wlock.revision("{repo_id}")'))
    found = json.loads(run_wlock("lint", "--format", "json", "load.py", cwd=project).stdout)
    assert [f["code"] for f in found["findings"]] == ["WL103"], found


@pytest.mark.parametrize("pin", ["lock", "commit"])
def test_the_pin_lint_fix_writes_survives_an_upgrade(hub: Hub, tmp_path: Path, pin: str
                                                      ) -> None:
    """Issue 61: the literal commits `lint --fix` wrote became WL103 after every `lock
    --upgrade`. Its default pin, wlock.revision("org/name") (the README's form), follows
    weights.lock: after the upgrade lint passes with the code untouched. `fix-pin =
    "commit"` keeps the literal, which the upgrade makes stale until `lint --fix` again."""
    repo_id = hub.unique_id("moving")
    hub.builder.commit("model", repo_id, {"config.json": b'{"model_type": "bert", "v": 1}'})
    setting = '\n[tool.wlock.lint]\nfix-pin = "commit"\n' if pin == "commit" else ""
    project = write_project(tmp_path / "p", f'[[model]]\nid = "{repo_id}"\n{setting}')
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    script = project / "train.py"
    script.write_text("from transformers import AutoConfig\n"
                      f'config = AutoConfig.from_pretrained("{repo_id}")\n')
    assert run_wlock("lint", cwd=project).code == 1
    assert run_wlock("lint", "--fix", cwd=project).code == 0
    fixed = script.read_text()
    assert ("wlock.revision" in fixed) == (pin == "lock"), fixed
    hub.builder.commit("model", repo_id, {"config.json": b'{"model_type": "bert", "v": 2}'})
    before = read_lock(project / "weights.lock").find("model", repo_id)
    upgraded = run_wlock("lock", "--upgrade", "--endpoint", hub.endpoint, cwd=project)
    assert upgraded.code == 0, upgraded.stderr
    after = read_lock(project / "weights.lock").find("model", repo_id)
    assert before is not None and after is not None and before.revision != after.revision
    linted = run_wlock("lint", "--format", "json", cwd=project)
    codes = [f["code"] for f in json.loads(linted.stdout)["findings"]]
    assert codes == ([] if pin == "lock" else ["WL103"]), linted.stdout
    assert script.read_text() == fixed  # no edit of the code
    if pin == "lock":
        # And the code runs against the upgraded commit, offline, through the lock.
        cache = tmp_path / "cache"
        assert run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                         cwd=project).code == 0
        ran = run_wlock("run", "--cache-dir", str(cache), "--", sys.executable, "-c",
                        "import runpy; g = runpy.run_path('train.py'); print(g['config'].v)",
                        cwd=project)
        assert ran.code == 0 and ran.stdout.strip().endswith("2"), ran.stderr
