"""Messages that name what the user did (issue 61): each mistake a newcomer makes gets one
sentence about their own input and the advice that fits it, the contract's exit code, and the
same in the JSON error document (`kind`, `hint`, the file or flag named). Each was seen
giving the wrong advice before: deleting a lock written by a newer wlock, "unsupported lock
version None" for the manifest given as the lock, "differs from weights.toml" for an upgrade
asked of `lock --check`, "not a folder, not a folder", "not enough free space" on /proc."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import ROOT, Result, run_wlock
from wlock.hubserver.fixtures import example_manifest


@pytest.fixture
def project(tmp_path: Path) -> Path:
    shutil.copyfile(example_manifest(), tmp_path / "weights.toml")
    shutil.copyfile(ROOT / "weights.lock.example", tmp_path / "weights.lock")
    return tmp_path


def both(project: Path, *args: str, env: dict[str, str] | None = None
         ) -> tuple[Result, dict[str, object]]:
    """The command's words, and its JSON error document (the same exit code)."""
    said = run_wlock(*args, cwd=project, env=env)
    as_json = run_wlock("--json", *args, cwd=project, env=env)
    assert as_json.code == said.code, (said.stderr, as_json.stdout)
    error = json.loads(as_json.stdout)["error"]
    assert isinstance(error, dict)
    return said, error


def test_the_manifest_given_as_the_lock_is_named_as_such(project: Path) -> None:
    said, error = both(project, "sync", "--frozen", "--lock", "weights.toml")
    assert said.code == 4, said.stderr
    assert f"{project / 'weights.toml'}: is not a lock: it has no `version` and no " \
        "`manifest` (it is the manifest wlock locks from)" in said.stderr
    assert "version None" not in said.stderr and "delete it" not in said.stderr
    assert error["kind"] == "invalid file" and "--lock weights.lock" in str(error["hint"])


def test_a_lock_from_a_newer_wlock_says_upgrade_wlock(project: Path) -> None:
    lock = project / "weights.lock"
    lock.write_text(lock.read_text().replace("version = 1\n", "version = 2\n", 1))
    said, error = both(project, "sync", "--frozen")
    assert said.code == 4, said.stderr
    assert f"{lock}:2: `version`: was written by a newer wlock (lock version 2; this wlock " \
        "reads version 1)" in said.stderr
    assert "Upgrade wlock" in said.stderr and "delete it" not in said.stderr
    assert "pipx upgrade wlock" in str(error["hint"])


def test_check_with_an_upgrade_says_the_upgrade_not_the_manifest(project: Path) -> None:
    """Exit 3 (the lock would change), in words about the flag the user gave, not about a
    weights.toml nobody touched."""
    said, error = both(project, "lock", "--check", "--upgrade-package", "acme/tiny-bert")
    assert said.code == 3, said.stderr
    assert "--upgrade-package acme/tiny-bert asks for new pins, which `--check` does not " \
        "look for" in said.stderr
    assert "weights.toml" not in said.stderr
    assert error["kind"] == "stale lock" and "wlock outdated" in str(error["hint"])


def test_a_device_as_the_cache_is_named_once(project: Path) -> None:
    said, error = both(project, "check", "--cache-dir", "/dev/null")
    assert said.code == 6, said.stderr
    assert "the cache /dev/null (from --cache-dir) cannot be used: /dev/null is a device, " \
        "not a folder" in said.stderr
    assert "not a folder, not a folder" not in said.stderr
    assert "--cache-dir" in str(error["hint"])


def test_json_goes_before_the_command_as_after_it(project: Path) -> None:
    """`wlock --json sync` as `wlock sync --json` (it was "No such option"), a group's
    subcommand included; one document either way."""
    for args in (["--json", "check"], ["check", "--json"], ["--json", "-q", "check"]):
        done = run_wlock(*args, "--cache-dir", str(project / "cache"), cwd=project)
        assert done.code == 1, (args, done.stderr)  # nothing synced: every file missing
        assert json.loads(done.stdout)["ok"] is False, args
    grouped = run_wlock("--json", "checkpoints", "keep", str(project / "no-run"), cwd=project)
    assert grouped.code == 2 and json.loads(grouped.stdout)["error"]["kind"] == "usage"


def test_a_cache_on_a_virtual_filesystem_is_not_a_full_disk(project: Path) -> None:
    said, error = both(project, "sync", "--frozen", "--endpoint", "http://127.0.0.1:9",
                       env={"HF_HOME": "/proc/wlock-nope"})
    assert said.code == 6, said.stderr
    assert "the cache /proc/wlock-nope/hub cannot be made: /proc is on proc, a virtual filesystem" \
        in said.stderr
    assert "free space" not in said.stderr
    assert error["kind"] == "local"
