"""What a sync of a lock would download into a cache, planned without fetching
(`wlock lock --dry-run` and the upgrade report): every missing file whole, or, where the
cache holds its path at another revision and both are on Xet, only the chunks the upgrade
(wlock.cache.upgrade) would fetch, read from the two reconstructions.

Its own module, above both: it plans with sync's planner and upgrade's, which import
neither each other nor it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wlock.cache.layout import RepoPaths
from wlock.cache.sync import plan_sync
from wlock.cache.upgrade import UPGRADE_FROM, NotUpgraded, predecessor


@dataclass(frozen=True, slots=True)
class Estimate:
    """What a sync of a lock into a cache would download (`wlock lock --dry-run`)."""

    files: int  # to download
    size: int  # their bytes
    download: int  # bytes from the network: `size`, less what upgrades copy
    upgraded: int  # files put together from a cached revision
    # `download` by repo ((kind, id)): what the upgrade report says this cache downloads.
    by_repo: dict[tuple[str, str], int] = field(default_factory=dict)


def estimate(lock: Any, cache_dir: Path, endpoint: str, token: str | None,
             timeout: float) -> Estimate:
    """Plan each missing file as the sync would: a chunk-level upgrade where the cache holds
    the path at another revision and both are on Xet (the reconstructions are read, nothing
    is fetched), else the whole file."""
    from wlock.cache.engines import FetchJob
    from wlock.cache.engines.chunks import Upgrader
    from wlock.cache.transfer import Transfer

    plan = plan_sync(lock, cache_dir)
    files = size = download = upgraded = 0
    by_repo: dict[tuple[str, str], int] = {}
    with Transfer(endpoint, token, jobs=1, timeout=timeout) as transfer:
        upgrader = Upgrader(transfer.route, lambda job, n: None, transfer.stopped)
        for r in plan.repos:
            paths = RepoPaths.of(cache_dir, r.repo)
            at_start = download
            for f in r.downloads:
                files, size = files + 1, size + f.size
                old = (predecessor(paths, r.repo.revision, f.path, f.etag)
                       if f.hash_kind == "sha256" and f.size >= UPGRADE_FROM else None)
                if old is None:
                    download += f.size
                    continue
                job = FetchJob(kind=r.repo.kind, repo_id=r.repo.id, revision=r.repo.revision,
                               path=f.path, size=f.size, etag=f.etag, hash_kind=f.hash_kind,
                               temp="", xet=f.xet)
                try:
                    download += upgrader.plan(job, old).fetched
                    upgraded += 1
                except NotUpgraded:
                    download += f.size
            by_repo[(r.repo.kind, r.repo.id)] = download - at_start
    return Estimate(files, size, download, upgraded, by_repo)
