"""GGUF chat templates under the policy (`chat-template`), end to end against the emulator:
every malicious template of the corpus refused at `add` (exit 7, naming the file and what it
reaches) from the header's ranges, never the tensors; every benign twin, which the renderers'
sandbox renders, locked, synced and audited clean; a record removed from the lock by hand is
caught by sync's gate before the file is published, and by audit on disk; the SBOM says it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import Hub, run_wlock, write_project
from tests.template_corpus import BENIGN, MALICIOUS, MARKER, gguf_with_template, render
from wlock.lock.lockfile import read_lock

pytest.importorskip("gguf")


def publish(hub: Hub, tmp_path: Path, stem: str, template: str) -> tuple[str, bytes]:
    path = gguf_with_template(tmp_path / f"{stem}.gguf", template, vocab=20_000, rows=1024)
    data = path.read_bytes()
    repo_id = hub.unique_id(stem)
    hub.builder.commit("model", repo_id, {"model.Q8_0.gguf": data, "README.md": b"# gguf\n"},
                       lfs=True)
    hub.builder.configure("model", repo_id, extra={"library_name": "gguf"})
    return repo_id, data


@pytest.mark.parametrize("name", sorted(MALICIOUS))
def test_each_malicious_template_is_refused_at_add(hub: Hub, tmp_path: Path, name: str
                                                   ) -> None:
    repo_id, data = publish(hub, tmp_path, f"tpl-{name}", MALICIOUS[name])
    project = write_project(tmp_path / "p", "")
    before = (project / "weights.toml").read_bytes()
    hub.process.reset_stats()
    added = run_wlock("add", repo_id, "--endpoint", hub.endpoint, cwd=project)
    assert added.code == 7, added.stderr
    assert f"{repo_id}: model.Q8_0.gguf's tokenizer.chat_template reaches past the " \
        "renderers' sandbox" in added.stderr, added.stderr
    assert "chat-template" in added.stderr  # the hint names the setting
    assert (project / "weights.toml").read_bytes() == before
    served = sum(e["bytes"] for e in hub.process.stats()["log"]
                 if e["method"] == "GET" and e["listener"] == "cdn")
    assert served < len(data) // 4, (served, len(data))  # the header, not the tensors
    assert not os.path.exists(f"/tmp/{MARKER}")


@pytest.mark.parametrize("name", sorted(BENIGN))
def test_each_benign_twin_renders_locks_syncs_and_audits(hub: Hub, tmp_path: Path,
                                                         name: str) -> None:
    assert render(BENIGN[name])  # the renderers' own sandbox renders it
    repo_id, _ = publish(hub, tmp_path, f"tpl-ok-{name}", BENIGN[name])
    project = write_project(tmp_path / "p", "")
    assert run_wlock("add", repo_id, "--endpoint", hub.endpoint, cwd=project).code == 0
    assert read_lock(project / "weights.lock").repos[0].templates == ()
    cache = tmp_path / "cache"
    synced = run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                       cwd=project)
    assert synced.code == 0, synced.stderr
    audited = run_wlock("audit", "--cache-dir", str(cache), cwd=project)
    assert audited.code == 0, audited.stderr


def test_a_record_removed_by_hand_is_caught_by_sync_and_audit(hub: Hub, tmp_path: Path
                                                              ) -> None:
    """Locked under `chat-template = "allow"` (the record kept), then a pull request drops
    the record and the setting together: `lock --check` passes on the records alone; sync
    judges the bytes and publishes nothing; audit judges the bytes on disk."""
    repo_id, _ = publish(hub, tmp_path, "tpl-edited", MALICIOUS["self-globals"])
    project = write_project(tmp_path / "p", f'[[model]]\nid = "{repo_id}"\n\n'
                            '[tool.wlock.policy]\nchat-template = "allow"\n')
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    lock_file = project / "weights.lock"
    [record] = read_lock(lock_file).repos[0].templates
    assert record.path == "model.Q8_0.gguf" and "the attribute __globals__" in record.escapes
    sbom = run_wlock("sbom", cwd=project)
    assert sbom.code == 0 and "wlock:chat-template:tokenizer.chat_template" in sbom.stdout
    allowed_cache = tmp_path / "allowed"
    assert run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(allowed_cache),
                     cwd=project).code == 0
    text = lock_file.read_text()
    start = text.index("templates = [")
    lock_file.write_text(text[:start] + text[text.index("\n]\n", start) + 3:])
    assert read_lock(lock_file).repos[0].templates == ()
    manifest = project / "weights.toml"
    manifest.write_text(manifest.read_text().replace('chat-template = "allow"\n', ""))
    assert run_wlock("lock", "--check", cwd=project).code == 0  # the records alone pass
    cache = tmp_path / "cache"
    synced = run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                       cwd=project)
    assert synced.code == 7, synced.stderr
    assert "reaches past the renderers' sandbox" in synced.stderr
    assert not list(cache.glob("models--*/snapshots/*/model.Q8_0.gguf"))
    audited = run_wlock("audit", "--format", "json", "--cache-dir", str(allowed_cache),
                        cwd=project)
    assert audited.code == 7, audited.stderr
    found = json.loads(audited.stdout)
    assert any(v["kind"] == "chat-template" for v in found["violations"]), found
    assert not os.path.exists(f"/tmp/{MARKER}")
