"""`wlock audit`: the lock and the bytes synced from it, judged against the policy, offline.

Every locked file that is on disk is judged again from its bytes (wlock.scan: not the lock's
record; a file swapped in the cache after a sync is judged as it is), and a judgement that
differs from the lock's record is itself a finding. A file not on disk is judged from the
lock's record only, and the report counts those apart (`from_lock`): a record is what `lock`
saw through ranges, not proof of the bytes a download would give. The other formats (chat
templates, Keras configs, ONNX external data) are judged from their bytes the same way.
Licences and remote code are judged from the lock.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from wlock.cache.layout import RepoPaths
from wlock.models import FormatScan, Lock, PickleScan
from wlock.policy import Policy, Violation, expected_scan, judge_repo
from wlock.scan import formats_judged, is_judged, judge_file, judge_formats


@dataclass
class AuditReport:
    violations: list[Violation] = field(default_factory=list)
    scanned: int = 0  # files judged from their bytes on disk
    from_lock: int = 0  # files not on disk, judged from the lock's records only

    @property
    def ok(self) -> bool:
        return not self.violations


def audit(lock: Lock, policy: Policy, cache_dir: Path) -> AuditReport:
    report = AuditReport()
    for repo in lock.repos:
        recorded = {p.path: p for p in repo.pickles}
        paths = RepoPaths.of(cache_dir, repo)
        scans: list[PickleScan] = []
        formats: list[FormatScan] = []
        for f in repo.files:
            if f.size and formats_judged(repo.kind, f.path):
                formats += _formats(repo.formats, paths.link(repo.revision, f.path), f.path,
                                    policy)
            if not f.size or not is_judged(repo.kind, f.path):
                continue
            on_disk = paths.link(repo.revision, f.path)
            try:
                with open(os.path.realpath(on_disk), "rb") as handle:
                    found = judge_file(handle, f.path, policy.limits)
            except (FileNotFoundError, NotADirectoryError):
                # What `lock` saw through ranges (a record, or none: no pickle), not the
                # bytes a download would bring: counted apart, and said so.
                if f.path in recorded:
                    scans.append(recorded[f.path])
                report.from_lock += 1
                continue
            report.scanned += 1
            # Compared with what the lock says, as sync's gate compares them; where the lock
            # says nothing, judged by the policy alone.
            old = expected_scan(repo, f.path, recorded)
            if found.pickle or old is not None:
                scans.append(found)
            if old is not None and (old.imports, old.pickle) != (found.imports, found.pickle):
                added = sorted(set(found.imports) - set(old.imports))
                report.violations.append(Violation(
                    "changed", repo.id, f.path, ", ".join(added),
                    f"{repo.id}: {f.path} on disk imports "
                    f"{', '.join(added) or 'other names'} where the lock recorded "
                    f"{', '.join(old.imports) or 'none'}: the file is not the one locked "
                    f"(run `wlock check`, then `wlock sync`)"))
        report.violations += judge_repo(repo, lock, policy, scans, formats)
    return report


def _formats(recorded: tuple[FormatScan, ...], on_disk: Path, path: str, policy: Policy,
             ) -> list[FormatScan]:
    """A file's other formats judged from its bytes on disk; the lock's records of them
    when it is not there (the file is counted in `from_lock` with its pickle judgement)."""
    try:
        with open(os.path.realpath(on_disk), "rb") as handle:
            return list(judge_formats(handle, path, policy.limits))
    except (FileNotFoundError, NotADirectoryError):
        return [t for t in recorded if t.path == path]
