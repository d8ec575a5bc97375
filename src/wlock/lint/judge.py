"""LoadSites + weights.lock + settings -> Findings, each with a code and what to write instead."""

from __future__ import annotations

import re
from dataclasses import dataclass

from wlock.lint.config import LintSettings
from wlock.lint.scanner import DIFFUSERS_VARIANTS, LoadSite
from wlock.models import Lock, LockedRepo

_IGNORE = re.compile(r"#\s*wlock:\s*ignore(?:\[([A-Z0-9,\s]+)\])?")


@dataclass(frozen=True, slots=True)
class Finding:
    code: str
    severity: str  # "error" | "warning"
    path: str
    cell: int | None
    line: int
    col: int
    call: str
    repo_id: str | None
    param: str
    message: str
    fix: str | None  # the locked commit to write, when there is one and it is safe to write
    origin: str | None = None  # the id is this variable's default: "the default of --model…"

    @property
    def where(self) -> str:
        place = self.path if self.cell is None else f"{self.path}:cell {self.cell}"
        return f"{place}:{self.line}:{self.col}"


def judge(site: LoadSite, lock: Lock | None, settings: LintSettings) -> Finding | None:
    """The finding for one site, or None when it is pinned as the lock says."""
    code, message, fix = _verdict(site, lock, settings.fix_pin == "lock")
    if code is None and lock is not None:
        code, message, fix = _adapter_verdict(site, lock)
    if code is None and lock is not None:
        code, message, fix = _dataset_verdict(site, lock)
    if code is None:
        return None
    level = settings.level(code)
    if level == "off":
        return None
    # A fix that is the locked commit's folder replaces the id (the `path` argument).
    param = "path" if fix is not None and fix.startswith(FOLDER_FIX) else site.param
    return Finding(code=code, severity=level, path=site.path, cell=site.cell, line=site.line,
                   col=site.col, call=site.call, repo_id=site.repo_id, param=param,
                   message=message, fix=fix, origin=site.origin)


FOLDER_FIX = "str(wlock.snapshot_path("


def revision_call(repo_id: str, kind: str) -> str:
    """The pin that follows weights.lock (the README's form): what `lint --fix` writes."""
    kind_arg = ', kind="dataset"' if kind == "dataset" else ""
    return f'wlock.revision("{repo_id}"{kind_arg})'


def _verdict(site: LoadSite, lock: Lock | None, follow: bool = True
             ) -> tuple[str | None, str, str | None]:
    """`follow`: the fix is `wlock.revision(...)`, which follows the lock; else the
    literal commit (`fix-pin`)."""
    call = f"{site.call}()"
    if site.default_model:
        return ("WL106", f"{call} without model= downloads the task's default model, "
                "unpinned; pass model=\"org/name\" and its locked revision", None)
    rev = site.revision
    if rev.kind == "wlock" and rev.value is None:
        # wlock.revision(<a variable>): the lock decides at run time, whatever is passed;
        # only a different variable from the id's is worth a word.
        if site.expr and rev.expr and rev.expr != site.expr:
            return ("WL103", f"{call} loads {site.expr} with wlock.revision({rev.expr}), "
                    f"which names another variable; write wlock.revision({site.expr})", None)
        return None, "", None
    if site.repo_id is None:
        if site.expr:
            return ("WL200", f"{call}: the repo id {site.expr} is not a literal and has no "
                    "literal default in this file, so wlock cannot check its pin; pass "
                    f"revision=wlock.revision({site.expr})", None)
        return ("WL200", f"{call}: the repo id is not a literal, so wlock cannot check its "
                "pin; pass revision=wlock.revision(\"org/name\")", None)
    repo_id = site.repo_id
    locked = _find(lock, site) if lock else None
    what = f'{call} loads {site.repo_kind} "{repo_id}"'
    if site.origin:
        what += f" ({site.origin})"
    if site.via:
        what += f" ({site.via})"
    if site.code_by_revision and locked is None:
        return None, "", None  # the call's `revision` site says what is missing
    if lock is not None and locked is None:
        named = rev.value if rev.kind == "wlock" else repo_id
        flag = " --dataset" if site.repo_kind == "dataset" else ""
        return ("WL104", f"{what}, which is not in weights.lock; run `wlock add "
                f"{named}{flag}` (it locks it)", None)
    commit = locked.revision if locked else None
    code_repo = _code_repo(locked) if site.param == "code_revision" and locked else None
    if site.code_by_revision and code_repo is None:
        return None, "", None  # its own code, at the `revision` the call pins
    if code_repo is not None:
        # transformers loads code in another repo at code_revision alone (main when not
        # given): the pin is that repo's locked commit.
        held = lock.find("model", code_repo) if lock else None
        commit = held.revision if held else None
        what += f" (its code is in {code_repo})"
    if site.family == "datasets" and commit is not None and rev.kind in (
            "missing", "literal", "commit") and not (rev.kind == "commit" and rev.value == commit):
        # datasets asks the Hub for a repo id before it reads the cache, pinned or not, and
        # fails offline: the pin is the locked commit's folder (the README's form), which
        # --fix writes in place of the id.
        folder = f'{FOLDER_FIX}"{repo_id}"))'
        how = "no revision" if rev.kind == "missing" else f"revision {rev.value!r}"
        code = {"missing": "WL101", "literal": "WL102", "commit": "WL103"}[rev.kind]
        return (code, f"{what} from the Hub by id ({how}), which fails offline; load the "
                f"locked commit's folder: {site.call}({folder}, ...)",
                folder if site.literal and not site.origin else None)
    pinned_repo = code_repo or repo_id
    follows = follow and site.param != "@" and commit is not None
    instead = _instead(site, commit, revision_call(pinned_repo, "model" if code_repo
                                                   else site.repo_kind) if follows else None)
    if code_repo is not None and site.expr is not None:
        instead = f'write code_revision=wlock.revision("{code_repo}")'
    # Rewritten only where the call itself holds the literal: not a variable's default (it
    # can change at run time), not a string built with + or an f-string.
    fixable = commit if site.literal and not (site.origin or rev.origin) else None
    if fixable is not None and follows:
        fixable = revision_call(pinned_repo, "model" if code_repo else site.repo_kind)
    if rev.kind == "missing" and site.family == "helper (no revision)":
        return ("WL101", f"{what} without a pinned revision; the helper passes none: write "
                f"revision=wlock.revision({site.helper_param}) in its load", None)
    if rev.kind == "missing" and site.family in ("FlagEmbedding", "project (no revision)"):
        # No revision parameter: the pin is the locked commit's folder, read offline.
        named = site.expr if site.expr else f'"{repo_id}"'
        return ("WL101", f"{what}, which takes no revision; pass the locked commit's folder: "
                f"{site.call}(wlock.snapshot_path({named}))", None)
    if rev.kind == "missing":
        code = "WL105" if site.param == "code_revision" else "WL101"
        pin = "revision" if site.param == "@" else site.param
        reason = ("with trust_remote_code=True and no pinned code_revision" if code == "WL105"
                  else f"without a pinned {pin}")
        return code, f"{what} {reason}; {instead}", fixable
    if rev.kind == "literal":
        shown = f"@{rev.value}" if site.param == "@" else f'{site.param}="{rev.value}"'
        if rev.origin:
            shown = f'{site.param} "{rev.value}" ({rev.origin})'
        kind = ("a variant, not a pin (use variant=)"
                if site.family == "diffusers" and rev.value in DIFFUSERS_VARIANTS
                else "a branch, tag or short id, not a commit")
        return "WL102", f"{what} with {shown}: {kind}; {instead}", fixable
    if rev.kind == "commit" and commit is not None and rev.value != commit:
        pinned = rev.value[:7] if rev.value else "?"
        if rev.origin:
            pinned += f" ({rev.origin})"
        return ("WL103", f"{what} pinned to {pinned}, but weights.lock has {commit[:7]}; "
                f"{instead}", fixable)
    if rev.kind == "wlock" and rev.value != (code_repo or repo_id):
        return ("WL103", f'{what} with wlock.revision("{rev.value}"), which names another '
                f'repo; write wlock.revision("{code_repo or repo_id}")', None)
    if rev.kind == "dynamic" and site.param == "@":
        return ("WL200", f'{what}: the revision after "@" is not a literal, so wlock cannot '
                f'check it; write {{wlock.revision("{repo_id}")}} there', None)
    if rev.kind == "dynamic":
        return ("WL200", f"{what}: the {site.param} is not a literal, so wlock cannot check "
                f'it; write {site.param}=wlock.revision("{repo_id}")', None)
    return None, "", None


def _adapter_verdict(site: LoadSite, lock: Lock) -> tuple[str | None, str, str | None]:
    """A pinned peft adapter is reproducible only with its base model locked too: the lock
    records the base as a requirement of an entry locked with `loader = "peft"`."""
    if site.family != "peft" or site.repo_id is None:
        return None, "", None
    adapter = _find(lock, site)
    if adapter is None:
        return None, "", None
    what = f'{site.call}() loads the adapter "{site.repo_id}"'
    if adapter.loader != "peft":
        return ("WL107", f"{what}, whose base model weights.lock does not pin (its entry has "
                f"no `loader = \"peft\"`); run `wlock add {site.repo_id} --loader peft`, which "
                "locks the base it names", None)
    missing = [name for name in adapter.requires if lock.find("model", name) is None]
    if missing:
        return ("WL107", f"{what}, whose base model {missing[0]} is not in weights.lock; "
                "run `wlock lock`", None)
    return None, "", None


def _dataset_verdict(site: LoadSite, lock: Lock) -> tuple[str | None, str, str | None]:
    """A dataset locked by config (and split) holds that config's files only: a load of
    another config or split fails offline, or fetches what the lock does not pin."""
    from wlock.lock.loaders.datasets import split_names

    if site.family != "datasets" or site.repo_id is None:
        return None, "", None
    entry = _find(lock, site)
    if entry is None or entry.loader != "datasets":
        return None, "", None
    what = f'{site.call}() loads dataset "{site.repo_id}"'
    if entry.config is not None and site.config is not None and site.config != entry.config:
        return ("WL108", f'{what} config "{site.config}", but weights.lock holds its config '
                f'"{entry.config}" only (one config a dataset); run `wlock add {site.repo_id} '
                f'--dataset --config {site.config}` to lock "{site.config}" in its place, '
                f'or load "{entry.config}"', None)
    held = split_names(entry.split) if entry.split is not None else []
    wanted = split_names(site.split) if site.split is not None else []
    if held and not set(wanted) <= set(held):
        both = "+".join([*held, *(s for s in dict.fromkeys(wanted) if s not in held)])
        return ("WL108", f'{what} split "{site.split}", but weights.lock holds its split '
                f'"{entry.split}" only; run `wlock add {site.repo_id} --dataset --split '
                f'{both}` to lock both', None)
    return None, "", None


def _instead(site: LoadSite, commit: str | None, follows: str | None = None) -> str:
    param = site.param if site.param != "@" else "revision"
    if site.expr is not None:
        return (f"write {param}=wlock.revision({site.expr}): the lock decides at run time, "
                "whichever id is passed")
    if commit is None:
        dataset = " --dataset" if site.repo_kind == "dataset" else ""
        return (f"pin it: run `wlock add {site.repo_id}{dataset}` (it locks it), then write "
                f'{site.param if site.param != "@" else "revision"}='
                f'wlock.revision("{site.repo_id}")')
    if site.param == "@":
        return f'write "…{site.repo_id}@{commit}" (the locked commit)'
    if follows is not None:
        return (f"write {site.param}={follows} (it follows weights.lock: {commit[:7]} now), "
                f'or the commit, {site.param}="{commit}"')
    return f'write {site.param}="{commit}" (the locked commit)'


def _code_repo(locked: LockedRepo) -> str | None:
    """The other repo whose code the entry's remote code names (`org/repo--module.Class`),
    as the lock records it; None when its code is its own."""
    return next((ref.split("--")[0] for ref in locked.remote_code
                 if "--" in ref and ref.split("--")[0] != locked.id), None)


def _find(lock: Lock, site: LoadSite) -> LockedRepo | None:
    assert site.repo_id is not None
    return lock.find(site.repo_kind, site.repo_id)


def suppressed(lines: list[str], site: LoadSite, code: str) -> bool:
    """`# wlock: ignore` or `# wlock: ignore[WL101, …]` on the call's first or last line."""
    for number in {site.line, site.end_line}:
        if 0 < number <= len(lines):
            match = _IGNORE.search(lines[number - 1])
            if match and (match.group(1) is None or code in
                          {c.strip() for c in match.group(1).split(",")}):
                return True
    return False
