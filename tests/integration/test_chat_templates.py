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

from tests.conftest import Hub, added, run_wlock, write_project
from tests.real_templates import real_chat_templates
from tests.template_corpus import BENIGN, MALICIOUS, MARKER, gguf_with_template, render
from wlock.lock.lockfile import read_lock
from wlock.scan.template import judge_template

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
    refused = run_wlock("add", repo_id, "--endpoint", hub.endpoint, cwd=project)
    assert refused.code == 7, refused.stderr
    assert f"{repo_id}: model.Q8_0.gguf's tokenizer.chat_template reaches past the " \
        "renderers' sandbox" in refused.stderr, refused.stderr
    assert "chat-template" in refused.stderr  # the hint names the setting
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
    project, cache = added(hub, tmp_path, (repo_id,))
    assert read_lock(project / "weights.lock").repos[0].formats == ()
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
    [record] = read_lock(lock_file).repos[0].formats
    assert record.path == "model.Q8_0.gguf" and "the attribute __globals__" in record.findings
    sbom = run_wlock("sbom", cwd=project)
    assert sbom.code == 0 and "wlock:chat-template:tokenizer.chat_template" in sbom.stdout
    allowed_cache = tmp_path / "allowed"
    assert run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(allowed_cache),
                     cwd=project).code == 0
    text = lock_file.read_text()
    start = text.index("formats = [")
    lock_file.write_text(text[:start] + text[text.index("\n]\n", start) + 3:])
    assert read_lock(lock_file).repos[0].formats == ()
    manifest = project / "weights.toml"
    manifest.write_text(manifest.read_text().replace('chat-template = "allow"\n', ""))
    assert run_wlock("lock", "--check", cwd=project).code == 0  # the records alone pass
    rescanned = run_wlock("lock", "--check", "--rescan", "--endpoint", hub.endpoint,
                          cwd=project)
    assert rescanned.code == 7, rescanned.stderr
    assert "model.Q8_0.gguf's tokenizer.chat_template on the Hub reaches the attribute " \
        "__builtins__" in rescanned.stderr and "where weights.lock records nothing" in \
        rescanned.stderr, rescanned.stderr
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


def tokenizer_repo(hub: Hub, tmp_path: Path, stem: str, template: str, where: str
                   ) -> tuple[str, Path]:
    """A tokenizer as transformers saves one, its chat template in `where`: the
    tokenizer_config.json's `chat_template` (transformers 4.x) or chat_template.jinja (5.x)."""
    from tests.integration.test_loaders_real import tiny_bert

    folder = tiny_bert(tmp_path / stem)
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config.pop("chat_template", None)
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    if where == "tokenizer_config.json":
        config["chat_template"] = template
    else:
        (folder / "chat_template.jinja").write_text(template)
    config_path.write_text(json.dumps(config))
    files = {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*")
             if p.is_file()}
    repo_id = hub.unique_id(stem)
    hub.builder.commit("model", repo_id, files)
    hub.builder.configure("model", repo_id, extra={"library_name": "transformers"})
    return repo_id, folder


@pytest.mark.parametrize("where", ["tokenizer_config.json", "chat_template.jinja"])
def test_a_tokenizers_chat_template_is_judged_and_its_benign_twin_renders(
        hub: Hub, tmp_path: Path, where: str) -> None:
    """transformers' apply_chat_template renders the tokenizer's template in the same
    sandbox: a malicious one is refused at add, the benign twin is locked and renders with
    the real transformers, offline from the synced cache."""
    pytest.importorskip("transformers")
    evil, _ = tokenizer_repo(hub, tmp_path / "e", "tok-evil", MALICIOUS["cycler"], where)
    project = write_project(tmp_path / "p", "")
    refused = run_wlock("add", evil, "--endpoint", hub.endpoint, cwd=project)
    assert refused.code == 7, refused.stderr
    assert f"{evil}: {where}'s chat_template reaches past the renderers' sandbox" in \
        refused.stderr, refused.stderr
    good, _ = tokenizer_repo(hub, tmp_path / "g", "tok-good", BENIGN["chatml"], where)
    assert run_wlock("add", good, "--endpoint", hub.endpoint, cwd=project).code == 0
    cache = tmp_path / "cache"
    assert run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                     cwd=project).code == 0
    revision = read_lock(project / "weights.lock").find("model", good).revision  # type: ignore[union-attr]
    import subprocess
    import sys

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(cache)}
    done = subprocess.run([sys.executable, "-c", (
        "import sys\nfrom transformers import AutoTokenizer\n"
        "tok = AutoTokenizer.from_pretrained(sys.argv[1], revision=sys.argv[2])\n"
        "print(tok.apply_chat_template([{'role': 'user', 'content': 'hi'}], tokenize=False,"
        " add_generation_prompt=True))\n"), good, revision], env=env, capture_output=True,
        text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "<|im_start|>user\nhi<|im_end|>" in done.stdout


def _where(hub: Hub, tmp_path: Path, place: str, template: str) -> tuple[str, str, list[str]]:
    """A repo holding `template` where a reader finds it and the last judge did not look:
    (repo, the file, the flags `add` takes)."""
    repo_id = hub.unique_id(f"where-{place}")
    tmp_path.mkdir(parents=True, exist_ok=True)
    if place in ("gguf-named-bin", "gguf-big-endian"):
        path = gguf_with_template(tmp_path / "t.gguf", template, vocab=200,
                                  big_endian=place == "gguf-big-endian")
        name = "ggml-model-q4_0.bin" if place == "gguf-named-bin" else "model.Q8_0.gguf"
        hub.builder.commit("model", repo_id, {name: path.read_bytes(),
                                              "README.md": b"# gguf\n"}, lfs=True)
        # transformers' gguf_file= and gguf's reader take any name: the repo says no library.
        return repo_id, name, ["--loader", "all"] if place == "gguf-named-bin" else [
            "--loader", "gguf"]
    config = json.dumps({"model_type": "bert"}).encode()
    if place == "processor-config":
        name, body = "processor_config.json", {"chat_template": template}
    else:  # a dict of named templates, which apply_chat_template renders by name
        name, body = "tokenizer_config.json", {"chat_template": {"default": template}}
    hub.builder.commit("model", repo_id, {"config.json": config,
                                          name: json.dumps(body).encode()})
    return repo_id, name, ["--loader", "all"]


PLACES = ("gguf-named-bin", "gguf-big-endian", "processor-config", "tokenizer-config-dict")


@pytest.mark.parametrize("place", PLACES)
def test_a_template_wherever_a_reader_finds_it_is_judged(hub: Hub, tmp_path: Path, place: str
                                                         ) -> None:
    """Issue 58: a GGUF named `.bin`, a big-endian GGUF (gguf-py reads both), a processor's
    `processor_config.json` and a `chat_template` given as a dict: each refused at add (seen
    passing with exit 0 before the judge looked there); each benign twin locked, synced and
    read back by its reader."""
    repo_id, name, flags = _where(hub, tmp_path / "evil", place, MALICIOUS["computed-cycler"])
    project = write_project(tmp_path / "p", "")
    refused = run_wlock("add", repo_id, *flags, "--endpoint", hub.endpoint, cwd=project)
    assert refused.code == 7, refused.stderr
    assert f"{repo_id}: {name}'s " in refused.stderr and "chat_template" in refused.stderr, \
        refused.stderr
    repo_id, name, flags = _where(hub, tmp_path / "good", place, BENIGN["llama3"])
    _, cache = added(hub, tmp_path / "q", (repo_id, *flags))
    [local] = cache.glob(f"models--*/snapshots/*/{name}")
    if place.startswith("gguf"):
        import gguf

        field = gguf.GGUFReader(str(local)).fields["tokenizer.chat_template"]
        text = bytes(field.parts[field.data[0]]).decode()
    else:
        template = json.loads(local.read_text())["chat_template"]
        text = template["default"] if isinstance(template, dict) else template
    assert text == BENIGN["llama3"] and "hi" in render(text)


def test_the_chat_templates_of_real_models_pass(hub: Hub, tmp_path: Path) -> None:
    """Issue 58: the judge fails closed, and still no real model's template is refused.
    The 97 templates of tests/real_templates.py (the Ollama library's models, as their GGUF
    files ship them) judged one by one, then one repo carrying each of them everywhere a
    reader looks (a GGUF, transformers 5's additional_chat_templates/, 4.x's list in
    tokenizer_config.json) added, synced and audited with exit 0."""
    templates = real_chat_templates(tmp_path)
    assert len(templates) >= 90, sorted(templates)
    flagged = {name: judged for name, text in templates.items()
               if (judged := judge_template(text)) != ((), None)}
    assert flagged == {}
    files: dict[str, bytes] = {"config.json": json.dumps({"model_type": "llama"}).encode()}
    listed = []
    for i, (name, text) in enumerate(sorted(templates.items())):
        slug = "".join(c if c.isalnum() else "-" for c in name.removeprefix("library/"))
        files[f"additional_chat_templates/{slug}.jinja"] = text.encode()
        listed.append({"name": slug, "template": text})
        gguf_file = gguf_with_template(tmp_path / f"{i}.gguf", text, vocab=50, rows=1)
        files[f"gguf/{slug}.gguf"] = gguf_file.read_bytes()
    files["tokenizer_config.json"] = json.dumps({"chat_template": listed}).encode()
    repo_id = hub.unique_id("real-templates")
    hub.builder.commit("model", repo_id, files, lfs=True)
    project, cache = added(hub, tmp_path, (repo_id, "--loader", "all"))
    audited = run_wlock("audit", "--cache-dir", str(cache), cwd=project)
    assert audited.code == 0, audited.stderr
