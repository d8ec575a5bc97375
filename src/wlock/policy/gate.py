"""The policy's gate in `sync`: the bytes that land are the bytes judged.

`lock` judges each file from HTTP ranges, a preview: a server can show those reads a decoy
and serve a download other bytes (with the hash the Hub lists), and a lock's records can be
edited in a pull request. So sync judges every file again from its verified bytes, in the
temp file, before it becomes visible, and refuses it (exit 7, nothing published) when the
policy refuses what the bytes import, or when they differ from the lock's record.
"""

from __future__ import annotations

from collections.abc import Callable

from wlock.errors import PolicyError
from wlock.models import LockedFile, LockedRepo, PickleScan
from wlock.policy import Policy, expected_scan, judge_format, judge_pickle, judges_formats
from wlock.scan import formats_judged, is_judged, judge_file, judge_formats


def admission(policy: Policy) -> Callable[[LockedRepo, LockedFile, str], None] | None:
    """The check `execute_plan(admit=...)` calls for each verified blob; None when the
    policy allows any pickle and every other format (nothing to judge)."""
    if policy.pickle == "allow" and not judges_formats(policy):
        return None

    def admit(repo: LockedRepo, f: LockedFile, temp: str) -> None:
        if not f.size:
            return
        problems: list[str] = []
        if judges_formats(policy) and formats_judged(repo.kind, f.path):
            # The other formats (chat templates, Keras configs, ONNX external data), judged
            # from the bytes about to be published whatever the lock records (an edited
            # record says nothing of them).
            with open(temp, "rb") as handle:
                problems += [v.message for t in judge_formats(handle, f.path, policy.limits,
                                                              f.size)
                             for v in judge_format(repo.id, t, policy)]
        if policy.pickle == "allow" or not is_judged(repo.kind, f.path):
            _refuse(repo, f, problems, policy)
            return
        with open(temp, "rb") as handle:
            found = judge_file(handle, f.path, policy.limits, f.size)
        problems += [v.message for v in judge_pickle(repo.id, found, policy)]
        # Bytes that differ from what the lock says are not the bytes `lock` judged; where
        # the lock says nothing, the policy alone judges them.
        old = expected_scan(repo, f.path)
        if old is not None and (old.imports, old.pickle) != (found.imports, found.pickle):
            problems.append(_differs(repo, found, old))
        _refuse(repo, f, problems, policy)

    return admit


def _refuse(repo: LockedRepo, f: LockedFile, problems: list[str], policy: Policy) -> None:
    if problems:
        raise PolicyError(
            "; ".join(problems) + " (refused before it was published: nothing of it is "
            "in the cache)",
            hint=f"The policy in {policy.path} refuses these bytes. If the lock's record "
            "differs, the lock was edited or the server showed `wlock lock` other bytes "
            "than it serves: check weights.lock's history, and lock again "
            "(`wlock lock --check --rescan` judges the Hub's bytes now).",
            subject=f"{repo.id}/{f.path}")


def _differs(repo: LockedRepo, found: PickleScan, old: PickleScan) -> str:
    def shown(scan: PickleScan) -> str:
        if not scan.pickle:
            return "no pickle"
        return "imports " + (", ".join(scan.imports) or "nothing")

    return (f"{repo.id}: {found.path}'s downloaded bytes hold {shown(found)}, where "
            f"weights.lock records {shown(old)}")
