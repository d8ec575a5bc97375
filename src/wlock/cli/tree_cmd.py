"""`wlock tree`: the locked entries and what each requires, as `uv tree`."""

from __future__ import annotations

import click

from wlock.cli.options import Settings, common_options, lock_option
from wlock.cli.output import emit
from wlock.units import human_size


@click.command()
@click.option("--why", "why", metavar="PATH",
              help="Say why the file PATH is, or is not, in the lock (which loader, which "
              "rule).")
@lock_option
@common_options
def tree(why: str | None, settings: Settings) -> None:
    """Show the locked entries and the models each requires (an adapter's base, a repo of
    remote code), with their loader, files and sizes, and what a loader left out. Offline.

    \b
    Examples:
      wlock tree
      wlock tree --why tf_model.h5      # why is this file not locked?
      wlock tree --json
    """
    from wlock.lock.lockfile import read_lock
    from wlock.lock.tree import build_tree, explain

    lock = read_lock(settings.lock_path())
    if why is not None:
        lines = explain(lock, why)
        if settings.json:
            emit({"path": why, "why": lines})
            return
        for line in lines:
            click.echo(line)
        return
    roots = build_tree(lock)
    if settings.json:
        emit({"repos": [_json(node) for node in roots]})
        return
    for node in roots:
        _render(node, "", "")


def _describe(node: object) -> str:
    from wlock.lock.tree import TreeNode

    assert isinstance(node, TreeNode)
    repo = node.repo
    parts = [f"{repo.loader or 'all'}" + (f" {repo.variant}" if repo.variant else ""),
             f"{len(repo.files)} files, {human_size(repo.size)}"]
    if repo.skipped:
        shown = ", ".join(repo.skipped[:4]) + (", ..." if len(repo.skipped) > 4 else "")
        parts.append(f"not locked: {human_size(repo.skipped_size)} in {shown}")
    if node.required_by:
        parts.append(f"required by {', '.join(node.required_by)}")
    kind = "dataset " if repo.kind == "dataset" else ""
    return (f"{kind}{repo.id} {repo.requested} {repo.revision[:7]} ({'; '.join(parts)})"
            + (" (*)" if node.repeated else ""))


def _render(node: object, prefix: str, child_prefix: str) -> None:
    from wlock.lock.tree import TreeNode

    assert isinstance(node, TreeNode)
    click.echo(prefix + _describe(node))
    for i, child in enumerate(node.children):
        last = i == len(node.children) - 1
        _render(child, child_prefix + ("└── " if last else "├── "),
                child_prefix + ("    " if last else "│   "))


def _json(node: object) -> dict[str, object]:
    from wlock.lock.tree import TreeNode

    assert isinstance(node, TreeNode)
    repo = node.repo
    return {"kind": repo.kind, "id": repo.id, "requested": repo.requested,
            "revision": repo.revision, "loader": repo.loader or "all", "variant": repo.variant,
            "files": len(repo.files), "bytes": repo.size, "skipped": list(repo.skipped),
            "skipped_bytes": repo.skipped_size, "required_by": list(node.required_by),
            "requires": [_json(c) for c in node.children], "repeated": node.repeated}
