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
         "tests/cli/test_lock_cli.py", "tests/cli/test_habits.py"]


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
    total, chosen = sample(session, clone, args.sample, args.seed)
    print(f"{total} mutants outside type annotations in {len(MODULES)} modules; running "
          f"{chosen}", flush=True)
    subprocess.run([*cosmic, "exec", str(config), str(session)], cwd=clone, check=True,
                   env=env)
    report(session, total)


def sample(session: Path, clone: Path, size: int, seed: int) -> tuple[int, int]:
    """Skip the mutants inside type annotations (equivalent: under `from __future__ import
    annotations` they are never evaluated, so `int | None` -> `int / None` changes nothing),
    then all but `size` random ones of the rest. Returns (mutants that matter, chosen)."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    with use_db(str(session), WorkDB.Mode.open) as db:
        spans: dict[Path, list[tuple[tuple[int, int], tuple[int, int]]]] = {}
        pending = []
        for item in db.pending_work_items:
            mutation = item.mutations[0]
            path = clone / mutation.module_path
            if path not in spans:
                spans[path] = annotation_spans(path)
            inside = any(start <= mutation.start_pos and mutation.end_pos <= end
                         for start, end in spans[path])
            if inside:
                db.set_result(item.job_id, WorkResult(worker_outcome=WorkerOutcome.SKIPPED))
            else:
                pending.append(item.job_id)
        if not size or size >= len(pending):
            return len(pending), len(pending)
        keep = set(random.Random(seed).sample(pending, size))
        for job_id in pending:
            if job_id not in keep:
                db.set_result(job_id, WorkResult(worker_outcome=WorkerOutcome.SKIPPED))
        return len(pending), size


def annotation_spans(path: Path) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """(start, end) positions of every type annotation in the module."""
    import ast

    spans = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        notes: list[ast.expr | None] = []
        if isinstance(node, ast.arg):
            notes.append(node.annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            notes.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            notes.append(node.annotation)
        spans += [((n.lineno, n.col_offset), (n.end_lineno or n.lineno, n.end_col_offset or 0))
                  for n in notes if n is not None]
    return spans


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
