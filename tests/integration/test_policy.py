"""Safe to load (issue 26): pickles judged at lock time from range reads, the policy in
weights.toml enforced by add, lock and lock --check (exit 7), `wlock audit` over the bytes on
disk, and a CycloneDX SBOM that validates."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from tests.conftest import Hub, Result, run_wlock, write_project
from tests.pickle_corpus import CASES, EVIL, GOOD, MARKER, plain, reduce, torch_zip
from wlock.lock.lockfile import read_lock

PAD = 4 * 2**20  # a torch zip and a plain pickle get 4 MiB more than their payload


def padded(name: str, data: bytes) -> bytes:
    """The payload inside a file as large as a checkpoint: a torch zip gets a 4 MiB tensor
    member, a plain pickle 4 MiB of zeros after its STOP (what a judgement must not read)."""
    if data.startswith(b"PK") and name.endswith((".bin", ".pt")):
        import io
        import zipfile

        out = io.BytesIO(data)
        with zipfile.ZipFile(out, "a", zipfile.ZIP_STORED) as z:
            z.writestr("archive/data/9", b"\0" * PAD)
        return out.getvalue()
    if name.endswith((".pkl", ".dat")) and name != "second-pickle.pkl":
        return data + b"\0" * PAD
    return data


def sync_and_audit(hub: Hub, project: Path, cache: Path) -> Result:
    """`wlock sync` then `wlock audit` of `project` into `cache`, both passing: audit's
    result, for what it reports."""
    synced = run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                       cwd=project)
    assert synced.code == 0, synced.stderr
    audited = run_wlock("audit", "--cache-dir", str(cache), cwd=project)
    assert audited.code == 0, audited.stdout + audited.stderr
    return audited


def policy_project(tmp_path: Path, policy: str = "", entries: str = "") -> Path:
    return write_project(tmp_path, entries + (f"\n[tool.wlock.policy]\n{policy}" if policy
                                              else ""))


def test_every_malicious_file_of_the_corpus_is_refused_at_add_and_lock(
        hub: Hub, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    corpus = {c.name: padded(c.name, c.malicious()) for c in CASES}
    repo_id = hub.unique_id("evil")
    hub.builder.commit("model", repo_id, {**corpus, "README.md": b"# evil\n"}, lfs=True)
    project = policy_project(tmp_path)
    before = (project / "weights.toml").read_bytes()
    hub.process.reset_stats()
    added = run_wlock("add", repo_id, "--loader", "all", "--endpoint", hub.endpoint,
                      cwd=project)
    assert added.code == 7, added.stderr
    assert "Traceback" not in added.stderr
    for case in CASES:
        if case.calls == "unknown":
            line = f"{repo_id}: {case.name} could not be judged to its end"
        else:
            line = f"{repo_id}: {case.name} imports {case.calls}, which `safe-imports`"
        assert line in added.stderr, (case.name, added.stderr[-3000:])
    assert "weights.lock was left as it was" in added.stderr
    assert "weights.toml was left as it was" in added.stderr
    assert (project / "weights.toml").read_bytes() == before
    assert not (project / "weights.lock").exists()
    # Ranges only: a few blocks of each padded file, never its 4 MiB of padding.
    by_hash = {hashlib.sha256(data).hexdigest(): name for name, data in corpus.items()}
    served: dict[str, int] = {}
    for entry in hub.process.stats()["log"]:
        name = by_hash.get(entry["path"].rsplit("/", 1)[-1].split("?")[0])
        if entry["listener"] == "cdn" and name is not None:
            served[name] = served.get(name, 0) + entry["bytes"]
    assert set(served) == set(by_hash.values())  # every file (identical ones are one blob)
    for name, size in served.items():
        if len(corpus[name]) > PAD:
            assert size < len(corpus[name]) / 8, (name, size, len(corpus[name]))
    assert not os.path.exists(f"/tmp/{MARKER}")  # nothing ran

    # The same entry written by hand: `wlock lock` refuses it too, and writes nothing.
    (project / "weights.toml").write_text(f'[[model]]\nid = "{repo_id}"\nloader = "all"\n')
    locked = run_wlock("lock", "--endpoint", hub.endpoint, cwd=project)
    assert locked.code == 7 and "imports posix.system" in locked.stderr
    assert "weights.dat imports posix.system" in locked.stderr
    assert not (project / "weights.lock").exists()
    assert not os.path.exists(f"/tmp/{MARKER}")


def test_every_benign_twin_locks_syncs_and_audits(hub: Hub, tmp_path: Path) -> None:
    """The twins pass at every gate: lock (ranges), sync (the verified bytes, before they
    are published) and audit (the bytes on disk): the judgement refuses calls, not layouts."""
    pytest.importorskip("torch")
    twins = {c.name: c.benign() for c in CASES}
    repo_id = hub.unique_id("twins")
    hub.builder.commit("model", repo_id, {**twins, "README.md": b"# twins\n"}, lfs=True)
    project = policy_project(tmp_path / "p")
    cache = tmp_path / "cache"
    added = run_wlock("add", repo_id, "--loader", "all", "--endpoint", hub.endpoint,
                      cwd=project)
    assert added.code == 0, added.stderr
    recorded = {p.path: p for p in read_lock(project / "weights.lock").repos[0].pickles}
    assert set(recorded) == set(twins)
    assert all("collections.OrderedDict" in p.imports and p.unreadable is None
               for p in recorded.values())
    audited = sync_and_audit(hub, project, cache)
    assert f"{len(twins) + 1} files judged from the bytes on disk" in audited.stderr


def test_a_readme_that_reads_as_a_pickle_is_not_refused(hub: Hub, tmp_path: Path) -> None:
    """"N.B." at a README's start is NONE, STOP: a pickle of None, importing nothing. lock
    never judges a README (its reader never unpickles), so it has no record to differ from:
    sync and audit judge it by the policy alone, which passes it."""
    torch = pytest.importorskip("torch")
    import io

    state = io.BytesIO()
    torch.save({"w": torch.ones(2)}, state)
    repo_id = hub.unique_id("nb")
    hub.builder.commit("model", repo_id, {"README.md": b"N.B. read this first\n",
                                          "pytorch_model.bin": state.getvalue()})
    project = policy_project(tmp_path / "p", entries=f'[[model]]\nid = "{repo_id}"\n'
                             'loader = "all"\n')
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    cache = tmp_path / "cache"
    sync_and_audit(hub, project, cache)


def evil_pickle_repo(hub: Hub) -> tuple[str, bytes]:
    data = plain(reduce(EVIL)) + b"\0" * 200_000
    repo_id = hub.unique_id("ranges")
    hub.builder.commit("model", repo_id, {"weights.pkl": data, "config.json": b"{}"},
                       lfs=True)
    return repo_id, data


@pytest.mark.parametrize(("mode", "says"), [
    ("short", "bytes 0-32767/200052 where 0-65535/200052 was asked"),
    ("wrong", "bytes 1-65536/200052 where 0-65535/200052 was asked"),
])
def test_a_range_answered_with_other_bytes_fails_naming_the_file_and_host(
        hub: Hub, tmp_path: Path, mode: str, says: str) -> None:
    repo_id, data = evil_pickle_repo(hub)
    sha = hashlib.sha256(data).hexdigest()
    hub.process.faults({"action": "range", "mode": mode, "listener": "cdn", "match": sha})
    project = policy_project(tmp_path, entries=f'[[model]]\nid = "{repo_id}"\n')
    locked = run_wlock("lock", "--endpoint", hub.endpoint, cwd=project)
    assert locked.code == 5, locked.stderr
    assert "Traceback" not in locked.stderr
    cdn = hub.process.cdn.split("//", 1)[1].split("/", 1)[0]
    assert f"cannot judge {repo_id}: weights.pkl: {cdn} answered a range request with" \
        in locked.stderr, locked.stderr
    assert says in locked.stderr, locked.stderr
    assert not (project / "weights.lock").exists()


def test_a_server_that_ignores_range_has_the_file_read_once(hub: Hub, tmp_path: Path) -> None:
    repo_id, data = evil_pickle_repo(hub)
    sha = hashlib.sha256(data).hexdigest()
    hub.process.faults({"action": "range", "mode": "ignore", "listener": "cdn", "match": sha})
    project = policy_project(tmp_path, entries=f'[[model]]\nid = "{repo_id}"\n')
    hub.process.reset_stats()
    locked = run_wlock("lock", "--endpoint", hub.endpoint, cwd=project)
    assert locked.code == 7, locked.stderr
    assert f"{repo_id}: weights.pkl imports posix.system" in locked.stderr
    reads = [e for e in hub.process.stats()["log"]
             if e["listener"] == "cdn" and sha in e["path"]]
    assert len(reads) == 1 and reads[0]["bytes"] == len(data), reads


def test_a_decoy_shown_at_lock_time_never_reaches_the_cache(hub: Hub, tmp_path: Path) -> None:
    """The server shows `lock`'s range reads a benign pickle, then serves the download the
    real bytes (the very bytes the Hub's sha256 names): sync judges those, refuses them and
    publishes nothing."""
    import base64

    repo_id, data = evil_pickle_repo(hub)
    sha = hashlib.sha256(data).hexdigest()
    decoy = plain(reduce(GOOD))
    hub.process.faults({"action": "range", "mode": "decoy", "listener": "cdn", "match": sha,
                        "data_b64": base64.b64encode(decoy).decode()})
    project = policy_project(tmp_path / "p", entries=f'[[model]]\nid = "{repo_id}"\n')
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    record = read_lock(project / "weights.lock").repos[0].pickles[0]
    assert record.imports == ("collections.OrderedDict",)  # the decoy fooled the preview
    hub.process.faults()
    cache = tmp_path / "cache"
    synced = run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                       cwd=project)
    assert synced.code == 7, synced.stderr
    assert "Traceback" not in synced.stderr
    assert f"{repo_id}: weights.pkl imports posix.system, which `safe-imports` does not " \
        "allow" in synced.stderr, synced.stderr
    assert "downloaded bytes hold imports posix.system, where weights.lock records imports " \
        "collections.OrderedDict" in synced.stderr
    repo_dir = next(cache.glob("models--*"))
    assert not (repo_dir / "blobs" / sha).exists()
    assert not list(repo_dir.glob("snapshots/*/weights.pkl"))
    assert not [p for p in (repo_dir / "blobs").iterdir() if sha in p.name]  # no temp left
    assert not os.path.exists(f"/tmp/{MARKER}")
    rescanned = run_wlock("lock", "--check", "--rescan", "--endpoint", hub.endpoint,
                          cwd=project)
    assert rescanned.code == 7, rescanned.stderr
    assert f"{repo_id}: weights.pkl on the Hub holds a pickle importing posix.system, where " \
        "weights.lock records a pickle importing collections.OrderedDict" in rescanned.stderr


def edited_by_hand(hub: Hub, tmp_path: Path, record: str, policy: str) -> Path:
    """A repo of a pickle running posix.system, locked under `pickle = "allow"`; then its
    record replaced by `record` and the policy set to `policy` by hand: the project."""
    repo_id, _ = evil_pickle_repo(hub)
    project = policy_project(tmp_path / "p", 'pickle = "allow"\n',
                             entries=f'[[model]]\nid = "{repo_id}"\n')
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    lock_file = project / "weights.lock"
    text = lock_file.read_text()
    assert 'imports = ["posix.system"]' in text
    lock_file.write_text(text.replace('imports = ["posix.system"]', record))
    manifest = project / "weights.toml"
    manifest.write_text(manifest.read_text().replace('pickle = "allow"', f'pickle = "{policy}"'))
    return project


def test_a_lock_record_edited_by_hand_is_caught_by_sync_and_rescan(hub: Hub, tmp_path: Path
                                                                   ) -> None:
    # A pull request edits the record and the policy together.
    project = edited_by_hand(hub, tmp_path, 'imports = ["collections.OrderedDict"]',
                             "safe-imports")
    checked = run_wlock("lock", "--check", cwd=project)
    assert checked.code == 0  # the records alone say nothing is wrong: hence the two below
    cache = tmp_path / "cache"
    synced = run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                       cwd=project)
    assert synced.code == 7, synced.stderr
    assert "weights.pkl imports posix.system" in synced.stderr
    assert not list(cache.glob("models--*/snapshots/*/weights.pkl"))
    rescanned = run_wlock("lock", "--check", "--rescan", "--endpoint", hub.endpoint,
                          cwd=project)
    assert rescanned.code == 7
    assert "on the Hub holds a pickle importing posix.system" in rescanned.stderr
    # Audit with nothing on disk says it judged the records only.
    audited = run_wlock("audit", "--cache-dir", str(tmp_path / "empty"), cwd=project)
    assert "judged from the lock's records only" in audited.stderr, audited.stderr


def checkpoint_repo(hub: Hub, tmp_path: Path, card: str = "") -> str:
    """A repo whose weights are pickles written by torch.save, as transformers 4.x's
    save_pretrained(safe_serialization=False) wrote pytorch_model.bin."""
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    tmp_path.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
    torch.save(model.state_dict(), tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    repo_id = hub.unique_id("ckpt")
    hub.builder.commit("model", repo_id, {
        "config.json": b"{}", "pytorch_model.bin": (tmp_path / "pytorch_model.bin").read_bytes(),
        "legacy.pt": (tmp_path / "legacy.pt").read_bytes(),
        "README.md": (f"---\n{card}---\n# ckpt\n" if card else "# ckpt\n").encode()})
    return repo_id


def test_torch_checkpoints_pass_safe_imports_and_deny_refuses_them_offline(
        hub: Hub, tmp_path: Path) -> None:
    repo_id = checkpoint_repo(hub, tmp_path / "w")
    project = policy_project(tmp_path / "p")
    added = run_wlock("add", repo_id, "--loader", "all", "--endpoint", hub.endpoint,
                      cwd=project)
    assert added.code == 0, added.stderr
    repo = read_lock(project / "weights.lock").repos[0]
    recorded = {p.path: p.imports for p in repo.pickles}
    assert recorded["pytorch_model.bin"] == ("collections.OrderedDict", "torch.FloatStorage",
                                             "torch._utils._rebuild_tensor_v2")
    assert recorded["legacy.pt"] == recorded["pytorch_model.bin"]
    assert run_wlock("lock", "--check", cwd=project).code == 0
    # Policy changed to deny: lock --check refuses, offline, from the lock's record.
    with (project / "weights.toml").open("a") as f:
        f.write('\n[tool.wlock.policy]\npickle = "deny"\n')
    denied = run_wlock("lock", "--check", "--endpoint", "http://127.0.0.1:9", cwd=project)
    assert denied.code == 7, denied.stderr
    assert f"{repo_id}: legacy.pt is a pickle, and the policy denies pickles" in denied.stderr
    assert f"{repo_id}: pytorch_model.bin is a pickle" in denied.stderr
    allowed = (project / "weights.toml").read_text().replace('"deny"', '"allow"')
    (project / "weights.toml").write_text(allowed)
    assert run_wlock("lock", "--check", cwd=project).code == 0


def test_a_licence_outside_the_list_is_refused(hub: Hub, tmp_path: Path) -> None:
    gpl = hub.unique_id("gpl")
    hub.builder.commit("model", gpl, {"config.json": b"{}", "README.md":
                                      b"---\nlicense: gpl-3.0\n---\n# gpl\n"})
    other = hub.unique_id("other")
    hub.builder.commit("model", other, {"config.json": b"{}", "README.md":
                                        b"---\nlicense: other\nlicense_name: acme-research\n"
                                        b"---\n"})
    project = policy_project(tmp_path, 'licenses = ["apache-2.0", "MIT", "acme-research"]\n')
    refused = run_wlock("add", gpl, "--endpoint", hub.endpoint, cwd=project)
    assert refused.code == 7, refused.stderr
    assert f"{gpl}: licence gpl-3.0 is not in the policy's licenses (apache-2.0, mit, " \
        "acme-research)" in refused.stderr
    # The hint is about licences, not pickles.
    assert "For a licence: choose a model under a licence the policy lists" in refused.stderr
    assert "For a pickle" not in refused.stderr
    # A card listing two licences: each is recorded, and each must be allowed.
    dual = hub.unique_id("dual")
    hub.builder.commit("model", dual, {"config.json": b"{}", "README.md":
                                       b"---\nlicense:\n- mit\n- cc-by-nc-4.0\n---\n"})
    listed = run_wlock("add", dual, "--endpoint", hub.endpoint, cwd=project)
    assert listed.code == 7, listed.stderr
    assert f"{dual}: licence cc-by-nc-4.0 is not in the policy's licenses" in listed.stderr
    assert f"{dual}: licence mit" not in listed.stderr
    fine = run_wlock("add", other, "--endpoint", hub.endpoint, cwd=project)
    assert fine.code == 0, fine.stderr
    repo = read_lock(project / "weights.lock").repos[0]
    assert (repo.license, repo.license_name) == ("other", "acme-research")


def test_remote_code_the_lock_does_not_hold_is_refused(hub: Hub, tmp_path: Path) -> None:
    code = hub.unique_id("code")
    hub.builder.commit("model", code, {"modeling_x.py": b"class XModel: pass\n"})
    repo_id = hub.unique_id("remote")
    auto_map = {"AutoModel": "modeling_x.XModel", "AutoConfig": f"{code}--modeling_x.XConfig"}
    hub.builder.commit("model", repo_id, {
        "config.json": json.dumps({"auto_map": auto_map}).encode(),
        "modeling_x.py": b"class XModel: pass\n", "model.safetensors": b"\0" * 64})
    entry = f'[[model]]\nid = "{repo_id}"\nloader = "transformers"\nexclude = ["modeling_x.py"]\n'
    project = policy_project(tmp_path / "a", entries=entry)
    refused = run_wlock("lock", "--endpoint", hub.endpoint, cwd=project)
    assert refused.code == 7, refused.stderr
    assert f"{repo_id}: auto_map runs modeling_x.XModel, but modeling_x.py is not in the lock" \
        in refused.stderr
    # Both pieces of code locked (the other repo's as a requirement): accepted...
    project = policy_project(tmp_path / "b", entries=entry.replace(
        'exclude = ["modeling_x.py"]\n', ""))
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    assert read_lock(project / "weights.lock").find("model", code) is not None
    # ... unless the lock lost the other repo (a hand edit): out of date while the entry
    # still requires it, refused offline once the requirement is edited out too.
    text = (project / "weights.lock").read_text()
    start = text.index(f'[[model]]\nid = "{code}"')
    end = text.find("[[model]]", start + 5)
    (project / "weights.lock").write_text(text[:start] + (text[end:] if end != -1 else ""))
    stale = run_wlock("lock", "--check", cwd=project)
    assert stale.code == 3 and f"it lacks {code}, which its entries require" in stale.stderr
    text = (project / "weights.lock").read_text()
    assert f'requires = ["{code}"]\n' in text
    (project / "weights.lock").write_text(text.replace(f'requires = ["{code}"]\n', ""))
    gone = run_wlock("lock", "--check", cwd=project)
    assert gone.code == 7, gone.stderr
    assert f"auto_map runs {code}--modeling_x.XConfig from {code}, which weights.lock does " \
        "not lock" in gone.stderr
    # remote-code = "deny": any of it is refused.
    with (project / "weights.toml").open("a") as f:
        f.write('\n[tool.wlock.policy]\nremote-code = "deny"\n')
    denied = run_wlock("lock", "--endpoint", hub.endpoint, cwd=project)
    assert denied.code == 7 and "the policy denies remote code" in denied.stderr


def test_audit_finds_a_pickle_swapped_on_disk_after_sync(hub: Hub, tmp_path: Path) -> None:
    repo_id = checkpoint_repo(hub, tmp_path / "w")
    project = policy_project(tmp_path / "p")
    assert run_wlock("add", repo_id, "--loader", "all", "--endpoint", hub.endpoint,
                     cwd=project).code == 0
    cache = tmp_path / "cache"
    assert run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                     cwd=project).code == 0
    clean = run_wlock("audit", "--cache-dir", str(cache), cwd=project)
    assert clean.code == 0, clean.stdout + clean.stderr
    assert "4 files judged from the bytes on disk; 0 violations" in clean.stderr
    repo = read_lock(project / "weights.lock").repos[0]
    blob = next(cache.glob("models--*/blobs/" + next(
        f.etag for f in repo.files if f.path == "pytorch_model.bin")))
    blob.chmod(0o644)
    blob.write_bytes(torch_zip(reduce(EVIL)))
    found = run_wlock("audit", "--format", "json", "--cache-dir", str(cache), cwd=project)
    assert found.code == 7, found.stderr
    kinds = {(v["kind"], v["path"], v["detail"]) for v in json.loads(found.stdout)["violations"]}
    assert ("pickle", "pytorch_model.bin", "posix.system") in kinds
    assert ("changed", "pytorch_model.bin", "posix.system") in kinds
    sarif = run_wlock("audit", "--format", "sarif", "--cache-dir", str(cache), cwd=project)
    assert sarif.code == 7
    assert {r["ruleId"] for r in json.loads(sarif.stdout)["runs"][0]["results"]} == {
        "pickle", "changed"}


def test_a_lock_made_before_records_is_judged_by_the_policy_not_called_changed(
        hub: Hub, tmp_path: Path) -> None:
    """A lock written before pickles were recorded has none: its torch checkpoints are not
    "changed" (there is no record to differ from); sync and audit judge their bytes by the
    policy alone."""
    import re

    repo_id = checkpoint_repo(hub, tmp_path / "w")
    project = policy_project(tmp_path / "p")
    assert run_wlock("add", repo_id, "--loader", "all", "--endpoint", hub.endpoint,
                     cwd=project).code == 0
    lock_file = project / "weights.lock"
    lock_file.write_text(re.sub(r"pickles = \[\n(?:  .*\n)*\]\n", "", lock_file.read_text()))
    assert not read_lock(lock_file).repos[0].pickles
    cache = tmp_path / "cache"
    sync_and_audit(hub, project, cache)


def test_the_sbom_is_cyclonedx_1_6_and_validates(hub: Hub, tmp_path: Path) -> None:
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    base = hub.unique_id("base")
    hub.builder.commit("model", base, {"config.json": b"{}", "model.safetensors": b"\1" * 64,
                                       "README.md": b"---\nlicense: apache-2.0\n"
                                       b"base_model: acme/pretrained\n---\n"})
    hub.builder.configure("model", base, extra={"library_name": "transformers"})
    lora = hub.unique_id("lora")
    hub.builder.commit("model", lora, {
        "adapter_config.json": json.dumps({"base_model_name_or_path": base}).encode(),
        "adapter_model.safetensors": b"\2" * 32,
        "README.md": b"---\nlicense:\n- mit\n- apache-2.0\n---\n"})
    hub.builder.configure("model", lora, extra={"library_name": "peft"})
    project = policy_project(tmp_path)
    assert run_wlock("add", lora, "--endpoint", hub.endpoint, cwd=project).code == 0
    out = tmp_path / "weights.cdx.json"
    made = run_wlock("sbom", "-o", str(out), cwd=project)
    assert made.code == 0, made.stderr
    text = out.read_text()
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
    doc = json.loads(text)
    assert doc["specVersion"] == "1.6" and doc["bomFormat"] == "CycloneDX"
    lock = read_lock(project / "weights.lock")
    components = {c["name"]: c for c in doc["components"]}
    base_c = components[base]
    base_repo = lock.find("model", base)
    assert base_repo is not None
    assert base_c["type"] == "machine-learning-model"
    assert base_c["purl"] == f"pkg:huggingface/{base}@{base_repo.revision}"
    assert base_c["licenses"] == [{"license": {"id": "Apache-2.0"}}]
    assert base_c["pedigree"]["ancestors"][0]["name"] == "acme/pretrained"
    hashes = {f["name"]: f.get("hashes") for f in base_c["components"]}
    safetensors = next(f for f in base_repo.files if f.path == "model.safetensors")
    assert hashes["model.safetensors"] == [{"alg": "SHA-256", "content": safetensors.sha256}]
    deps = {d["ref"]: d.get("dependsOn", []) for d in doc["dependencies"]}
    assert deps[components[lora]["bom-ref"]] == [base_c["bom-ref"]]
    # A card's licence list: each licence, one by one (it was "none recorded" before).
    assert sorted(x["license"]["id"] for x in components[lora]["licenses"]) == [
        "Apache-2.0", "MIT"]
    # Regular files: the git blob id always; the content's hashes once the bytes are synced.
    assert hashes["config.json"] is None
    cache = tmp_path / "cache"
    assert run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                     cwd=project).code == 0
    synced = run_wlock("sbom", "--cache-dir", str(cache), cwd=project)
    assert synced.code == 0, synced.stderr
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(synced.stdout) is None
    files = {f["name"]: f for f in {c["name"]: c for c in json.loads(synced.stdout)[
        "components"]}[base]["components"]}
    assert files["config.json"]["hashes"] == [
        {"alg": "SHA-1", "content": hashlib.sha1(b"{}").hexdigest()},
        {"alg": "SHA-256", "content": hashlib.sha256(b"{}").hexdigest()}]


def test_a_policy_that_is_not_one_is_exit_4_at_its_line(tmp_path: Path) -> None:
    project = policy_project(tmp_path, 'licenses = ["mit"]\npickle = "maybe"\n')
    (project / "weights.lock").write_text(
        "# This file is generated by `wlock lock`. Do not edit it by hand.\nversion = 1\n"
        'manifest = "blake3:af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"\n')
    result = run_wlock("lock", "--check", cwd=project)
    assert result.code == 4, result.stderr
    lines = (project / "weights.toml").read_text().splitlines()
    line = lines.index('pickle = "maybe"') + 1
    assert result.stderr.startswith(
        f"error: {project}/weights.toml:{line}: `tool.wlock.policy.pickle`: 'maybe' is not a "
        "pickle policy"), result.stderr


@pytest.mark.parametrize("loader", ["all", None])
def test_loader_all_follows_auto_map_to_remote_code(hub: Hub, tmp_path: Path,
                                                    loader: str | None) -> None:
    """`loader = "all"` (and an entry without a loader) takes every file and still runs the
    remote-code step: the other repo's code is required and locked, and `remote-code =
    "deny"` refuses it. Seen failing (exit 0, no requirement) with the step skipped."""
    code = hub.unique_id("code-all")
    hub.builder.commit("model", code, {"modeling_x.py": b"class XConfig: pass\n"})
    repo_id = hub.unique_id("remote-all")
    hub.builder.commit("model", repo_id, {
        "config.json": json.dumps({"auto_map": {
            "AutoConfig": f"{code}--modeling_x.XConfig"}}).encode(),
        "model.safetensors": b"\0" * 64})
    entry = f'[[model]]\nid = "{repo_id}"\n' + (f'loader = "{loader}"\n' if loader else "")
    project = policy_project(tmp_path / "a", entries=entry)
    locked = run_wlock("lock", "--endpoint", hub.endpoint, cwd=project)
    assert locked.code == 0, locked.stderr
    lock = read_lock(project / "weights.lock")
    assert lock.find("model", code) is not None
    assert code in lock.find("model", repo_id).requires  # type: ignore[union-attr]
    with (project / "weights.toml").open("a") as f:
        f.write('\n[tool.wlock.policy]\nremote-code = "deny"\n')
    denied = run_wlock("lock", "--upgrade", "--endpoint", hub.endpoint, cwd=project)
    assert denied.code == 7 and "the policy denies remote code" in denied.stderr


REMOTE_ELSEWHERE = {  # (loader, files beside a safetensors, what the lock must record)
    "sentence-transformers module type": ("sentence-transformers", lambda code: {
        "modules.json": json.dumps([
            {"idx": 0, "name": "0", "path": "", "type":
             "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pool", "type": f"{code}--pool.Pool"}]).encode(),
        "config.json": b"{}", "1_Pool/config.json": b"{}"}, "{code}--pool.Pool"),
    "transformers custom_pipelines": ("transformers", lambda code: {
        "config.json": json.dumps({"custom_pipelines": {"pair-classification": {
            "impl": f"{code}--pair.PairPipeline", "pt": ["AutoModel"]}}}).encode()},
        "{code}--pair.PairPipeline"),
    "diffusers [module, class]": ("diffusers", lambda code: {
        "model_index.json": json.dumps({"_class_name": ["pipeline_x", "XPipeline"],
                                        "vae": ["diffusers", "AutoencoderKL"]}).encode(),
        "pipeline_x.py": b"class XPipeline: pass\n", "vae/config.json": b"{}",
        "vae/diffusion_pytorch_model.safetensors": b"\0" * 64}, "pipeline_x.XPipeline"),
    # transformers imports custom_generate/generate.py on a trust_remote_code load of a
    # plain model, no auto_map anywhere (GenerationMixin.load_custom_generate; issue 58).
    "transformers custom_generate": ("transformers", lambda code: {
        "config.json": json.dumps({"model_type": "gpt2"}).encode(),
        "custom_generate/generate.py": b"def generate(model, **kwargs): pass\n"},
        "custom_generate/generate.generate"),
    # generation_config.json picking a mode transformers moved to the Hub: generate() runs
    # transformers-community/dola's custom_generate/generate.py (trust_remote_code).
    "transformers moved generation mode": ("transformers", lambda code: {
        "config.json": json.dumps({"model_type": "gpt2"}).encode(),
        "generation_config.json": json.dumps({"dola_layers": "low"}).encode()},
        "transformers-community/dola--custom_generate/generate.generate"),
    # sentence-transformers' Router: each route's type through import_module_class.
    "sentence-transformers Router types": ("sentence-transformers", lambda code: {
        "modules.json": json.dumps([{"idx": 0, "name": "0", "path": "",
                                     "type": "sentence_transformers.models.Router"}]).encode(),
        "router_config.json": json.dumps({"types": {"query_0": f"{code}--pool.Pool"},
                                          "structure": {"query": ["query_0"]}}).encode(),
        "config.json": b"{}"}, "{code}--pool.Pool"),
    # sentence-transformers' WordEmbeddings: its tokenizer_class, the same way.
    "sentence-transformers WordEmbeddings tokenizer_class": ("sentence-transformers",
                                                             lambda code: {
        "modules.json": json.dumps([{"idx": 0, "name": "0", "path": "0_WordEmbeddings",
                                     "type": "sentence_transformers.models.WordEmbeddings"}]
                                   ).encode(),
        "0_WordEmbeddings/wordembedding_config.json": json.dumps(
            {"tokenizer_class": f"{code}--pool.Pool", "update_embeddings": False}).encode(),
        "config.json": b"{}"}, "{code}--pool.Pool"),
    # sentence-transformers' Dense: an activation outside torch is imported (an installed
    # module: no repo holds it) only under trust_remote_code.
    "sentence-transformers Dense activation_function": ("sentence-transformers", lambda code: {
        "modules.json": json.dumps([
            {"idx": 0, "name": "0", "path": "", "type":
             "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Dense",
             "type": "sentence_transformers.models.Dense"}]).encode(),
        "config.json": b"{}", "1_Dense/config.json": json.dumps(
            {"in_features": 4, "out_features": 4, "bias": True,
             "activation_function": "mypackage.Act"}).encode()}, "import:mypackage.Act"),
    # diffusers' ModularPipelineBlocks: auto_map in modular_config.json.
    "diffusers modular_config.json": ("diffusers", lambda code: {
        "modular_config.json": json.dumps({"_class_name": "MyBlocks", "auto_map": {
            "ModularPipelineBlocks": "block.MyBlocks"}}).encode(),
        "block.py": b"class MyBlocks: pass\n", "model_index.json": json.dumps(
            {"_class_name": "StableDiffusionPipeline", "vae": ["diffusers", "AutoencoderKL"]}
            ).encode(), "vae/config.json": b"{}",
        "vae/diffusion_pytorch_model.safetensors": b"\0" * 64}, "block.MyBlocks"),
}


@pytest.mark.parametrize("where", sorted(REMOTE_ELSEWHERE))
@pytest.mark.parametrize("loader", ["own", "all"])
def test_remote_code_outside_auto_map_is_recorded_required_and_denied(
        hub: Hub, tmp_path: Path, where: str, loader: str) -> None:
    """Code a library finds outside `auto_map` (issue 48): recorded in the lock under the
    entry's loader and under `all`, its other repo required and locked, and refused by
    `remote-code = "deny"` (all three passed deny with exit 0)."""
    own, files, expected = REMOTE_ELSEWHERE[where]
    code = hub.unique_id("code-elsewhere")
    hub.builder.commit("model", code, {"pool.py": b"class Pool: pass\n",
                                       "pair.py": b"class PairPipeline: pass\n"})
    expected = expected.format(code=code)
    required = expected.split("--")[0] if "--" in expected else None
    if required == "transformers-community/dola":
        hub.builder.commit("model", required, {
            "custom_generate/generate.py": b"def generate(model, **kwargs): pass\n"})
    repo_id = hub.unique_id("remote-elsewhere")
    hub.builder.commit("model", repo_id, {**files(code), "model.safetensors": b"\0" * 64})
    entry = f'[[model]]\nid = "{repo_id}"\nloader = "{own if loader == "own" else "all"}"\n'
    project = policy_project(tmp_path / "a", entries=entry)
    locked = run_wlock("lock", "--endpoint", hub.endpoint, cwd=project)
    assert locked.code == 0, locked.stderr
    lock = read_lock(project / "weights.lock")
    record = lock.find("model", repo_id)
    assert record is not None and expected in record.remote_code, record
    if required is not None:
        assert required in record.requires and lock.find("model", required) is not None
    with (project / "weights.toml").open("a") as f:
        f.write('\n[tool.wlock.policy]\nremote-code = "deny"\n')
    denied = run_wlock("lock", "--upgrade", "--endpoint", hub.endpoint, cwd=project)
    assert denied.code == 7 and "the policy denies remote code" in denied.stderr, denied.stderr


@pytest.mark.parametrize("policy", ["deny", "safe-imports"])
def test_a_pickle_recorded_as_none_by_hand_is_judged_by_sync_and_rescan(
        hub: Hub, tmp_path: Path, policy: str) -> None:
    """A pull request turns a pickle's record into `not-a-pickle = true` and the policy to
    deny (or safe-imports): sync's gate judges the bytes anyway, under either policy, and
    refuses them before they are published; `lock --check --rescan` does too (guards: a gate
    that skipped files recorded as no pickle, or did not run under deny, left the suite
    green)."""
    project = edited_by_hand(hub, tmp_path, "not-a-pickle = true", policy)
    assert run_wlock("lock", "--check", cwd=project).code == 0  # the records alone pass
    cache = tmp_path / "cache"
    synced = run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                       cwd=project)
    assert synced.code == 7, synced.stderr
    assert "downloaded bytes hold imports posix.system, where weights.lock records no " \
        "pickle" in synced.stderr, synced.stderr
    assert not list(cache.glob("models--*/snapshots/*/weights.pkl"))
    assert not os.path.exists(f"/tmp/{MARKER}")
    rescanned = run_wlock("lock", "--check", "--rescan", "--endpoint", hub.endpoint,
                          cwd=project)
    assert rescanned.code == 7, rescanned.stderr
    assert "on the Hub holds a pickle importing posix.system" in rescanned.stderr


def test_a_hub_kernel_a_config_names_is_remote_code(hub: Hub, tmp_path: Path) -> None:
    """config.json's `attn_implementation` naming a Hub kernel: transformers reads it into
    the config (asked here) and, with the kernels library installed, runs that repo's
    compiled code on a plain from_pretrained. Under the default policy the lock is refused
    until the kernel repo is locked too; under `remote-code = "deny"` always. Seen passing
    (exit 0, nothing recorded) before config.json's kernels were read."""
    kernel = "kernels-community/flash-attn3"
    repo_id = hub.unique_id("kernel-user")
    config = {"model_type": "llama", "attn_implementation": f"{kernel}:flash_attn_func"}
    hub.builder.commit("model", repo_id, {"config.json": json.dumps(config).encode(),
                                          "model.safetensors": b"\0" * 64})
    hub.builder.commit("model", kernel, {"build/torch-universal/flash_attn3/__init__.py":
                                         b"def flash_attn_func(*a): pass\n"})
    import transformers
    from transformers import AutoConfig
    from transformers.integrations.hub_kernels import is_kernel

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    read = AutoConfig.from_pretrained(tmp_path / "m")._attn_implementation
    assert is_kernel(config["attn_implementation"])
    # transformers 5 takes it from the file; 4.x leaves it to the caller. The lock serves
    # both, so wlock records it either way.
    assert read == (config["attn_implementation"] if int(transformers.__version__.split(".")[0])
                    >= 5 else None)

    entry = f'[[model]]\nid = "{repo_id}"\nloader = "transformers"\n'
    project = policy_project(tmp_path / "a", entries=entry)
    refused = run_wlock("lock", "--endpoint", hub.endpoint, cwd=project)
    assert refused.code == 7, refused.stderr
    assert f"config.json names the Hub kernel {kernel}:flash_attn_func" in refused.stderr
    assert f"add {kernel} to weights.toml" in refused.stderr, refused.stderr
    with (project / "weights.toml").open("a") as f:
        f.write(f'\n[[model]]\nid = "{kernel}"\n')
    locked = run_wlock("lock", "--endpoint", hub.endpoint, cwd=project)
    assert locked.code == 0, locked.stderr
    record = read_lock(project / "weights.lock").find("model", repo_id)
    assert record is not None and record.remote_code == (
        f"kernel:{kernel}:flash_attn_func",)
    with (project / "weights.toml").open("a") as f:
        f.write('\n[tool.wlock.policy]\nremote-code = "deny"\n')
    denied = run_wlock("lock", "--upgrade", "--endpoint", hub.endpoint, cwd=project)
    assert denied.code == 7 and "the policy denies remote code" in denied.stderr
