"""`wlock outdated` against the emulator: a pin whose ref moved is named with the head's
commit, date and title and how far behind (exit 1, as `npm outdated`); one request per repo
when the pin is among the newest 50 commits, pages only as far as needed past that; a pin by
commit costs none; nothing moved is exit 0."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import Hub, run_wlock, write_project


def commit(hub: Hub, repo_id: str, n: int, title: str, day: int = 1) -> str:
    return hub.builder.commit("model", repo_id, {"config.json": f'{{"n": {n}}}'.encode()},
                              message=f"{title}\n\nmore words", date=f"2026-03-{day:02d}T09:00:00.000Z")


def commits_asked(hub: Hub, repo_id: str) -> int:
    return sum(1 for e in hub.process.stats()["log"]
               if f"/api/models/{repo_id}/commits/" in e["path"])


def test_a_moved_ref_is_named_with_its_head_and_how_far_behind(hub: Hub, tmp_path: Path
                                                               ) -> None:
    moved, still = hub.unique_id("moved"), hub.unique_id("still")
    locked = commit(hub, moved, 0, "first")
    commit(hub, still, 0, "only")
    project = write_project(tmp_path, f'[[model]]\nid = "{moved}"\n\n[[model]]\nid = "{still}"\n')
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    same = run_wlock("outdated", "--endpoint", hub.endpoint, cwd=project)
    assert same.code == 0 and same.stdout.count("up to date") == 2, same.stdout
    commit(hub, moved, 1, "add a tokenizer", day=2)
    head = commit(hub, moved, 2, "fix the second shard", day=3)
    hub.process.reset_stats()
    done = run_wlock("outdated", "--endpoint", hub.endpoint, cwd=project)
    assert done.code == 1, done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith(moved))
    assert f"main        {locked[:7]} -> {head[:7]}  2 commits behind  2026-03-03  " \
        "fix the second shard" in line, line
    assert next(x for x in done.stdout.splitlines() if x.startswith(still)).endswith(
        "up to date")
    assert "1 of 2 moved: `wlock lock --upgrade-package ID`" in done.stderr
    assert commits_asked(hub, moved) == 1 and commits_asked(hub, still) == 1
    doc = json.loads(run_wlock("outdated", "--json", "--endpoint", hub.endpoint,
                               cwd=project).stdout)
    assert doc["ok"] is False and doc["exit_code"] == 1
    [entry] = [e for e in doc["entries"] if e["id"] == moved]
    assert entry == {"kind": "model", "id": moved, "ref": "main", "locked": locked,
                     "head": head, "head_date": "2026-03-03T09:00:00.000Z",
                     "head_title": "fix the second shard", "behind": 2, "moved": True}
    # Moved on purpose: up to date again.
    assert run_wlock("lock", "--upgrade-package", moved, "--endpoint", hub.endpoint,
                     cwd=project).code == 0
    assert run_wlock("outdated", "--endpoint", hub.endpoint, cwd=project).code == 0


def test_far_behind_pages_only_as_needed_and_the_listing_is_what_huggingface_hub_reads(
        hub: Hub, tmp_path: Path) -> None:
    far = hub.unique_id("far")
    locked = commit(hub, far, 0, "first")
    project = write_project(tmp_path, f'[[model]]\nid = "{far}"\n')
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    for n in range(1, 121):
        commit(hub, far, n, f"step {n}")
    hub.process.reset_stats()
    done = run_wlock("outdated", "--json", "--endpoint", hub.endpoint, cwd=project)
    [entry] = json.loads(done.stdout)["entries"]
    assert entry["behind"] == 120 and entry["head_title"] == "step 120" and \
        entry["locked"] == locked
    assert commits_asked(hub, far) == 3  # 50 a page: the pin is on the third
    # The emulator's commit listing, every page, as huggingface_hub's own client reads it.
    from huggingface_hub import HfApi

    listed = HfApi(endpoint=hub.endpoint).list_repo_commits(far)
    assert [c.title for c in listed[:2]] == ["step 120", "step 119"] and len(listed) == 121
    assert listed[-1].commit_id == locked and listed[0].created_at.year == 2026


def test_an_entry_pinned_by_commit_costs_no_request(hub: Hub, tmp_path: Path) -> None:
    repo_id = hub.unique_id("bysha")
    first = commit(hub, repo_id, 0, "first")
    commit(hub, repo_id, 1, "second")
    project = write_project(tmp_path, f'[[model]]\nid = "{repo_id}"\nref = "{first}"\n')
    assert run_wlock("lock", "--endpoint", hub.endpoint, cwd=project).code == 0
    hub.process.reset_stats()
    done = run_wlock("outdated", "--endpoint", hub.endpoint, cwd=project)
    assert done.code == 0 and "up to date" in done.stdout
    assert commits_asked(hub, repo_id) == 0
