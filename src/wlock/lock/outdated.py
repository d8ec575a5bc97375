"""`wlock outdated`: which locked pins their refs have moved past, as `npm outdated` says it.

For each entry of weights.toml that the lock pins, the ref's history as the Hub lists it
(HubClient.history: the newest commits first, 50 a request, read only as far as the locked
commit), so an entry a few commits behind costs one request, all entries at once. An entry
whose ref is a commit never moves and costs none. A locked commit not found in the ref's
newest MAX_HISTORY commits is "more than that" behind, or was rewritten away (a force-push):
the report says which it cannot tell.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from wlock.lock.hub import MAX_HISTORY, HubClient
from wlock.models import Lock, LockedRepo, Manifest, RepoKind

_COMMIT = re.compile(r"^[0-9a-f]{40}$")


@dataclass(frozen=True, slots=True)
class Pin:
    """One entry's pin against its ref now. `behind`: commits between them (None: more than
    MAX_HISTORY, or the locked commit is not in the ref's history any more)."""

    kind: RepoKind
    id: str
    ref: str
    locked: str
    head: str
    head_date: str | None
    head_title: str | None
    behind: int | None

    @property
    def moved(self) -> bool:
        return self.head != self.locked

    def as_json(self) -> dict[str, object]:
        return {"kind": self.kind, "id": self.id, "ref": self.ref, "locked": self.locked,
                "head": self.head, "head_date": self.head_date, "head_title": self.head_title,
                "behind": self.behind, "moved": self.moved}


def outdated(manifest: Manifest, lock: Lock, client: HubClient, jobs: int = 16) -> list[Pin]:
    """Every entry the lock pins, in the manifest's order, against its ref's head now.
    Raises a HubError subclass (exit 5) for a repo the Hub will not list."""
    repos = [repo for e in manifest.entries if (repo := lock.find(e.kind, e.id)) is not None]

    def one(repo: LockedRepo) -> Pin:
        kind, ref, locked = repo.kind, repo.requested, repo.revision
        if _COMMIT.match(ref):
            return Pin(kind, repo.id, ref, locked, locked, None, None, 0)
        newer, found = client.history(kind, repo.id, ref, locked)
        if not newer:  # the head is the locked commit (or the ref lists nothing at all)
            return Pin(kind, repo.id, ref, locked, locked, None, None, 0 if found else None)
        head = newer[0]
        return Pin(kind, repo.id, ref, locked, head["id"], head["date"] or None,
                   head["title"] or None, len(newer) if found else None)

    with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(repos)))) as pool:
        return list(pool.map(one, repos))


def behind_words(pin: Pin) -> str:
    if not pin.moved:
        return "up to date"
    if pin.behind is None:
        return (f"more than {MAX_HISTORY:,} commits behind, or the locked commit is no "
                "longer in its history")
    return f"{pin.behind} commit{'s' if pin.behind != 1 else ''} behind"
