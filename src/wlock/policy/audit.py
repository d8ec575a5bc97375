"""`wlock audit`: the lock and the bytes synced from it, judged against the policy, offline.

Every locked pickle that is on disk is scanned again (its bytes, not the lock's record: a
file swapped in the cache after a sync is judged as it is), and a scan that differs from the
lock's record is itself a finding. Licences and remote code are judged from the lock.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from wlock.cache.layout import RepoPaths
from wlock.lock.pickles import is_pickle_name, scan
from wlock.models import Lock, PickleScan
from wlock.policy import Policy, Violation, judge_repo


@dataclass
class AuditReport:
    violations: list[Violation] = field(default_factory=list)
    scanned: int = 0  # pickles scanned on disk
    from_lock: int = 0  # pickles not on disk, judged from the lock's record
    unjudged: list[str] = field(default_factory=list)  # neither on disk nor recorded

    @property
    def ok(self) -> bool:
        return not self.violations


def audit(lock: Lock, policy: Policy, cache_dir: Path) -> AuditReport:
    report = AuditReport()
    for repo in lock.repos:
        recorded = {p.path: p for p in repo.pickles}
        paths = RepoPaths.of(cache_dir, repo)
        scans: list[PickleScan] = []
        for f in repo.files:
            if not is_pickle_name(f.path):
                continue
            on_disk = paths.link(repo.revision, f.path)
            try:
                with open(os.path.realpath(on_disk), "rb") as handle:
                    found = scan(handle, f.path)
            except (FileNotFoundError, NotADirectoryError):
                if f.path in recorded:
                    scans.append(recorded[f.path])
                    report.from_lock += 1
                else:
                    report.unjudged.append(f"{repo.id}: {f.path}")
                continue
            report.scanned += 1
            scans.append(found)
            old = recorded.get(f.path)
            if old is not None and (old.imports, old.pickle) != (found.imports, found.pickle):
                added = sorted(set(found.imports) - set(old.imports))
                report.violations.append(Violation(
                    "changed", repo.id, f.path, ", ".join(added),
                    f"{repo.id}: {f.path} on disk imports "
                    f"{', '.join(added) or 'other names'} where the lock recorded "
                    f"{', '.join(old.imports) or 'none'}: the file is not the one locked "
                    f"(run `wlock check`, then `wlock sync`)"))
        report.violations += judge_repo(repo, lock, policy, scans)
    return report
