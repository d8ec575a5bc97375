"""The core under real use (issue 8): offline mode, machines with only the lock, pins that
stay put when only globs change. Real command line, real HTTP to the emulator."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import Hub, run_wlock, write_project
from wlock.lock.lockfile import read_lock

OFFLINE = {"HF_HUB_OFFLINE": "1"}


def locked(hub: Hub, root: Path, manifest: str = '[[model]]\nid = "acme/tiny-bert"\n') -> Path:
    project = write_project(root / "p", manifest)
    result = run_wlock("lock", "--endpoint", hub.endpoint, cwd=project)
    assert result.code == 0, result.stderr
    return project


def requests(hub: Hub) -> int:
    counts = hub.process.stats()["requests"]
    return int(counts["hub"] + counts["cdn"])


def test_lock_offline_keeps_an_unchanged_lock_and_names_what_needs_the_hub(
    hub: Hub, tmp_path: Path
) -> None:
    project = locked(hub, tmp_path)
    before = requests(hub)
    for how in ({"env": OFFLINE}, {"flag": "--offline"}):
        argv = ["lock", "--endpoint", hub.endpoint, *([how["flag"]] if "flag" in how else [])]
        same = run_wlock(*argv, cwd=project, env=how.get("env"))  # type: ignore[arg-type]
        assert same.code == 0, same.stderr
    (project / "weights.toml").write_text(
        '[[model]]\nid = "acme/tiny-bert"\n\n[[dataset]]\nid = "acme/tiny-squad"\n')
    needs = run_wlock("lock", "--endpoint", hub.endpoint, cwd=project, env=OFFLINE)
    assert needs.code == 5
    assert needs.stderr == (
        "error: offline mode is on (--offline or HF_HUB_OFFLINE=1) and these entries need the "
        "Hub: acme/tiny-squad (new)\nhint: Run `wlock lock` with network access; an unchanged "
        "weights.toml locks offline.\n")
    assert requests(hub) == before


def test_sync_offline_links_what_is_present_and_reports_what_is_missing(
    hub: Hub, tmp_path: Path
) -> None:
    project = locked(hub, tmp_path)
    cache = tmp_path / "cache"
    before = requests(hub)
    missing = run_wlock("sync", "--offline", "--cache-dir", str(cache), "--endpoint",
                        hub.endpoint, cwd=project)
    assert missing.code == 5
    files = len(read_lock(project / "weights.lock").repos[0].files)
    assert f"error: {files} files failed:\n  offline mode is on (--offline or HF_HUB_OFFLINE=1) " \
        f"and these are not in the cache: {files} files (acme/tiny-bert/" in missing.stderr
    assert requests(hub) == before

    assert run_wlock("sync", "--cache-dir", str(cache), "--endpoint", hub.endpoint,
                     cwd=project).code == 0
    shutil.rmtree(next((cache / "models--acme--tiny-bert" / "snapshots").iterdir()))
    before = requests(hub)
    relinked = run_wlock("sync", "--cache-dir", str(cache), "--endpoint", hub.endpoint,
                         cwd=project, env=OFFLINE)
    assert relinked.code == 0, relinked.stderr
    assert run_wlock("check", "--cache-dir", str(cache), cwd=project, env=OFFLINE).code == 0
    assert requests(hub) == before


def test_a_folder_with_only_the_lock(hub: Hub, tmp_path: Path) -> None:
    project = locked(hub, tmp_path)
    deploy = tmp_path / "deploy"
    deploy.mkdir()
    shutil.copy(project / "weights.lock", deploy / "weights.lock")
    cache = tmp_path / "cache"
    frozen = run_wlock("sync", "--frozen", "--cache-dir", str(cache), "--endpoint",
                       hub.endpoint, cwd=deploy)
    assert frozen.code == 0, frozen.stderr
    checked = run_wlock("check", "--cache-dir", str(cache), cwd=deploy)
    assert checked.code == 0, checked.stderr
    ran = run_wlock("run", "--cache-dir", str(cache), "--", sys.executable, "-c",
                    "import wlock; print(wlock.revision('acme/tiny-bert'))", cwd=deploy)
    assert ran.code == 0, ran.stderr
    assert ran.stdout.strip() == read_lock(deploy / "weights.lock").repos[0].revision
    plain = run_wlock("sync", "--cache-dir", str(cache), "--endpoint", hub.endpoint, cwd=deploy)
    assert plain.code == 0 and "note: no weights.toml beside" in plain.stderr
    # From anywhere, by WLOCK_LOCK or --lock.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    by_env = run_wlock("check", "--cache-dir", str(cache), cwd=elsewhere,
                       env={"WLOCK_LOCK": str(deploy / "weights.lock")})
    assert by_env.code == 0, by_env.stderr
    by_flag = run_wlock("check", "--cache-dir", str(cache), "--lock",
                        str(deploy / "weights.lock"), cwd=elsewhere)
    assert by_flag.code == 0, by_flag.stderr
    nothing = run_wlock("check", "--cache-dir", str(cache), cwd=elsewhere)
    assert nothing.code == 4 and "weights.lock: not found in" in nothing.stderr
    assert "--lock FILE (or set WLOCK_LOCK)" in nothing.stderr


def test_editing_only_globs_keeps_the_pin(hub: Hub, tmp_path: Path) -> None:
    repo_id = hub.unique_id("globs")
    first = hub.builder.commit("model", repo_id, {"config.json": b"{}\n", "a.bin": b"a",
                                                  "onnx/model.onnx": b"o"})
    project = locked(hub, tmp_path, f'[[model]]\nid = "{repo_id}"\n')
    hub.builder.commit("model", repo_id, {"config.json": b'{"v": 2}\n'})  # main moves on
    assert run_wlock("add", repo_id, "--exclude", "onnx/", "--no-lock", cwd=project).code == 0
    dry = run_wlock("lock", "--dry-run", "--endpoint", hub.endpoint, cwd=project)
    assert dry.code == 0, dry.stderr
    assert dry.stdout.startswith(f"{repo_id}  main  {first[:7]} (kept; files re-selected): 0 "
                                 "added, 1 removed, 0 changed;"), dry.stdout
    assert "  - onnx/model.onnx (1 B)\n" in dry.stdout
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    repo = read_lock(project / "weights.lock").repos[0]
    assert repo.revision == first
    assert [f.path for f in repo.files] == ["a.bin", "config.json"]
    moved = run_wlock("lock", "--upgrade-package", repo_id, "--endpoint", hub.endpoint,
                      cwd=project)
    assert moved.code == 0
    assert read_lock(project / "weights.lock").repos[0].revision != first


CHILD = """
import hashlib, sys
from pathlib import Path
from huggingface_hub import hf_hub_download, snapshot_download
repo, other = sys.argv[1], sys.argv[2]
path = hf_hub_download(repo, "config.json")              # bare name: no revision
print(Path(path).read_text().strip())
print(Path(snapshot_download(repo)).name)                # the commit it resolved to
try:
    hf_hub_download(other, "config.json")
    print("unlocked loaded")
except Exception as e:                                   # LocalEntryNotFoundError
    print("unlocked refused", type(e).__name__)
"""


def test_two_projects_share_one_cache(hub: Hub, tmp_path: Path) -> None:
    repo_id = hub.unique_id("shared")
    first = hub.builder.commit("model", repo_id, {"config.json": b'{"v": 1}\n',
                                                  "weights.bin": b"w" * 1000})
    a = locked(hub, tmp_path / "a", f'[[model]]\nid = "{repo_id}"\n')
    second = hub.builder.commit("model", repo_id, {"config.json": b'{"v": 2}\n'})
    b = locked(hub, tmp_path / "b", f'[[model]]\nid = "{repo_id}"\n')
    # A third project put another repo in the same cache: not loadable from A or B.
    c = locked(hub, tmp_path / "c")
    cache = tmp_path / "shared-cache"
    sync_c = run_wlock("sync", "--cache-dir", str(cache), "--endpoint", hub.endpoint, cwd=c)
    assert sync_c.code == 0
    (tmp_path / "child.py").write_text(CHILD)

    for order in ((a, b), (b, a)):
        for project in order:
            done = run_wlock("sync", "--cache-dir", str(cache), "--endpoint", hub.endpoint,
                             cwd=project)
            assert done.code == 0, done.stderr
        for project, commit, version in ((a, first, 1), (b, second, 2)):
            checked = run_wlock("check", "--cache-dir", str(cache), cwd=project)
            assert checked.code == 0, checked.stdout + checked.stderr
            ran = run_wlock("run", "--cache-dir", str(cache), "--", sys.executable,
                            str(tmp_path / "child.py"), repo_id, "acme/tiny-bert",
                            cwd=project, env={"HF_ENDPOINT": hub.endpoint})
            assert ran.code == 0, ran.stderr
            assert ran.stdout.splitlines() == [
                f'{{"v": {version}}}', commit, "unlocked refused LocalEntryNotFoundError"]
    # The last sync (A's) wrote the shared ref: B's check says so, and passes.
    note = run_wlock("check", "--cache-dir", str(cache), cwd=b)
    assert note.code == 0
    assert f"the shared refs/main points at {first[:7]}, not this lock's {second[:7]}" \
        in note.stderr
    assert (b / ".wlock" / ".gitignore").read_text().endswith("*\n")


def test_a_flipped_byte_is_repaired_and_readers_never_see_a_half_file(
    hub: Hub, tmp_path: Path
) -> None:
    import hashlib
    import threading

    project = locked(hub, tmp_path)
    cache = tmp_path / "cache"
    assert run_wlock("sync", "--cache-dir", str(cache), "--endpoint", hub.endpoint,
                     cwd=project).code == 0
    repo = read_lock(project / "weights.lock").repos[0]
    weights = next(f for f in repo.files if f.path == "model.safetensors")
    blob = cache / "models--acme--tiny-bert" / "blobs" / weights.etag
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0x01
    blob.write_bytes(bytes(data))
    bad = hashlib.sha256(data).hexdigest()

    found = run_wlock("check", "--cache-dir", str(cache), cwd=project)
    assert found.code == 1
    assert f"wrong bytes: model acme/tiny-bert: model.safetensors: expected sha256 " \
        f"{weights.etag}, found {bad}" in found.stdout
    assert found.stderr.endswith("Run `wlock sync --verify` to repair.\n")

    seen: set[str] = set()
    stop = threading.Event()
    path = cache / "models--acme--tiny-bert" / "snapshots" / repo.revision / weights.path

    def reader() -> None:
        while not stop.is_set():
            seen.add(hashlib.sha256(path.read_bytes()).hexdigest())

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        plain = run_wlock("sync", "--cache-dir", str(cache), "--endpoint", hub.endpoint,
                          cwd=project)
        assert plain.code == 0 and "Already in sync" in plain.stderr  # stat cannot tell
        repaired = run_wlock("sync", "--verify", "--cache-dir", str(cache), "--endpoint",
                             hub.endpoint, cwd=project)
        assert repaired.code == 0, repaired.stderr
    finally:
        stop.set()
        thread.join()
    assert seen <= {bad, weights.etag}, "a reader saw bytes that were neither"
    assert weights.etag in seen or hashlib.sha256(path.read_bytes()).hexdigest() == weights.etag
    assert run_wlock("check", "--cache-dir", str(cache), cwd=project).code == 0


def git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          cwd=cwd, capture_output=True, text=True)


def test_a_merge_conflict_in_the_lock_is_resolved_without_moving_pins_silently(
    hub: Hub, tmp_path: Path
) -> None:
    stay, moved, added = (hub.unique_id(n) for n in ("stay", "moved", "added"))
    for repo_id in (stay, moved, added):  # distinct bytes: distinct commit ids
        hub.builder.commit("model", repo_id, {"config.json": repo_id.encode()})
    project = locked(hub, tmp_path, f'[[model]]\nid = "{stay}"\n\n[[model]]\nid = "{moved}"\n')
    before = read_lock(project / "weights.lock")
    git(project, "init", "-q", "-b", "main")
    git(project, "add", ".")
    git(project, "commit", "-qm", "base")
    # Both heads move on the Hub; each branch re-locks something different.
    hub.builder.commit("model", stay, {"config.json": f"{stay} v2".encode()})
    theirs = hub.builder.commit("model", moved, {"config.json": f"{moved} v2".encode()})
    git(project, "checkout", "-qb", "upgrade")
    assert run_wlock("lock", "--upgrade-package", moved, "--endpoint", hub.endpoint,
                     cwd=project).code == 0
    git(project, "commit", "-qam", "upgrade moved")
    git(project, "checkout", "-q", "main")
    head = hub.builder.commit("model", moved, {"config.json": f"{moved} v3".encode()})
    assert run_wlock("add", added, "--no-lock", cwd=project).code == 0
    assert run_wlock("lock", "--upgrade-package", moved, "--endpoint", hub.endpoint,
                     cwd=project).code == 0
    git(project, "commit", "-qam", "add one")
    merge = git(project, "merge", "upgrade")
    assert merge.returncode != 0 and "weights.lock" in merge.stdout
    assert "<<<<<<<" in (project / "weights.lock").read_text()

    refused = run_wlock("check", "--cache-dir", str(tmp_path / "c"), cwd=project)
    assert refused.code == 4 and "has unresolved merge conflict markers" in refused.stderr
    assert "hint: Run `wlock lock`" in refused.stderr

    resolved = run_wlock("lock", "--endpoint", hub.endpoint, cwd=project)
    assert resolved.code == 0, resolved.stderr
    after = {r.id: r.revision for r in read_lock(project / "weights.lock").repos}
    old = {r.id: r.revision for r in before.repos}
    # stay: both sides agree on the old pin, although the Hub's head moved on.
    assert after[stay] == old[stay]
    assert f"merge: {stay}: kept {old[stay][:7]} (both sides agree)" in resolved.stderr
    # moved: the sides differ; it is resolved again and the note says so.
    assert (f"merge: {moved}: the two sides pin {head[:7]} (ours) and {theirs[:7]} (theirs); "
            "resolving 'main' on the Hub again, which may move it to the current head"
            ) in resolved.stderr
    assert after[moved] == head
    # added: kept as locked (outside the conflict, both sides carry it).
    assert f"merge: {added}: kept {after[added][:7]} (" in resolved.stderr
    # Changes are shown against our side of the merge: here, nothing moved.
    assert resolved.stdout == ""
    assert run_wlock("lock", "--check", cwd=project).code == 0


def test_transformers_loads_this_projects_commit_by_bare_name(hub: Hub, tmp_path: Path) -> None:
    """Where transformers is installed (CI's compatibility job: transformers 4.x on
    huggingface_hub 0.3x), a bare-name from_pretrained under `wlock run` gets the lock's
    commit though the shared refs/main says otherwise."""
    import pytest

    pytest.importorskip("transformers")
    project = locked(hub, tmp_path, '[[model]]\nid = "acme/tiny-bert"\nref = "v1.0"\n'
                     'include = ["config.json"]\n')
    lock_file = project / "weights.lock"
    # Pin it under `main` as another project would, at the tag's older commit.
    lock_file.write_text(lock_file.read_text().replace('requested = "v1.0"',
                                                       'requested = "main"'))
    (project / "weights.toml").write_text('[[model]]\nid = "acme/tiny-bert"\n'
                                          'include = ["config.json"]\n')
    cache = tmp_path / "cache"
    other = locked(hub, tmp_path / "other", '[[model]]\nid = "acme/tiny-bert"\n'
                   'include = ["config.json"]\n')
    for p in (project, other):  # the other project's sync moves the shared refs/main last
        assert run_wlock("sync", "--frozen", "--cache-dir", str(cache), "--endpoint",
                         hub.endpoint, cwd=p).code == 0
    code = ("from pathlib import Path\n"
            "from transformers import AutoConfig\n"
            "from transformers.utils import cached_file\n"
            "c = AutoConfig.from_pretrained('acme/tiny-bert')\n"
            "print(c.model_type, Path(cached_file('acme/tiny-bert', 'config.json')).parent.name)\n")
    ran = run_wlock("run", "--cache-dir", str(cache), "--", sys.executable, "-c", code,
                    cwd=project)
    assert ran.code == 0, ran.stderr
    assert ran.stdout.split() == ["bert", read_lock(lock_file).repos[0].revision]


def test_datasets_and_transformers_load_the_locked_commit_offline_by_folder(
    hub: Hub, tmp_path: Path
) -> None:
    """`datasets` cannot resolve a repo id offline (its load.py asks the Hub first); the
    locked commit's folder it can: wlock.snapshot_path() gives it, found from the script's
    own folder though the script runs from elsewhere. transformers takes the folder too."""
    import json

    dataset_id = hub.unique_id("gsm-mini")
    rows = {split: [{"question": f"{split} {n}?", "answer": str(n)} for n in range(3)]
            for split in ("train", "test")}
    hub.builder.commit("dataset", dataset_id, {
        f"data/{split}.jsonl": "".join(json.dumps(r) + "\n" for r in split_rows).encode()
        for split, split_rows in rows.items()} | {"README.md": b"# gsm-mini\n"})
    project = locked(hub, tmp_path, f'[[dataset]]\nid = "{dataset_id}"\n\n'
                     '[[model]]\nid = "acme/tiny-bert"\ninclude = ["*.json", "*.txt"]\n')
    assert run_wlock("sync", "--endpoint", hub.endpoint, cwd=project).code == 0  # $HF_HOME
    (project / "evaluate.py").write_text(
        "import wlock\n"
        "from datasets import load_dataset\n"
        "from transformers import AutoConfig\n"
        f"data = load_dataset(str(wlock.snapshot_path({dataset_id!r})))\n"
        "print(data['test'][2]['answer'], len(data['train']))\n"
        "config = AutoConfig.from_pretrained(wlock.snapshot_path('acme/tiny-bert'))\n"
        "print(config.model_type)\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    hub.process.reset_stats()
    ran = subprocess.run(
        [sys.executable, str(project / "evaluate.py")], cwd=elsewhere, capture_output=True,
        text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1",
                                     "HF_DATASETS_OFFLINE": "1", "HF_ENDPOINT": hub.endpoint,
                                     "HF_DATASETS_CACHE": str(tmp_path / "datasets-cache")})
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.split() == ["2", "3", "bert"]
    assert requests(hub) == 0  # offline: had anything asked the Hub, it would show here


def test_snapshot_path_says_what_to_do_when_the_commit_is_not_synced(
    hub: Hub, tmp_path: Path
) -> None:
    project = locked(hub, tmp_path)
    ran = subprocess.run(
        [sys.executable, "-c", "import wlock; wlock.snapshot_path('ACME/tiny-bert')"],
        cwd=project, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 1
    assert "NotSyncedError: model acme/tiny-bert @ " in ran.stderr
    assert "is not in the cache at" in ran.stderr


def test_lint_fix_writes_the_readmes_offline_dataset_load_and_it_runs(
        hub: Hub, tmp_path: Path) -> None:
    """Lint agrees with the README (issue 47): `load_dataset(str(wlock.snapshot_path(id)))`
    and `revision=rev` after `rev = wlock.revision(id)` are pinned, not findings; `--fix` of
    `load_dataset(id, split=...)` writes that folder form (it wrote a `revision=`, which
    fails offline), and the fixed script loads under `wlock run` with the real datasets."""
    import json

    dataset_id = hub.unique_id("fix-me")
    hub.builder.commit("dataset", dataset_id, {
        "data/train.jsonl": b"".join(json.dumps({"n": n}).encode() + b"\n" for n in range(3)),
        "README.md": b"# fix me\n"})
    project = locked(hub, tmp_path, f'[[dataset]]\nid = "{dataset_id}"\n\n'
                     '[[model]]\nid = "acme/tiny-bert"\ninclude = ["*.json", "*.txt"]\n')
    cache = tmp_path / "cache"
    assert run_wlock("sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache),
                     cwd=project).code == 0
    (project / "readme_forms.py").write_text(
        "import wlock\n"
        "from datasets import load_dataset\n"
        "from transformers import AutoConfig\n"
        f"data = load_dataset(str(wlock.snapshot_path({dataset_id!r})), split='train')\n"
        "rev = wlock.revision('acme/tiny-bert')\n"
        "config = AutoConfig.from_pretrained('acme/tiny-bert', revision=rev)\n")
    clean = run_wlock("lint", "readme_forms.py", cwd=project)
    assert clean.code == 0, clean.stdout + clean.stderr
    (project / "train.py").write_text(
        "from datasets import load_dataset\n"
        f"data = load_dataset({dataset_id!r}, split='train')\n"
        "print(len(data), data[2]['n'])\n")
    found = run_wlock("lint", "train.py", cwd=project)
    assert found.code == 1 and "WL101" in found.stdout
    assert "wlock.snapshot_path" in found.stdout
    fixed = run_wlock("lint", "--fix", "train.py", cwd=project)
    assert fixed.code == 0, fixed.stdout + fixed.stderr
    assert f"load_dataset(str(wlock.snapshot_path({dataset_id!r})), split='train')" in (
        project / "train.py").read_text()
    assert run_wlock("lint", "train.py", cwd=project).code == 0
    hub.process.reset_stats()
    ran = run_wlock("run", "--cache-dir", str(cache), "--", sys.executable, "train.py",
                    cwd=project, env={"HF_DATASETS_CACHE": str(tmp_path / "datasets-cache")})
    assert ran.code == 0, ran.stderr[-3000:]
    assert ran.stdout.split() == ["3", "2"]
    assert requests(hub) == 0
