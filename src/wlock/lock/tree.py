"""The lock as a graph (`wlock tree`, as `uv tree`): entries, what each requires, and why a
file is or is not locked. Offline: everything comes from weights.lock."""

from __future__ import annotations

from dataclasses import dataclass

from wlock.lock.loaders import describe
from wlock.models import Lock, LockedRepo


@dataclass(frozen=True, slots=True)
class TreeNode:
    repo: LockedRepo
    children: tuple[TreeNode, ...]
    required_by: tuple[str, ...]
    repeated: bool = False  # shown in full elsewhere in the tree (uv's "(*)")


def build_tree(lock: Lock) -> tuple[TreeNode, ...]:
    """One root per entry nothing else requires, with what it requires below it."""
    models = {r.id: r for r in lock.repos if r.kind == "model"}
    required_by: dict[str, list[str]] = {}
    for repo in lock.repos:
        for name in repo.requires:
            required_by.setdefault(name, []).append(repo.id)
    shown: set[tuple[str, str]] = set()

    def node(repo: LockedRepo, path: tuple[str, ...]) -> TreeNode:
        repeated = repo.key in shown
        shown.add(repo.key)
        children = () if repeated else tuple(
            node(models[name], (*path, repo.id)) for name in sorted(repo.requires)
            if name in models and name not in path)
        return TreeNode(repo, children, tuple(sorted(required_by.get(repo.id, ()))), repeated)

    roots = [r for r in lock.repos if r.kind == "dataset" or r.id not in required_by]
    # A cycle of requirements has no root: show its first member as one.
    roots += [r for r in lock.repos if r.kind == "model" and r.id in required_by
              and not _reachable(r.id, roots, models)][:1]
    return tuple(node(r, ()) for r in roots)


def _reachable(name: str, roots: list[LockedRepo], models: dict[str, LockedRepo]) -> bool:
    todo, seen = [r.id for r in roots], set()
    while todo:
        current = todo.pop()
        if current == name:
            return True
        if current in seen or current not in models:
            continue
        seen.add(current)
        todo += models[current].requires
    return False


def explain(lock: Lock, path: str) -> list[str]:
    """Why `path` is, or is not, locked, for each repo whose listing it is in (or might be).
    `path` as a user types it: `./onnx/model.onnx`, or a folder (`onnx`, `onnx/`)."""
    import posixpath

    path = posixpath.normpath(path.replace("\\", "/")).lstrip("/")
    lines = []
    for repo in lock.repos:
        loader = repo.loader or "all"
        locked = {f.path for f in repo.files}
        weights = sorted(p for p in locked if describe(p) is not None)
        if path in locked:
            kind = describe(path)
            what = f"{kind}, the format the {loader} loader takes" if kind else (
                "a file the library reads beside its weights" if repo.loader else
                "every file of the repo is locked")
            lines.append(f"{repo.id}: {path} is locked ({what})")
            continue
        folder = next((s for s in repo.skipped if s in (path, path + "/") or (
            s.endswith("/") and path.startswith(s))), None)
        if folder is not None:
            if folder == path + "/":
                path = folder  # a folder none of whose files is locked
            kind = describe(path) or describe(folder)
            because = kind or f"a file {loader} does not read"
            if loader == "datasets":
                because = ("not a data file of " + (f"config {repo.config!r}" if repo.config
                                                    else "the default config")
                           + (f", split {repo.split!r}" if repo.split else ""))
            instead = f"; it locks {', '.join(weights[:3])}" + (
                ", ..." if len(weights) > 3 else "") if weights else ""
            lines.append(f"{repo.id}: {path} is not locked: {because}{instead} (the {loader} "
                         f"loader, wlock/lock/loaders/). To lock it, add it to `include` or "
                         "set `loader = \"all\"`")
    if not lines:
        lines.append(f"{path} is in no locked repo's files nor in what a loader left out "
                     "(excluded by include/exclude, or not in the repo at its locked commit)")
    return lines
