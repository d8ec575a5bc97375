"""`wlock audit`: the lock and the synced bytes against [tool.wlock.policy], offline."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from wlock.cli.options import Settings, common_options, lock_option
from wlock.cli.output import info
from wlock.errors import ExitCode
from wlock.units import count
from wlock.version import __version__

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
RULES = {"pickle": "a pickle imports what the policy does not allow",
         "license": "a licence outside the policy's list",
         "remote-code": "remote code the policy refuses or the lock does not hold",
         "changed": "a pickle on disk differs from the one locked"}


@click.command()
@click.option("--format", "fmt", type=click.Choice(["text", "json", "github", "sarif"]),
              default="text", show_default=True, help="How to print the findings.")
@lock_option
@common_options
def audit(fmt: str, settings: Settings) -> None:
    """Judge the lock, and the pickles synced from it, against the project's policy.

    Offline. Every locked file in the cache is judged again from its bytes (a file swapped
    after a sync is judged as it is); a file not synced is judged from the lock's record
    only, and the report says how many were. Licences and remote code are judged from the
    lock. Exit 7 on a violation. The policy lives in weights.toml:

    \b
      [tool.wlock.policy]
      pickle = "safe-imports"        # | "deny" | "allow"
      licenses = ["apache-2.0", "mit"]
      remote-code = "locked"         # | "deny"

    \b
    Examples:
      wlock audit
      wlock audit --format sarif > audit.sarif     # for code scanning
    """
    from wlock.lock.lockfile import read_lock
    from wlock.lock.manifest import MANIFEST_NAME
    from wlock.policy import Policy, read_policy
    from wlock.policy.audit import audit as run_audit

    lock_path = settings.lock_path()
    lock = read_lock(lock_path)
    manifest = lock_path.parent / MANIFEST_NAME
    policy = read_policy(manifest) if manifest.is_file() else Policy()
    report = run_audit(lock, policy, settings.cache_dir)
    items = [{"kind": v.kind, "repo": v.repo, "path": v.path, "detail": v.detail,
              "message": v.message} for v in report.violations]
    if fmt == "json" or settings.json:
        click.echo(json.dumps({"schema": 1, "ok": report.ok, "command": "audit",
                               "policy": {"pickle": policy.pickle,
                                          "licenses": list(policy.licenses)
                                          if policy.licenses is not None else None,
                                          "remote-code": policy.remote_code},
                               "scanned": report.scanned, "from_lock": report.from_lock,
                               "violations": items}, indent=2))
    elif fmt == "github":
        for v in report.violations:
            title = f"wlock audit: {v.kind}"
            click.echo(f"::error file={lock_path.name},title={title}::{v.message}")
    elif fmt == "sarif":
        click.echo(json.dumps(_sarif(items, lock_path.name), indent=2))
    else:
        for v in report.violations:
            click.echo(f"{v.kind}: {v.message}")
    info(f"{count(report.scanned, 'file')} judged from the bytes on disk; "
         f"{count(len(report.violations), 'violation')} of the policy in {policy.path}.")
    if report.from_lock:
        info(f"{count(report.from_lock, 'file')} not on disk: judged from the lock's records "
             "only (what `wlock lock` read through ranges, not the bytes a download brings). "
             "`wlock sync` judges the bytes before they land; `wlock lock --check --rescan` "
             "judges the Hub's bytes now.")
    if report.violations:
        sys.exit(ExitCode.POLICY)


def _sarif(items: list[dict[str, Any]], uri: str) -> dict[str, Any]:
    return {
        "$schema": SARIF_SCHEMA, "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "wlock audit", "version": __version__,
                                "rules": [{"id": k, "shortDescription": {"text": t}}
                                          for k, t in RULES.items()]}},
            "results": [{"ruleId": item["kind"], "level": "error",
                         "message": {"text": item["message"]},
                         "locations": [{"physicalLocation": {
                             "artifactLocation": {"uri": uri}}}]} for item in items],
        }],
    }
