"""`wlock lock` and the manifest commands through the real command line, against the
emulator over HTTP: exit codes and the exact messages a user sees."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tests.conftest import GATED_TOKEN, Hub, read_only, run_wlock, tmpfs, write_project
from wlock.lock.lockfile import read_lock

DEAD_ENDPOINT = "http://127.0.0.1:9"  # the discard port: nothing listens on loopback


def make_repo(hub: Hub, stem: str, kind: str = "model") -> tuple[str, str]:
    repo_id = hub.unique_id(stem)
    sha = hub.builder.commit(kind, repo_id, {"config.json": b'{"v": 1}\n',
                                             "model.safetensors": b"\x00" * 1024})
    return repo_id, sha


def test_lock_writes_then_rewrites_nothing(hub: Hub, tmp_path: Path) -> None:
    project = write_project(tmp_path, '[[model]]\nid = "acme/tiny-bert"\n\n'
                                      '[[dataset]]\nid = "acme/tiny-squad"\nref = "v1.0"\n')
    first = run_wlock("lock", "--endpoint", hub.endpoint, cwd=project)
    assert first.code == 0, first.stderr
    lock = read_lock(project / "weights.lock")
    assert [r.id for r in lock.repos] == ["acme/tiny-bert", "acme/tiny-squad"]
    bert = lock.repos[0]
    assert first.stdout.splitlines() == [
        f"acme/tiny-bert  main  (new) -> {bert.revision[:7]}",
        f"acme/tiny-squad  v1.0  (new) -> {lock.repos[1].revision[:7]}",
    ]
    assert first.stderr.startswith("Wrote weights.lock: 2 repos, 13 files, 394.8 kB in ")
    stat = (project / "weights.lock").stat()
    hub.process.reset_stats()
    second = run_wlock("lock", "--endpoint", hub.endpoint, cwd=project)
    assert second.code == 0 and second.stdout == ""
    assert second.stderr.startswith("Unchanged: weights.lock: 2 repos")
    assert (project / "weights.lock").stat().st_mtime_ns == stat.st_mtime_ns
    assert hub.process.stats()["requests"]["hub"] == 0
    # --upgrade asks the Hub again; nothing moved there: no pin is listed as a change.
    upgraded = run_wlock("lock", "--upgrade", "--endpoint", hub.endpoint, cwd=project)
    assert upgraded.code == 0 and upgraded.stdout == "", upgraded.stdout
    assert upgraded.stderr.startswith("Unchanged: weights.lock: 2 repos"), upgraded.stderr


def test_moved_branch_keeps_the_pin_until_upgraded(hub: Hub, tmp_path: Path) -> None:
    repo_id, old = make_repo(hub, "moving")
    project = write_project(tmp_path, f'[[model]]\nid = "{repo_id}"\nref = "main"\n')
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    new = hub.builder.commit("model", repo_id, {"config.json": b'{"v": 2}\n'})
    assert new != old

    kept = run_wlock("lock", "--endpoint", hub.endpoint, cwd=project)
    assert kept.code == 0 and read_lock(project / "weights.lock").repos[0].revision == old
    check = run_wlock("lock", "--check", "--endpoint", DEAD_ENDPOINT, cwd=project)
    assert check.code == 0, check.stderr
    assert check.stderr == "weights.lock is up to date (1 repo, 2 files, 1.0 kB).\n"

    before = (project / "weights.lock").read_bytes()
    dry = run_wlock("lock", "--upgrade-package", repo_id, "--dry-run", "--endpoint",
                    hub.endpoint, cwd=project)
    assert dry.code == 0
    # The reviewer's report of the move: what changed (the same size: the git blob ids
    # say the bytes differ), and what a sync would fetch.
    was = next(f for f in read_lock(project / "weights.lock").repos[0].files
               if f.path == "config.json").etag
    now = hashlib.sha1(b'blob 9\x00{"v": 2}\n').hexdigest()
    report = (f"{repo_id}  main  {old[:7]} -> {new[:7]}: 0 added, 0 removed, 1 changed; a "
              "fresh machine downloads 1.0 kB, this upgrade 9 B{}\n  ~ config.json (9 B, "
              f"other bytes: {was[:7]} -> {now[:7]})\n")
    # This cache holds nothing yet: the dry run, which plans the sync, says so.
    assert dry.stdout == report.format(" (1.0 kB into this cache, as sync would plan it)")
    assert dry.stderr.startswith(
        "Would write weights.lock: 1 change. (--dry-run: nothing written)\n"
        "A sync would download ")
    assert (project / "weights.lock").read_bytes() == before

    moved = run_wlock("lock", "--upgrade-package", repo_id, "--endpoint", hub.endpoint,
                      cwd=project)
    assert moved.code == 0 and moved.stdout == report.format("")
    locked = read_lock(project / "weights.lock").repos[0]
    assert locked.revision == new
    assert {f.path: f.size for f in locked.files} == {"config.json": 9,
                                                      "model.safetensors": 1024}


def test_check_reports_a_stale_lock_with_exit_3_and_no_request(hub: Hub, tmp_path: Path) -> None:
    project = write_project(tmp_path, '[[model]]\nid = "acme/tiny-bert"\n')
    missing = run_wlock("lock", "--check", cwd=project)
    assert missing.code == 3
    assert missing.stderr == (
        f"error: weights.lock needs to be updated, but `--check` was provided: "
        f"{project}/weights.lock does not exist\n"
        "hint: To update the lock file, run `wlock lock`.\n"
    )
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    (project / "weights.toml").write_text(
        '[[model]]\nid = "acme/tiny-bert"\ninclude = ["*.json"]\n\n'
        '[[dataset]]\nid = "acme/tiny-squad"\n'
    )
    stale = run_wlock("lock", "--check", "--endpoint", DEAD_ENDPOINT, cwd=project)
    assert stale.code == 3
    assert stale.stderr == (
        "error: weights.lock needs to be updated, but `--check` was provided: weights.toml has "
        "changed (added acme/tiny-squad; changed: acme/tiny-bert's include/exclude differ from the lock's)\n"
        "hint: To update the lock file, run `wlock lock`.\n"
    )
    # Globs that sort before the locked ones differ all the same.
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    (project / "weights.toml").write_text(
        '[[model]]\nid = "acme/tiny-bert"\ninclude = ["*.bin"]\n\n'
        '[[dataset]]\nid = "acme/tiny-squad"\n'
    )
    narrowed = run_wlock("lock", "--check", "--endpoint", DEAD_ENDPOINT, cwd=project)
    assert narrowed.code == 3
    assert "(changed: acme/tiny-bert's include/exclude differ from the lock's)" in (
        narrowed.stderr), narrowed.stderr
    # And locking re-selects the files by globs that sort before the locked ones too.
    (project / "weights.toml").write_text(
        '[[model]]\nid = "acme/tiny-bert"\ninclude = ["*.j*"]\n\n'
        '[[dataset]]\nid = "acme/tiny-squad"\n'
    )
    relocked = run_wlock("lock", "--endpoint", hub.endpoint, cwd=project)
    assert relocked.code == 0, relocked.stderr
    assert run_wlock("lock", "--check", "--endpoint", DEAD_ENDPOINT, cwd=project).code == 0
    bert = next(r for r in read_lock(project / "weights.lock").repos if r.id == "acme/tiny-bert")
    assert bert.include == ("*.j*",) and bert.files


def test_a_locked_file_outside_the_entrys_globs_makes_the_lock_stale(
    hub: Hub, tmp_path: Path
) -> None:
    """A lock whose file list was edited (a bad merge) to hold a file its `include` does
    not select: `lock --check` calls it stale, naming the file, with no request."""
    project = write_project(tmp_path, '[[model]]\nid = "acme/tiny-bert"\ninclude = ["*.json"]\n')
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    lock_file = project / "weights.lock"
    text = lock_file.read_text()
    assert 'path = "config.json"' in text
    lock_file.write_text(text.replace('path = "config.json"', 'path = "config.bin"'))
    stale = run_wlock("lock", "--check", "--endpoint", DEAD_ENDPOINT, cwd=project)
    assert stale.code == 3, stale.stderr
    assert "(changed: acme/tiny-bert: locked file 'config.bin' is outside its globs)" in (
        stale.stderr), stale.stderr


@pytest.mark.parametrize("forged", ["0" * 64, "f" * 64])
def test_a_lock_whose_manifest_digest_was_edited_is_stale(
    hub: Hub, tmp_path: Path, forged: str
) -> None:
    """Every entry agrees with weights.toml, but the lock records another manifest: it was
    edited by hand or written for another weights.toml. Stale, whichever way the digests
    sort."""
    project = write_project(tmp_path, '[[model]]\nid = "acme/tiny-bert"\n')
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    lock_file = project / "weights.lock"
    text = lock_file.read_text()
    digest = text.split('manifest = "', 1)[1].split('"', 1)[0]
    lock_file.write_text(text.replace(digest, f"blake3:{forged}"))
    stale = run_wlock("lock", "--check", "--endpoint", DEAD_ENDPOINT, cwd=project)
    assert stale.code == 3
    assert "its manifest digest does not match weights.toml" in stale.stderr


def test_comment_only_edits_keep_the_lock_fresh(hub: Hub, tmp_path: Path) -> None:
    project = write_project(tmp_path, '[[model]]\nid = "acme/tiny-bert"\n')
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    (project / "weights.toml").write_text('# pinned for the paper\n[[model]]\n'
                                          'id = "acme/tiny-bert"   # encoder\nref = "main"\n')
    assert run_wlock("lock", "--check", cwd=project).code == 0


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    project = write_project(tmp_path, '[[model]]\nid = "acme/tiny-bert"\n')
    unknown = run_wlock("lock", "--frobnicate", cwd=project)
    # click words it "No such option: --x" (8.1.0) or "No such option '--x'." (newer).
    assert unknown.code == 2 and "No such option" in unknown.stderr
    assert "--frobnicate" in unknown.stderr.splitlines()[-1]
    package = run_wlock("lock", "--upgrade-package", "acme/other", cwd=project)
    assert package.code == 2
    assert package.stderr == (
        f"error: --upgrade-package acme/other: not in {project}/weights.toml\n"
        "hint: Entries are: acme/tiny-bert.\n"
    )
    both = run_wlock("lock", "--check", "--dry-run", cwd=project)
    assert both.code == 2 and "--check and --dry-run cannot be used together" in both.stderr
    bad_add = run_wlock("add", "not a repo", cwd=project)
    assert bad_add.code == 2
    assert bad_add.stderr == (
        "error: 'not a repo' is not a Hub repo id (letters, digits, '-', '_', '.'; `org/name`)\nhint: Write it as `org/name[@ref]`.\n"
    )
    for spec, problem in (("acme/tiny-bert@../../../x", "contains '..'"),
                          ("acme/tiny-bert@/etc/passwd", "is not a valid ref"),
                          ("acme/tiny-bert@a b", "holds a control character or a space")):
        hostile = run_wlock("add", spec, cwd=project)
        assert hostile.code == 2 and problem in hostile.stderr, hostile.stderr
    assert (project / "weights.toml").read_text() == '[[model]]\nid = "acme/tiny-bert"\n'


def test_invalid_manifest_exits_4_naming_file_line_and_key(hub: Hub, tmp_path: Path) -> None:
    project = write_project(tmp_path, '[[model]]\nid = "acme/tiny-bert"\nrevision = "main"\n')
    result = run_wlock("lock", "--endpoint", hub.endpoint, cwd=project)
    assert result.code == 4
    assert result.stderr == (
        f"error: {project}/weights.toml:3: `model.revision`: unknown key\n"
        "hint: An entry takes id, ref, include, exclude, loader, variant, base, config, split, mmproj.\n"
    )
    write_project(tmp_path, '[[model]]\nid = "acme/tiny-bert"\ninclude = ["*.gguf"]\n')
    glob = run_wlock("lock", "--endpoint", hub.endpoint, cwd=project)
    assert glob.code == 4
    assert glob.stderr.startswith(
        f"error: {project}/weights.toml:3: `model.include`: '*.gguf' matches no file of "
        "acme/tiny-bert at "
    )
    assert not (project / "weights.lock").exists()
    nowhere = run_wlock("lock", cwd=tmp_path / "..")
    assert nowhere.code == 4 and "weights.toml: not found in" in nowhere.stderr


def test_hub_errors_exit_5_with_the_repo_and_what_to_do(hub: Hub, tmp_path: Path) -> None:
    project = write_project(tmp_path, '[[model]]\nid = "acme/nope"\n')
    # Anonymous: the live Hub's bare 401 (no X-Error-Code), the same for a repo that does
    # not exist, a private one and a gated one; the message says so, not "your token".
    missing = run_wlock("lock", "--endpoint", hub.endpoint, cwd=project)
    assert missing.code == 5
    assert missing.stderr == (
        f"error: model acme/nope was not found on {hub.endpoint}, or is private or gated: "
        "the Hub answers an anonymous request for any of these 401\n"
        "hint: Check the id (its page on the Hub shows whether it exists, is private or is "
        "gated); for a private or gated repo, set HF_TOKEN (or pass --token) with a token "
        "that has access.\n"
    )
    # With a token the Hub says RepoNotFound (404), and so do we.
    missing = run_wlock("lock", "--endpoint", hub.endpoint, "--token", "hf_some", cwd=project)
    assert missing.code == 5
    assert missing.stderr == (
        f"error: model acme/nope was not found on {hub.endpoint}\n"
        "hint: Check the id in weights.toml; if the repo is private, set HF_TOKEN (or pass "
        "--token) with a token that has access.\n"
    )
    write_project(tmp_path, '[[model]]\nid = "acme/tiny-bert"\nref = "v9"\n')
    revision = run_wlock("lock", "--endpoint", hub.endpoint, cwd=project)
    assert revision.code == 5
    assert revision.stderr == (
        "error: model acme/tiny-bert: revision 'v9' not found\n"
        "hint: Check `ref` in weights.toml: a branch, a tag or a 40-hex commit.\n"
    )
    unreachable = run_wlock("lock", "--endpoint", DEAD_ENDPOINT, cwd=project)
    assert unreachable.code == 5
    assert unreachable.stderr.startswith(f"error: cannot reach {DEAD_ENDPOINT} for model ")


def test_gated_repo_needs_a_token_and_the_token_is_never_shown(hub: Hub, tmp_path: Path) -> None:
    secret = "hf_SECRETsecretSECRET1234567890"
    hub.process.faults({"action": "status", "match": "/api/models/acme/gated-llama",
                        "status": 403, "error_code": "GatedRepo",
                        "message": "Access to model acme/gated-llama is restricted."})
    project = write_project(tmp_path, '[[model]]\nid = "acme/gated-llama"\n')
    result = run_wlock("--debug", "lock", "--endpoint", hub.endpoint, "--token", secret,
                       cwd=project)
    assert result.code == 5
    assert result.stderr.endswith(
        "error: model acme/gated-llama is gated and the request was refused (403)\n"
        "hint: Accept its terms on the Hub, then set HF_TOKEN (or pass --token) with a token "
        "that has access.\n"
    )
    assert secret not in result.stdout + result.stderr
    hub.process.faults()
    # A token with access (the lock reads the repo's configs for remote code, which a gated
    # repo serves only to a token that accepted its terms).
    ok = run_wlock("lock", "--endpoint", hub.endpoint, cwd=project,
                   env={"HF_TOKEN": GATED_TOKEN})
    assert ok.code == 0 and GATED_TOKEN not in ok.stdout + ok.stderr, ok.stderr
    assert GATED_TOKEN not in (project / "weights.lock").read_text()
    assert [r for r in hub.process.stats()["log"] if r["auth"]], "the token was sent to the Hub"


def test_rate_limits_and_server_errors_are_retried(hub: Hub, tmp_path: Path) -> None:
    hub.process.faults(
        {"action": "status", "match": "/api/models/acme/tiny-bert", "status": 429,
         "retry_after": 1, "times": 2},
        {"action": "status", "match": "/api/datasets/acme/tiny-squad", "status": 503,
         "times": 1},
    )
    project = write_project(tmp_path, '[[model]]\nid = "acme/tiny-bert"\n\n'
                                      '[[dataset]]\nid = "acme/tiny-squad"\n')
    result = run_wlock("lock", "--endpoint", hub.endpoint, cwd=project)
    assert result.code == 0, result.stderr
    # Repo info, retried (the tree listing, asked after it for every file, aside).
    paths = [r["path"] for r in hub.process.stats()["log"] if "/tree/" not in r["path"]]
    assert sum("/api/models/acme/tiny-bert" in p for p in paths) == 3
    assert sum("/api/datasets/acme/tiny-squad" in p for p in paths) == 2


def test_persistent_rate_limit_gives_up_with_exit_5(hub: Hub, tmp_path: Path) -> None:
    """A 429 that does not state a spent budget (the emulator's headers say requests are
    left) is retried a bounded number of times, as any transient failure."""
    hub.process.faults({"action": "status", "match": "/api/models/", "status": 429,
                        "retry_after": 0})
    project = write_project(tmp_path, '[[model]]\nid = "acme/tiny-bert"\n')
    result = run_wlock("lock", "--endpoint", hub.endpoint, cwd=project)
    assert result.code == 5
    assert result.stderr.startswith(
        "error: model acme/tiny-bert: the Hub is rate limiting us (429) after 6 attempts\n"
    )


def test_malicious_listing_is_refused(hub: Hub, tmp_path: Path) -> None:
    project = write_project(tmp_path, '[[model]]\nid = "acme/tiny-bert"\n')
    for name in ("../../../.bashrc", "/etc/passwd", "a\\b.json", "x/../../y"):
        hub.process.faults({"action": "inject_file", "match": "acme/tiny-bert", "name": name})
        result = run_wlock("lock", "--endpoint", hub.endpoint, cwd=project)
        assert result.code == 5, name
        assert result.stderr.startswith(
            f"error: acme/tiny-bert: the Hub listed an unsafe file path {name!r}"
        )
        assert not (project / "weights.lock").exists()


@pytest.mark.parametrize("old", ["acme/old-tiny-bert", "acme/zz-tiny-bert"])
def test_renamed_repo_is_locked_with_a_warning(hub: Hub, tmp_path: Path, old: str) -> None:
    """Whichever way the new name sorts against the old one."""
    hub.builder.rename("model", old, "acme/tiny-bert")
    project = write_project(tmp_path, f'[[model]]\nid = "{old}"\n')
    result = run_wlock("lock", "--endpoint", hub.endpoint, cwd=project)
    assert result.code == 0
    assert f"warning: {old} was renamed to acme/tiny-bert on the Hub" in result.stderr


def test_json_report(hub: Hub, tmp_path: Path) -> None:
    import json

    project = write_project(tmp_path, '[[model]]\nid = "acme/tiny-bert"\ninclude = ["*.json"]\n')
    result = run_wlock("lock", "--json", "--endpoint", hub.endpoint, cwd=project)
    report = json.loads(result.stdout)
    assert report["written"] is True and report["files"] == 2
    assert report["changes"][0]["id"] == "acme/tiny-bert" and report["changes"][0]["old"] is None
    # Locked already: a dry run writes nothing and says so; nor does one with changes.
    dry = json.loads(run_wlock("lock", "--json", "--dry-run", "--endpoint", hub.endpoint,
                               cwd=project).stdout)
    assert dry["written"] is False and dry["changes"] == [] and dry["files"] == 2
    checked = json.loads(run_wlock("lock", "--json", "--check", cwd=project).stdout)
    assert checked["written"] is False and checked["changes"] == [] and checked["files"] == 2
    (project / "weights.lock").unlink()
    first = json.loads(run_wlock("lock", "--json", "--dry-run", "--endpoint", hub.endpoint,
                                 cwd=project).stdout)
    assert first["written"] is False and first["changes"] and first["files"] == 2
    assert not (project / "weights.lock").exists()


def test_read_only_project_exits_6(hub: Hub, tmp_path: Path) -> None:
    with tmpfs(tmp_path / "ro", "1m") as mount:
        write_project(mount, '[[model]]\nid = "acme/tiny-bert"\n')
        read_only(mount)
        result = run_wlock("lock", "--endpoint", hub.endpoint, cwd=mount)
        assert result.code == 6
        assert result.stderr == (
            f"error: cannot write {mount}/weights.lock: Read-only file system\n"
            "hint: Check that the folder exists, is writable and has free space.\n"
        )


def test_init_add_remove_round_trip(tmp_path: Path) -> None:
    assert run_wlock("init", cwd=tmp_path).code == 0
    added = run_wlock("add", "acme/tiny-bert@v1.0", "--include", "*.json", "--no-lock",
                      cwd=tmp_path)
    assert added.code == 0
    assert added.stderr == (
        f"Added model acme/tiny-bert in {tmp_path}/weights.toml. Run `wlock lock` to pin it.\n"
    )
    text = (tmp_path / "weights.toml").read_text()
    assert text.startswith("# weights.toml: the models and datasets this project uses")
    assert text.endswith('[[model]]\nid = "acme/tiny-bert"\nref = "v1.0"\ninclude = ["*.json"]\n')
    removed = run_wlock("remove", "acme/tiny-bert", "--dataset", cwd=tmp_path)
    assert removed.code == 2
    assert removed.stderr.endswith("hint: It is listed as a model: leave out --dataset.\n")
    assert run_wlock("remove", "acme/tiny-bert", cwd=tmp_path).code == 0
    assert "[[model]]\nid" not in (tmp_path / "weights.toml").read_text()


def test_json_errors_are_json_on_stdout(hub: Hub, tmp_path: Path) -> None:
    import json

    project = write_project(tmp_path, '[[model]]\nid = "acme/tiny-bert"\nrevision = "main"\n')
    invalid = run_wlock("lock", "--json", "--endpoint", hub.endpoint, cwd=project)
    assert invalid.code == 4
    report = json.loads(invalid.stdout)
    assert report["ok"] is False and report["error"]["exit_code"] == 4
    assert report["error"]["message"] == f"{project}/weights.toml:3: `model.revision`: unknown key"
    assert invalid.stderr.startswith("error: ")  # the text is still there for people
    usage = run_wlock("sync", "--json", "--jobs", "0", cwd=project)
    assert usage.code == 2 and json.loads(usage.stdout)["error"]["kind"] == "usage"
    write_project(tmp_path, '[[model]]\nid = "acme/does-not-exist"\n')
    hub_error = run_wlock("lock", "--json", "--endpoint", hub.endpoint, cwd=project)
    assert hub_error.code == 5 and json.loads(hub_error.stdout)["error"]["exit_code"] == 5


def test_dash_capital_v_prints_the_version_as_uv_does() -> None:
    from wlock import __version__

    for flag in ("-V", "--version"):
        result = run_wlock(flag)
        assert result.code == 0 and result.stdout == f"wlock, version {__version__}\n"


def test_add_checks_the_hub_and_locks_like_uv_add(hub: Hub, tmp_path: Path) -> None:
    project = write_project(tmp_path, '[[model]]\nid = "acme/tiny-bert"\n')
    manifest = (project / "weights.toml").read_text()
    ep = ("--endpoint", hub.endpoint)

    missing = run_wlock("add", "acme/no-such-repo", *ep, cwd=project)
    assert missing.code == 5 and "acme/no-such-repo was not found" in missing.stderr
    assert "weights.toml was left as it was" in missing.stderr
    as_model = run_wlock("add", "acme/tiny-squad", *ep, cwd=project)  # it is a dataset
    assert as_model.code == 5
    assert "but a dataset acme/tiny-squad exists: did you mean the dataset?" in as_model.stderr
    assert "wlock add --dataset acme/tiny-squad" in as_model.stderr
    # add wrote no entry (weights.toml is as it was): nothing to move or remove (issue 61).
    assert "Move it to" not in as_model.stderr and "wlock remove" not in as_model.stderr
    as_json = run_wlock("--json", "add", "acme/tiny-squad", *ep, cwd=project)
    error = json.loads(as_json.stdout)["error"]
    assert error["hint"].startswith("Add the dataset: `wlock add --dataset acme/tiny-squad`."), \
        error
    no_ref = run_wlock("add", "acme/tiny-bert@no-such-tag", *ep, cwd=project)
    assert no_ref.code == 5 and "revision 'no-such-tag' not found" in no_ref.stderr
    assert (project / "weights.toml").read_text() == manifest  # each left it as it was
    assert not (project / "weights.lock").exists()

    added = run_wlock("add", "acme/tiny-squad@v1.0", "--dataset", *ep, cwd=project)
    assert added.code == 0, added.stderr
    assert "and locked it at" in added.stderr
    lock = read_lock(project / "weights.lock")
    assert {r.id for r in lock.repos} == {"acme/tiny-bert", "acme/tiny-squad"}


def test_add_keeps_every_other_entry_at_its_locked_commit(hub: Hub, tmp_path: Path) -> None:
    """As `uv add`: adding an entry locks it and leaves the others where the lock has them,
    even when their branch has moved on the Hub since (only `lock --upgrade` moves them)."""
    repo_id = hub.unique_id("moving")
    pinned = hub.builder.commit("model", repo_id, {"config.json": b'{"v": 1}\n'})
    project = write_project(tmp_path, f'[[model]]\nid = "{repo_id}"\n')
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    moved = hub.builder.commit("model", repo_id, {"config.json": b'{"v": 2}\n'})
    assert moved != pinned
    added = run_wlock("add", "acme/tiny-squad@v1.0", "--dataset", "--endpoint", hub.endpoint,
                      cwd=project)
    assert added.code == 0, added.stderr
    revisions = {r.id: r.revision for r in read_lock(project / "weights.lock").repos}
    assert revisions[repo_id] == pinned
    assert set(revisions) == {repo_id, "acme/tiny-squad"}


@pytest.mark.parametrize(("before", "after"), [("main", "v1.0"), ("v1.0", "main")])
def test_a_changed_ref_is_locked_again_whichever_way_it_sorts(
    hub: Hub, tmp_path: Path, before: str, after: str
) -> None:
    """weights.toml moves an entry from one ref to another (their commits differ): `lock`
    pins the new ref's commit, as a fresh lock would, and `lock --check` then passes."""
    project = write_project(tmp_path, f'[[model]]\nid = "acme/tiny-bert"\nref = "{before}"\n')
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    old = read_lock(project / "weights.lock").repos[0].revision
    manifest = f'[[model]]\nid = "acme/tiny-bert"\nref = "{after}"\n'
    (project / "weights.toml").write_text(manifest)
    fresh = write_project(tmp_path / "fresh", manifest)
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=fresh).code == 0
    new = read_lock(fresh / "weights.lock").repos[0].revision
    assert new != old
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    relocked = read_lock(project / "weights.lock").repos[0]
    assert (relocked.requested, relocked.revision) == (after, new)
    assert run_wlock("lock", "--check", "--endpoint", DEAD_ENDPOINT, cwd=project).code == 0


@pytest.mark.parametrize("upgrade", [("--upgrade",), ("--upgrade-package", "acme/tiny-bert")])
def test_check_with_an_upgrade_asked_is_stale(
    hub: Hub, tmp_path: Path, upgrade: tuple[str, ...]
) -> None:
    """`lock --check` promises to write nothing and ask nothing; an upgrade asks the Hub:
    together they exit 3 (the lock would change), even with the lock up to date."""
    project = write_project(tmp_path, '[[model]]\nid = "acme/tiny-bert"\n')
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    checked = run_wlock("lock", "--check", *upgrade, "--endpoint", DEAD_ENDPOINT, cwd=project)
    assert checked.code == 3, checked.stderr


def test_lock_reports_every_bad_entry_at_once(hub: Hub, tmp_path: Path) -> None:
    project = write_project(tmp_path, '[[model]]\nid = "acme/nope-one"\n\n'
                            '[[model]]\nid = "acme/tiny-bert"\nref = "no-such-branch"\n\n'
                            '[[model]]\nid = "acme/tiny-squad"\n\n'
                            '[[dataset]]\nid = "acme/tiny-squad"\nref = "v1.0"\n')
    done = run_wlock("lock", "--endpoint", hub.endpoint, cwd=project)
    assert done.code == 5
    assert "3 entries of weights.toml failed:" in done.stderr
    for words in ("model acme/nope-one was not found", "revision 'no-such-branch' not found",
                  "did you mean the dataset?"):
        assert words in done.stderr, words
    # What to do about each, once each, under one hint.
    hint = done.stderr[done.stderr.index("\nhint: "):]
    for words in ("Check the id (its page", "Check `ref` in weights.toml",
                  "Move it to a [[dataset]] table"):
        assert hint.count(words) == 1, (words, hint)


def test_a_fresh_lock_in_another_layout_is_rewritten_only_when_not_a_dry_run(
    hub: Hub, tmp_path: Path
) -> None:
    """A lock that says the right things in other bytes (reformatted by an editor, here a
    blank line more at the end) is written back as `wlock lock` writes it, so that the next
    diff shows only real changes; a dry run leaves it as it is."""
    project = write_project(tmp_path, '[[model]]\nid = "acme/tiny-bert"\n')
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    path = project / "weights.lock"
    canonical = path.read_bytes()
    path.write_bytes(canonical + b"\n")
    dry = run_wlock("lock", "--dry-run", "--endpoint", hub.endpoint, cwd=project)
    assert dry.code == 0, dry.stderr
    assert path.read_bytes() == canonical + b"\n"
    done = run_wlock("lock", "--endpoint", hub.endpoint, cwd=project)
    assert done.code == 0, done.stderr
    assert path.read_bytes() == canonical


@pytest.mark.parametrize("variable", ["HF_HUB_CACHE", "HF_HOME", "--cache-dir"])
def test_a_cache_path_through_a_file_is_exit_6_naming_it(tmp_path: Path, variable: str) -> None:
    """A regression of the torture run: HF_HUB_CACHE or HF_HOME at a regular file made
    check, sync, run and status die of NotADirectoryError, exit 1, which CI reads as corrupt
    weights. Now exit 6 naming the setting and the file; commands that never touch the
    cache (lint, lock --check) do not care."""
    project = tmp_path / "p"
    project.mkdir()
    root = Path(__file__).resolve().parents[2]
    (project / "weights.lock").write_bytes((root / "weights.lock.example").read_bytes())
    (project / "weights.toml").write_bytes((root / "fixtures/example/weights.toml").read_bytes())
    afile = tmp_path / "afile"
    afile.write_text("a file\n")
    flags: tuple[str, ...] = ()
    env = {"HF_HUB_CACHE": "", "HF_HOME": ""}
    if variable == "--cache-dir":
        flags, cache = ("--cache-dir", str(afile / "hub")), afile / "hub"
    else:
        env[variable] = str(afile)
        cache = afile if variable == "HF_HUB_CACHE" else afile / "hub"
    problem = f"{afile} is a file" if cache == afile else f"{afile}, on its way, is a file"
    for argv in (["check"], ["sync", "--dry-run", "--offline"], ["sync", "--offline"],
                 ["status"], ["run", "--", "true"], ["check", "--json"]):
        result = run_wlock(*argv[:1], *flags, *argv[1:], cwd=project, env=env)
        assert result.code == 6, (argv, result.code, result.stderr)
        assert "Traceback" not in result.stderr
        if "--json" not in argv:
            assert result.stderr.splitlines()[0] == (
                f"error: the cache {cache} (from {variable}) cannot be used: {problem}, "
                "not a folder"), result.stderr
    assert run_wlock("lock", "--check", cwd=project, env=env).code == 0
    assert run_wlock("lint", str(project), cwd=project, env=env).code == 0


def test_add_blames_the_flag_it_was_given(hub: Hub, tmp_path: Path) -> None:
    """An add whose flag names what the repo does not have says so of the flag, not of a
    line of weights.toml the user never wrote (and that was put back as it was)."""
    project = write_project(tmp_path / "p", "")
    before = (project / "weights.toml").read_bytes()
    cases = {
        ("acme/tiny-bert", "--variant", "int8"):
            ("--variant int8: acme/tiny-bert at bd07acc: no 'int8' variant", "Drop --variant"),
        ("acme/tiny-squad", "--dataset", "--config", "nope"):
            ("--config nope: acme/tiny-squad at 6c7cdb5: no config 'nope'", None),
        ("acme/tiny-squad", "--dataset", "--split", "nope"):
            ("--split nope: acme/tiny-squad at 6c7cdb5: config 'default' has no split", None),
        ("acme/tiny-bert", "--include", "*.nope"):
            ("--include *.nope: '*.nope' matches no file of acme/tiny-bert", "or fix --include"),
        ("acme/tiny-bert@nope",): (None, "Check the @nope of acme/tiny-bert@nope"),
    }
    for args, (message, hint) in cases.items():
        done = run_wlock("add", *args, "--endpoint", hub.endpoint, cwd=project)
        assert done.code in (4, 5), done.stderr
        if message:
            assert done.stderr.startswith(f"error: {message}"), done.stderr
            assert "weights.toml:" not in done.stderr.splitlines()[0]
        if hint:
            assert hint in done.stderr, done.stderr
        assert (project / "weights.toml").read_bytes() == before


def test_a_renamed_repo_is_added_once_under_its_current_name(hub: Hub, tmp_path: Path) -> None:
    """As the Hub redirects an old name: `add` writes the name the Hub gives now, once, and
    says so; adding the old name again changes nothing."""
    hub.builder.rename("model", "acme/older-tiny-bert", "acme/tiny-bert")
    project = write_project(tmp_path, "")
    added = run_wlock("add", "acme/older-tiny-bert", "--endpoint", hub.endpoint, cwd=project)
    assert added.code == 0, added.stderr
    assert "acme/older-tiny-bert was renamed to acme/tiny-bert on the Hub: added as " \
        "acme/tiny-bert." in added.stderr
    manifest = (project / "weights.toml").read_text()
    assert 'id = "acme/tiny-bert"' in manifest and "older" not in manifest
    assert [r.id for r in read_lock(project / "weights.lock").repos] == ["acme/tiny-bert"]
    again = run_wlock("add", "acme/older-tiny-bert", "--endpoint", hub.endpoint, cwd=project)
    assert again.code == 0, again.stderr
    assert (project / "weights.toml").read_text().count("[[model]]") == 1


@pytest.mark.parametrize("flags", [["--loader", "transformers"], ["--loader", "all",
                                                                   "--include", "*.json"]])
def test_a_renamed_repo_added_with_a_loader_is_added_under_its_current_name(
        hub: Hub, tmp_path: Path, flags: list[str]) -> None:
    """With --loader the Hub is not asked before the entry is written: the lock finds the
    rename, and the entry goes under the current name, once, locked so."""
    hub.builder.rename("model", "acme/oldest-tiny-bert", "acme/tiny-bert")
    project = write_project(tmp_path, "")
    added = run_wlock("add", "acme/oldest-tiny-bert", *flags, "--endpoint", hub.endpoint,
                      cwd=project)
    assert added.code == 0, added.stderr
    assert "acme/oldest-tiny-bert was renamed to acme/tiny-bert on the Hub: added as " \
        "acme/tiny-bert." in added.stderr
    manifest = (project / "weights.toml").read_text()
    assert 'id = "acme/tiny-bert"' in manifest and "oldest" not in manifest
    assert flags[1] in manifest  # the loader given is kept
    assert [r.id for r in read_lock(project / "weights.lock").repos] == ["acme/tiny-bert"]
    assert run_wlock("lock", "--check", cwd=project).code == 0


def test_a_short_commit_id_resolves_as_the_hub_resolves_it(hub: Hub, tmp_path: Path) -> None:
    """The Hub resolves a unique prefix of a commit (7 hex digits or more; huggingface_hub
    #197), and so does the emulator: `add ID@<short>` locks the full commit, `add --no-lock`
    writes the same ref and `lock` pins it to the same commit; a prefix no commit has is
    refused by `add` with weights.toml left as it was. (`add` answered "not found" where
    `--no-lock` wrote it.)"""
    full = "bd07acc5bf8db7db6d4061d522ed246e5f81088f"
    added = write_project(tmp_path / "added", "")
    done = run_wlock("add", "acme/tiny-bert@bd07acc", "--endpoint", hub.endpoint, cwd=added)
    assert done.code == 0, done.stderr
    entry = read_lock(added / "weights.lock").find("model", "acme/tiny-bert")
    assert entry is not None and (entry.requested, entry.revision) == ("bd07acc", full)
    offline = write_project(tmp_path / "offline", "")
    done = run_wlock("add", "acme/tiny-bert@bd07acc", "--no-lock", cwd=offline)
    assert done.code == 0, done.stderr
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=offline).code == 0
    later = read_lock(offline / "weights.lock").find("model", "acme/tiny-bert")
    assert later is not None and (later.requested, later.revision) == ("bd07acc", full)
    before = (added / "weights.toml").read_text()
    refused = run_wlock("add", "acme/tiny-lm@0000000", "--endpoint", hub.endpoint, cwd=added)
    assert refused.code == 5, refused.stderr
    assert "0000000" in refused.stderr
    assert (added / "weights.toml").read_text() == before


def test_add_base_on_a_repo_that_is_no_adapter_names_the_flag(hub: Hub, tmp_path: Path
                                                             ) -> None:
    """`add ID --base B` where ID loads with transformers: the error is the flag's, not a
    line of weights.toml that was never written (it cited `weights.toml:18` of a 12-line
    file), and weights.toml is left as it was."""
    project = write_project(tmp_path, "# twelve\n" * 12)
    before = (project / "weights.toml").read_text()
    done = run_wlock("add", "acme/tiny-bert", "--base", "acme/tiny-lm", "--endpoint",
                     hub.endpoint, cwd=project)
    assert done.code == 4, done.stderr
    assert done.stderr.startswith("error: --base acme/tiny-lm: `base` names an adapter's "
                                  "base model: it needs loader = \"peft\""), done.stderr
    assert "weights.toml:" not in done.stderr
    assert "Add it with --loader peft, or drop --base." in done.stderr
    assert (project / "weights.toml").read_text() == before
