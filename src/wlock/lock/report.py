"""What an upgrade changes, for the reviewer who approves it: `lock --upgrade --dry-run`'s
report, as text, as markdown for a pull request's body, or as JSON.

Everything is read from the two locks (the one on disk, the one the upgrade would write): the
files with their sizes and hashes, the card's licences, the pickles' imports, the remote code,
the required models, what the loader left out. So the report costs no request, and it says
exactly what `sync` would then fetch: a fresh machine downloads every file of the new pin;
this cache, the files whose bytes it does not hold yet (by hash, whatever their path).
Each change a review exists to catch is flagged: a licence (the card's, or a LICENSE file),
pickles (new, gone, imports changed) with the policy's verdict on the new commit, remote code
(new, changed, its code file edited), required models and their pins, the loader's
selection (what it now takes or leaves out).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from wlock.models import Lock, LockedFile, LockedRepo
from wlock.units import human_size

# File names a licence lives in, beside the card's `license`.
_LICENCE_FILES = ("license", "license.md", "license.txt", "licence", "copying")


@dataclass
class RepoReport:
    kind: str
    id: str
    requested: str
    old: str | None
    new: str | None
    added: list[tuple[str, int]] = field(default_factory=list)
    removed: list[tuple[str, int]] = field(default_factory=list)
    # path, old and new size, old and new hash (what tells a change the size does not show)
    changed: list[tuple[str, int, int, str, str]] = field(default_factory=list)
    fresh_bytes: int = 0  # a machine with nothing cached downloads this
    upgrade_bytes: int = 0  # a cache holding the old pin downloads this (whole files)
    # What this cache downloads, planned as sync plans it (chunk-level where both revisions
    # are on Xet): known where the command asked the Hub for the plan (`lock --dry-run`).
    cache_bytes: int | None = None
    flags: list[tuple[str, str]] = field(default_factory=list)  # (kind, what), for review

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "id": self.id, "requested": self.requested,
                "old": self.old, "new": self.new,
                "added": [{"path": p, "size": s} for p, s in self.added],
                "removed": [{"path": p, "size": s} for p, s in self.removed],
                "changed": [{"path": p, "old_size": a, "new_size": b, "old_hash": x,
                             "new_hash": y} for p, a, b, x, y in self.changed],
                "fresh_bytes": self.fresh_bytes, "upgrade_bytes": self.upgrade_bytes,
                "cache_bytes": self.cache_bytes,
                "flags": [{"kind": k, "what": w} for k, w in self.flags]}


def upgrade_report(old: Lock | None, new: Lock) -> list[RepoReport]:
    """A report per repo locked in both whose pin or files differ between `old` and `new`
    (a new entry is one line of `lock`'s, not a review). Both locks have passed the policy
    (`lock` refuses one that does not, exit 7): its verdict on the new commits is that they
    pass, and the flags say what it judged."""
    before = {r.key: r for r in old.repos} if old else {}
    out = []
    for repo in new.repos:
        was = before.get(repo.key)
        if was is None:
            continue
        same = was.revision == repo.revision and \
            [f.path for f in was.files] == [f.path for f in repo.files]
        # Kept, but a model it requires (an adapter's base, a code repo) moves: reviewed too.
        moved_under = any(_revision(old, name) != _revision(new, name) for name in repo.requires)
        if same and not moved_under:
            continue
        out.append(_report(was, repo, old, new))
    return out


def _report(was: LockedRepo | None, now: LockedRepo, old: Lock | None, lock: Lock
            ) -> RepoReport:
    old_files = {f.path: f for f in was.files} if was else {}
    new_files = {f.path: f for f in now.files}
    report = RepoReport(now.kind, now.id, now.requested, was.revision if was else None,
                        now.revision)
    held = {f.etag for f in old_files.values()}
    for path, f in new_files.items():
        o = old_files.get(path)
        if o is None:
            report.added.append((path, f.size))
        elif o.etag != f.etag:
            report.changed.append((path, o.size, f.size, o.etag, f.etag))
    report.removed = [(p, f.size) for p, f in old_files.items() if p not in new_files]
    report.fresh_bytes = sum(f.size for f in new_files.values())
    report.upgrade_bytes = sum(f.size for f in _unique(new_files.values()) if f.etag not in held)
    report.flags = _flags(was, now, old, lock, old_files, new_files)
    return report


def _unique(files: Any) -> list[LockedFile]:
    seen: dict[str, LockedFile] = {}
    for f in files:
        seen.setdefault(f.etag, f)
    return list(seen.values())


def _flags(was: LockedRepo | None, now: LockedRepo, old: Lock | None, lock: Lock,
           old_files: dict[str, Any], new_files: dict[str, Any]) -> list[tuple[str, str]]:
    flags: list[tuple[str, str]] = []
    if was is None:
        return flags
    old_licence = ", ".join(was.licenses) or "none"
    new_licence = ", ".join(now.licenses) or "none"
    if (was.licenses, was.license_name) != (now.licenses, now.license_name):
        flags.append(("licence", f"the card's licence: {old_licence} -> {new_licence}"))
    for path in sorted(set(old_files) | set(new_files)):
        if path.rsplit("/", 1)[-1].lower() in _LICENCE_FILES:
            o, n = old_files.get(path), new_files.get(path)
            if o is None or n is None or o.etag != n.etag:
                how = "added" if o is None else "removed" if n is None else "changed"
                flags.append(("licence", f"{path} {how}"))
    old_pickles = {p.path: p for p in was.pickles if p.pickle}
    new_pickles = {p.path: p for p in now.pickles if p.pickle}
    for path in sorted(set(new_pickles) - set(old_pickles)):
        flags.append(("pickle", f"{path}: a new pickle, importing "
                      f"{', '.join(new_pickles[path].imports) or 'nothing'}"))
    for path in sorted(set(old_pickles) - set(new_pickles)):
        flags.append(("pickle", f"{path}: a pickle gone"))
    for path in sorted(set(old_pickles) & set(new_pickles)):
        a, b = set(old_pickles[path].imports), set(new_pickles[path].imports)
        if a != b:
            flags.append(("pickle", f"{path}: imports changed (now also "
                          f"{', '.join(sorted(b - a)) or 'nothing'}; no longer "
                          f"{', '.join(sorted(a - b)) or 'nothing'})"))
    for ref in sorted(set(now.remote_code) - set(was.remote_code)):
        flags.append(("remote-code", f"new remote code: {ref}"))
    for ref in sorted(set(was.remote_code) - set(now.remote_code)):
        flags.append(("remote-code", f"remote code gone: {ref}"))
    for path in sorted(new_files):
        if path.endswith(".py") and path in old_files and \
                old_files[path].etag != new_files[path].etag and now.remote_code:
            flags.append(("remote-code", f"{path}: the code trust_remote_code runs changed"))
    for name in sorted(set(now.requires) - set(was.requires)):
        flags.append(("requires", f"now requires {name}{_pin(lock, name)}"))
    for name in sorted(set(was.requires) - set(now.requires)):
        flags.append(("requires", f"no longer requires {name}"))
    for name in sorted(set(was.requires) & set(now.requires)):
        then, now_at = _revision(old, name), _revision(lock, name)
        if then and now_at and then != now_at:
            flags.append(("requires", f"requires {name}, whose pin moves {then[:7]} -> "
                          f"{now_at[:7]}"))
    if was.loader != now.loader:
        flags.append(("selection", f"loader {was.loader or 'none'} -> {now.loader or 'none'}"))
    for path in sorted(set(now.skipped) - set(was.skipped)):
        flags.append(("selection", f"the loader now leaves out {path}"))
    for path in sorted(set(was.skipped) - set(now.skipped)):
        flags.append(("selection", f"the loader now takes {path}"))
    return flags


def _revision(lock: Lock | None, name: str) -> str | None:
    found = next((r for r in lock.repos if r.kind == "model" and r.id.lower() == name.lower()),
                 None) if lock else None
    return found.revision if found else None


def _pin(lock: Lock, name: str) -> str:
    revision = _revision(lock, name)
    return f" (pinned at {revision[:7]})" if revision else ""


def _here(r: RepoReport) -> str:
    if r.cache_bytes is None or r.cache_bytes == r.upgrade_bytes:
        return ""
    return f" ({human_size(r.cache_bytes)} into this cache, as sync would plan it)"


def _pin_line(r: RepoReport) -> str:
    """The pin's line as `lock` prints it (models.LockChange.render)."""
    if r.old is not None and r.old == r.new:
        return f"{r.id}  {r.requested}  {r.old[:7]} (kept; files re-selected)"
    return f"{r.id}  {r.requested}  {(r.old or '(new)')[:7]} -> {(r.new or '')[:7]}"


# Files listed per kind of change in text and markdown (JSON lists them all).
SHOWN = 50


def _capped(rows: list[str], indent: str = "  ") -> list[str]:
    if len(rows) <= SHOWN:
        return rows
    return [*rows[:SHOWN], f"{indent}... and {len(rows) - SHOWN:,} more (--json lists all)"]


def _change(old_size: int, new_size: int, old_hash: str, new_hash: str, arrow: str = "->"
            ) -> str:
    """A changed file's sizes; where the size is the same, the hashes that differ (a
    config edited in place: "816 B -> 816 B" said nothing)."""
    if old_size != new_size:
        return f"{human_size(old_size)} {arrow} {human_size(new_size)}"
    return f"{human_size(new_size)}, other bytes: {old_hash[:7]} {arrow} {new_hash[:7]}"


def render_text(reports: list[RepoReport]) -> str:
    lines = []
    for r in reports:
        lines.append(f"{_pin_line(r)}: "
                     f"{len(r.added)} added, {len(r.removed)} removed, {len(r.changed)} "
                     f"changed; a fresh machine downloads {human_size(r.fresh_bytes)}, this "
                     f"upgrade {human_size(r.upgrade_bytes)}{_here(r)}")
        lines += _capped([f"  + {path} ({human_size(size)})" for path, size in r.added])
        lines += _capped([f"  - {path} ({human_size(size)})" for path, size in r.removed])
        lines += _capped([f"  ~ {path} ({_change(a, b, x, y)})"
                          for path, a, b, x, y in r.changed])
        for kind, what in r.flags:
            lines.append(f"  ! {kind}: {what}")
    return "\n".join(lines)


def render_markdown(reports: list[RepoReport]) -> str:
    """For a pull request's body: a section per repo, the flags first."""
    out = ["## Weights upgrade", ""]
    for r in reports:
        old = f"`{r.old[:7]}`" if r.old else "(new)"
        move = (f"`{r.old[:7]}` kept, files re-selected" if r.old and r.old == r.new
                else f"{old} → `{(r.new or '')[:7]}`")
        out += [f"### `{r.id}` ({r.requested}): {move}", ""]
        if r.flags:
            out += ["**For review:**", ""] + [f"- **{k}**: {w}" for k, w in r.flags] + [""]
        out += [f"{len(r.added)} added, {len(r.removed)} removed, {len(r.changed)} changed. "
                f"A fresh machine downloads {human_size(r.fresh_bytes)}; an upgrade of a cache "
                f"holding the old pin, {human_size(r.upgrade_bytes)}{_here(r)}.", ""]
        rows = _capped([f"| added | `{p}` | {human_size(s)} |" for p, s in r.added], "") + \
            _capped([f"| removed | `{p}` | {human_size(s)} |" for p, s in r.removed], "") + \
            _capped([f"| changed | `{p}` | {_change(a, b, x, y, arrow='→')} |"
                     for p, a, b, x, y in r.changed], "")
        if rows:
            out += ["| | file | size |", "|---|---|---|", *rows, ""]
    return "\n".join(out).rstrip() + "\n"
