"""`wlock status`: where a project's weights and data live, at a glance.

Per locked repo: complete, partial or missing in the cache, bytes, the folder; for the cache:
the filesystem and mount it is on (from /proc/self/mountinfo), free space, and whether it is
volatile (tmpfs: gone at reboot) or a network filesystem. Read-only and offline: `stat` and
`readlink` only, as a no-op sync.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from wlock.cache.layout import RepoPaths
from wlock.cache.sync import nearest_existing, plan_sync
from wlock.models import Lock
from wlock.units import human_size

VOLATILE = {"tmpfs", "ramfs"}
NETWORK = {"nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "glusterfs", "lustre", "9p", "afs",
           "gpfs", "beegfs", "orangefs", "ocfs2", "gfs2", "virtiofs"}
# FUSE filesystems that are network or object storage underneath.
NETWORK_FUSE = ("juicefs", "sshfs", "s3fs", "gcsfuse", "rclone", "goofys", "ossfs",
                "mountpoint-s3", "cephfs", "glusterfs", "seaweedfs", "alluxio", "lizardfs",
                "moosefs", "beegfs", "weka", "blobfuse", "geesefs")
NEARLY_FULL = 0.05  # of the filesystem's size


@dataclass(frozen=True, slots=True)
class Mount:
    point: str
    fstype: str
    source: str

    @property
    def volatile(self) -> bool:
        return self.fstype in VOLATILE

    @property
    def network(self) -> bool:
        if self.fstype in NETWORK:
            return True
        if self.fstype.startswith("fuse"):
            name = f"{self.fstype} {self.source}".lower()
            return any(n in name for n in NETWORK_FUSE)
        return False


def mount_of(path: Path) -> Mount:
    """The mount holding `path` (or its nearest existing parent): the longest mount point
    that prefixes its real path."""
    real = os.path.realpath(nearest_existing(path))
    best = Mount("/", "?", "?")
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                point = _unescape(left.split()[4])
                fstype, source = [*right.split(), "?", "?"][:2]
                inside = real == point or real.startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(best.point):
                    best = Mount(point, fstype, source)
    except OSError:
        pass
    return best


def _unescape(text: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as octal.
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        text = text.replace(code, char)
    return text


@dataclass(frozen=True, slots=True)
class RepoStatus:
    kind: str
    id: str
    revision: str
    state: str  # "complete" | "partial" | "missing"
    files: int
    files_present: int
    bytes: int
    bytes_present: int
    path: str


@dataclass
class StatusReport:
    cache_dir: str
    mount: Mount
    free_bytes: int
    total_bytes: int
    repos: list[RepoStatus] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def cache_status(lock: Lock, cache_dir: Path) -> StatusReport:
    mount = mount_of(cache_dir)
    usage = shutil.disk_usage(nearest_existing(cache_dir))
    report = StatusReport(cache_dir=str(cache_dir), mount=mount, free_bytes=usage.free,
                          total_bytes=usage.total)
    plan = plan_sync(lock, cache_dir)
    for r in plan.repos:
        missing = r.downloads  # blobs absent or of the wrong size
        bytes_missing = sum(f.size for f in missing)
        files_present = len(r.repo.files) - len(missing)
        if not missing and not r.link:
            state = "complete"
        elif files_present:
            state = "partial"
        else:
            state = "missing"
        report.repos.append(RepoStatus(
            kind=r.repo.kind, id=r.repo.id, revision=r.repo.revision, state=state,
            files=len(r.repo.files), files_present=files_present, bytes=r.repo.size,
            bytes_present=r.repo.size - bytes_missing,
            path=str(RepoPaths.of(cache_dir, r.repo).snapshot(r.repo.revision))))
    where = f"the cache at {cache_dir} ({mount.fstype} at {mount.point})"
    if mount.volatile or str(cache_dir).startswith("/dev/shm/"):  # noqa: S108 - a name, not a file
        report.warnings.append(
            f"{where} is in memory: it is gone at reboot. Keep the bytes in an archive "
            "(`wlock archive`) or put HF_HOME on a disk; `wlock export` is the way to put a "
            "model in RAM.")
    needed = plan.bytes_to_fetch
    if usage.free < needed:
        report.warnings.append(
            f"{where} has {human_size(usage.free)} free and the locked set needs "
            f"{human_size(needed)} more: "
            "`wlock sync` would stop before fetching. Free space (`wlock gc`) or move HF_HOME.")
    elif usage.total and usage.free < NEARLY_FULL * usage.total:
        report.warnings.append(
            f"{where} is nearly full ({usage.free * 100 // usage.total}% free). "
            "`wlock gc` removes the revisions no project uses.")
    return report
