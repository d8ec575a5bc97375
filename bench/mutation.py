"""Mutation testing of the modules that keep wlock's promises, with cosmic-ray: each mutant
(an operator flipped, a constant changed, a statement dropped...) is applied to a clone of
this repository and the promise-keeping tests are run against it; a mutant the tests do
not notice "survives". Prints the score and every survivor's diff.

    pip install -e '.[dev,bench]'
    python bench/mutation.py                  # a random sample of 40 mutants (~1 h here)
    python bench/mutation.py --sample 0       # every mutant (several thousand: days)

Not part of CI (hours). The clone is of the checkout's HEAD: commit first. Each mutant runs
TESTS below with `-x` (stop at the first failure), with a timeout; a mutant that hangs the
tests counts as killed (cosmic-ray's view: the tests noticed).
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULES = ["src/wlock/cache/sync.py", "src/wlock/cache/transfer.py",
           "src/wlock/cache/layout.py", "src/wlock/cache/check.py",
           "src/wlock/lock/lockfile.py", "src/wlock/lock/resolve.py"]
TESTS = ["tests/unit", "tests/integration/test_promises.py", "tests/integration/test_sync.py",
         "tests/integration/test_hostile_cache.py", "tests/integration/test_faults.py",
         "tests/cli/test_lock_cli.py"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sample", type=int, default=40,
                        help="mutants to run, drawn at random (0: all)")
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds one mutant's tests may take")
    parser.add_argument("--keep", type=Path, help="work here and keep the session")
    args = parser.parse_args()

    work = args.keep or Path(tempfile.mkdtemp(prefix="wlock-mutation-"))
    clone = work / "repo"
    if not clone.exists():
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    config = clone / "mutation.toml"
    tests = " ".join(TESTS)
    config.write_text(
        "[cosmic-ray]\n"
        f"module-path = {MODULES!r}\n"
        f"timeout = {args.timeout}\n"
        "excluded-modules = []\n"
        f'test-command = "{sys.executable} -m pytest -x -q -n 2 -p no:cacheprovider {tests}"\n'
        "\n[cosmic-ray.distributor]\nname = \"local\"\n".replace("'", '"'))
    session = work / "session.sqlite"
    cosmic = [str(Path(sys.executable).parent / "cosmic-ray")]
    env = {**os.environ, "PYTHONPATH": str(clone / "src")}  # the clone's code, mutated
    subprocess.run([*cosmic, "init", str(config), str(session), "--force"], cwd=clone,
                   check=True, env=env)
    total, chosen = sample(session, args.sample, args.seed)
    print(f"{total} mutants in {len(MODULES)} modules; running {chosen}", flush=True)
    subprocess.run([*cosmic, "exec", str(config), str(session)], cwd=clone, check=True,
                   env=env)
    report(session, total)


def sample(session: Path, size: int, seed: int) -> tuple[int, int]:
    """Mark all but `size` random mutants as skipped. Returns (all, chosen)."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    with use_db(str(session), WorkDB.Mode.open) as db:
        pending = [item.job_id for item in db.pending_work_items]
        if not size or size >= len(pending):
            return len(pending), len(pending)
        keep = set(random.Random(seed).sample(pending, size))
        for job_id in pending:
            if job_id not in keep:
                db.set_result(job_id, WorkResult(worker_outcome=WorkerOutcome.SKIPPED))
        return len(pending), size


def report(session: Path, total: int) -> None:
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome

    outcomes: Counter[str] = Counter()
    survivors = []
    with use_db(str(session), WorkDB.Mode.open) as db:
        for item, result in db.completed_work_items:
            if result.worker_outcome == WorkerOutcome.SKIPPED:
                continue
            if result.worker_outcome == WorkerOutcome.ABNORMAL:  # a timeout: noticed
                outcomes["killed (timeout)"] += 1
                continue
            outcomes[str(result.test_outcome.value if result.test_outcome else "error")] += 1
            if result.test_outcome == TestOutcome.SURVIVED:
                survivors.append((item, result))
    killed = outcomes["killed"] + outcomes["killed (timeout)"]
    judged = killed + outcomes["survived"]
    print(f"\n{judged} mutants judged (of {total}): " + ", ".join(
        f"{n} {what}" for what, n in sorted(outcomes.items())))
    if judged:
        print(f"score: {killed / judged:.0%} killed")
    for item, result in survivors:
        for mutation in item.mutations:
            print(f"\nSURVIVED {mutation.module_path}:{mutation.start_pos[0]} "
                  f"{mutation.operator_name}")
        print(result.diff)


if __name__ == "__main__":
    main()
