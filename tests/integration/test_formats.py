"""Keras configs and ONNX external data under the policy (`keras`, `onnx-external-data`), end
to end against the emulator: every malicious file of the corpus refused at `add` (exit 7,
naming the file, what it would run or read, and the setting); every benign twin locked,
synced, audited clean and read by the real loader offline from the cache (Keras's
load_model in safe mode, onnxruntime through the cache's symlinks); a record edited out of
the lock caught by sync's gate before the file is published, and by audit on disk."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import Hub, added, needs, run_wlock, write_project
from tests.format_corpus import (
    KERAS_BENIGN,
    KERAS_MALICIOUS,
    MARKER,
    ONNX_BENIGN,
    ONNX_MALICIOUS,
    keras_loads,
    onnx_loads,
)
from wlock.lock.lockfile import read_lock

pytestmark = needs("keras", "onnxruntime")

CASES: dict[str, Callable[[Path], Path]] = {
    **{f"keras-{k}": v for k, v in KERAS_MALICIOUS.items()},
    **{f"onnx-{k}": v for k, v in ONNX_MALICIOUS.items()},
}
TWINS: dict[str, Callable[[Path], Path]] = {
    **{f"keras-{k}": v for k, v in KERAS_BENIGN.items()},
    **{f"onnx-{k}": v for k, v in ONNX_BENIGN.items()},
}


def publish(hub: Hub, folder: Path, stem: str, make: Callable[[Path], Path]) -> tuple[str, str]:
    """The file `make` writes (and the files beside it: an ONNX model's external data), in a
    repo of their own; returns the repo and the file's path in it."""
    folder.mkdir(parents=True)
    made = make(folder)
    files = {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*")
             if p.is_file() and not p.name.startswith("base.")}
    files["README.md"] = b"# model\n"
    repo_id = hub.unique_id(stem)
    hub.builder.commit("model", repo_id, files, lfs=True)
    return repo_id, str(made.relative_to(folder))


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_malicious_file_is_refused_at_add_and_lock(hub: Hub, tmp_path: Path, name: str
                                                        ) -> None:
    repo_id, path = publish(hub, tmp_path / "m", name, CASES[name])
    project = write_project(tmp_path / "p", "")
    before = (project / "weights.toml").read_bytes()
    refused = run_wlock("add", repo_id, "--endpoint", hub.endpoint, cwd=project)
    assert refused.code == 7, refused.stderr
    setting = "keras" if name.startswith("keras") else "onnx-external-data"
    what = "names code Keras runs as it loads" if setting == "keras" else \
        "reads its external data from outside the model's folder"
    assert f"{repo_id}: {path}'s " in refused.stderr and what in refused.stderr, refused.stderr
    assert f'`{setting} = "allow"`' in refused.stderr  # the hint names the setting
    assert (project / "weights.toml").read_bytes() == before
    # And at `lock`, for an entry already in weights.toml: refused, no lock written.
    (project / "weights.toml").write_text(f'[[model]]\nid = "{repo_id}"\n')
    locked = run_wlock("lock", "--endpoint", hub.endpoint, cwd=project)
    assert locked.code == 7 and f"{repo_id}: {path}'s " in locked.stderr, locked.stderr
    assert not (project / "weights.lock").exists()
    assert not os.path.exists(f"/tmp/{MARKER}")


@pytest.mark.parametrize("name", sorted(TWINS))
def test_each_benign_twin_locks_syncs_audits_and_loads(hub: Hub, tmp_path: Path, name: str
                                                       ) -> None:
    repo_id, path = publish(hub, tmp_path / "m", name, TWINS[name])
    project, cache = added(hub, tmp_path, (repo_id,))
    repo = read_lock(project / "weights.lock").repos[0]
    assert repo.formats == ()
    audited = run_wlock("audit", "--cache-dir", str(cache), cwd=project)
    assert audited.code == 0, audited.stderr
    [snapshot] = cache.glob(f"models--*/snapshots/{repo.revision}")
    if name.startswith("keras"):
        assert keras_loads(snapshot / path)
    else:
        assert onnx_loads(snapshot / path) == [1.0, 2.0, 3.0, 4.0]  # x + the external weight


@pytest.mark.parametrize("name", ["keras-archive-lambda", "onnx-dotdot"])
def test_a_record_removed_by_hand_is_caught_by_sync_and_audit(hub: Hub, tmp_path: Path,
                                                              name: str) -> None:
    """Locked under "allow" (the record kept), then a pull request drops the record and the
    setting together: `lock --check` passes on the records alone; `--rescan` and sync judge
    the bytes (nothing published); audit judges the bytes on disk; the SBOM says it."""
    setting = "keras" if name.startswith("keras") else "onnx-external-data"
    repo_id, path = publish(hub, tmp_path / "m", name, CASES[name])
    project = write_project(tmp_path / "p", f'[[model]]\nid = "{repo_id}"\n\n'
                            f'[tool.wlock.policy]\n{setting} = "allow"\n')
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    lock_file = project / "weights.lock"
    [record] = read_lock(lock_file).repos[0].formats
    assert (record.kind, record.path) == (setting, path) and record.findings
    sbom = run_wlock("sbom", cwd=project)
    assert sbom.code == 0 and f"wlock:{setting}:{record.key}" in sbom.stdout
    allowed_cache = tmp_path / "allowed"
    assert run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(allowed_cache),
                     cwd=project).code == 0
    text = lock_file.read_text()
    start = text.index("formats = [")
    lock_file.write_text(text[:start] + text[text.index("\n]\n", start) + 3:])
    assert read_lock(lock_file).repos[0].formats == ()
    manifest = project / "weights.toml"
    manifest.write_text(manifest.read_text().replace(f'{setting} = "allow"\n', ""))
    assert run_wlock("lock", "--check", cwd=project).code == 0  # the records alone pass
    rescanned = run_wlock("lock", "--check", "--rescan", "--endpoint", hub.endpoint,
                          cwd=project)
    assert rescanned.code == 7, rescanned.stderr
    assert f"{path}'s {record.key} on the Hub" in rescanned.stderr and \
        "where weights.lock records nothing" in rescanned.stderr, rescanned.stderr
    cache = tmp_path / "cache"
    synced = run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                       cwd=project)
    assert synced.code == 7, synced.stderr
    assert f"{repo_id}: {path}'s {record.key}" in synced.stderr
    assert not list(cache.glob(f"models--*/snapshots/*/{path}"))
    audited = run_wlock("audit", "--format", "json", "--cache-dir", str(allowed_cache),
                        cwd=project)
    assert audited.code == 7, audited.stderr
    assert any(v["kind"] == setting for v in json.loads(audited.stdout)["violations"])
    assert not os.path.exists(f"/tmp/{MARKER}")
