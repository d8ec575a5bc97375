"""Mutation testing of the modules that keep wlock's promises, with cosmic-ray: each mutant
(an operator flipped, a constant changed, a statement dropped...) is applied to a clone of
this repository and tests are run against it; a mutant the tests do not notice "survives".
Prints the score and every survivor's diff.

    pip install -e . --group dev --group bench
    python bench/mutation.py --keep DIR           # every mutant (2,939: ~9 h on 2 cores)
    python bench/mutation.py --sample 100         # a random sample
    python bench/mutation.py --keep DIR --report  # what has run so far
    python bench/mutation.py --keep DIR --again   # survivors first, with every test

Each mutant runs only the tests that execute its line. A first run of the suite under
coverage.py names each measured line's tests, in the test process and in every process a
test starts (the CLI, the transfer workers: a `sitecustomize` starts coverage in each, its
context the test's id from the environment). A mutant then runs those tests with `-x`: the
tests that killed mutants in the same function first, then the fastest. A mutant in code
run at import (a module constant, a decorator) runs every test; a default argument, the
tests that run its function's body. `--budget` caps the seconds of tests one mutant runs:
a survivor is reported with how many of its line's tests it ran, so the cap is visible;
`--again` judges the survivors again, first and with no cap. A mutant whose line no test
executes survives without running anything. A mutant that hangs its tests past the
timeout counts as killed (cosmic-ray's view: the tests noticed). Survivors that
bench/mutation_harmless.toml explains are counted by reason; every other one is printed.

Not part of CI. The clones are of the checkout's HEAD (or `--at REF`: a session whose
modules have since changed on main goes on from a branch that holds them, with new tests
picked onto it): commit first. `--jobs` clones run mutants side by side (each test run is
serial, so two jobs keep two cores busy).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import queue
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODULES = ["src/wlock/cache/sync.py", "src/wlock/cache/transfer.py",
           "src/wlock/cache/layout.py", "src/wlock/cache/check.py",
           "src/wlock/lock/lockfile.py", "src/wlock/lock/resolve.py"]
# The suite but its static checks (ruff, mypy: they read the source, never run it) and
# lint's tests (lint never imports the modules above). Coverage picks among these.
TESTS = ["tests/unit", "tests/integration", "tests/cli/test_lock_cli.py",
         "tests/cli/test_habits.py", "tests/test_layers.py"]
ALL = "*"  # the tests a mutant in import-time code runs: every one
NOT_KILLED = ("survived", "uncovered", "error")  # verdicts; "error": the harness's fault


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sample", type=int, default=0,
                        help="mutants to run, drawn at random (0: all)")
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--jobs", type=int, default=2, help="mutants run side by side")
    parser.add_argument("--budget", type=float, default=60.0,
                        help="seconds of tests (as measured) one mutant may run (0: no cap;"
                        " --again judges the survivors with none)")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds one mutant's test run may take at most")
    parser.add_argument("--keep", type=Path, help="work here, keep it, resume from it")
    parser.add_argument("--again", action="store_true",
                        help="with --keep: judge again, first and with every test of their "
                        "lines, the survivors that bench/mutation_harmless.toml does not "
                        "explain (after adding tests)")
    parser.add_argument("--at", default="HEAD", metavar="REF",
                        help="run this commit of the checkout (default HEAD): to go on with a "
                        "session after the modules changed on main, from a branch that "
                        "holds its modules (and new tests only)")
    parser.add_argument("--report", action="store_true",
                        help="with --keep: print the report of what has run, run nothing")
    args = parser.parse_args()

    work = (args.keep or Path(tempfile.mkdtemp(prefix="wlock-mutation-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    session = work / "session.sqlite"
    if args.report:
        report(session)
        return
    commit = subprocess.run(["git", "rev-parse", "--verify", f"{args.at}^{{commit}}"], cwd=ROOT,
                            check=True, capture_output=True, text=True).stdout.strip()
    clones = [clone_at(work / f"repo-{n}", commit) for n in range(max(1, args.jobs))]
    fingerprint = work / "modules.sha256"
    if not session.exists():
        init_session(clones[0], session)
        skip_annotations(session, clones[0])
        fingerprint.write_text(modules_digest(clones[0]), encoding="utf-8")
    elif fingerprint.read_text(encoding="utf-8") != modules_digest(clones[0]):
        sys.exit(f"{', '.join(MODULES)} changed since the session in {work} began: its "
                 "mutants no longer match the code. Go on from a branch holding its modules "
                 "(--at), or start another (a new --keep folder).")
    again = work / "again.json"
    first = json.loads(again.read_text(encoding="utf-8")) if again.exists() else []
    if args.again:  # added to those of an earlier --again that have not run yet
        first = list(dict.fromkeys([*first, *judge_again(session)]))
        again.write_text(json.dumps(first), encoding="utf-8")
    tests = measure(clones[0], work)
    pending = pending_items(session, args.sample, args.seed, first)
    stop = work / "STOP"
    stop.unlink(missing_ok=True)
    print(f"running {len(pending)} mutants, {len(clones)} at a time (Ctrl-C or `touch {stop}`"
          " stops after the ones in flight; run again with the same --keep to go on)",
          flush=True)
    run(session, pending, clones, tests, args.budget, args.timeout, stop, set(first))
    report(session)


def clone_at(path: Path, commit: str) -> Path:
    """A clone of the checkout's `commit` at `path`: made, or brought to it (new tests)
    with any mutant an interrupted run left in it undone."""
    if not path.exists():
        subprocess.run(["git", "clone", "-q", str(ROOT), str(path)], check=True)
    else:
        subprocess.run(["git", "checkout", "-q", "--", "."], cwd=path, check=True)
        subprocess.run(["git", "fetch", "-q", "origin", "+refs/heads/*:refs/remotes/origin/*"],
                       cwd=path, check=True)
    subprocess.run(["git", "checkout", "-q", "--detach", commit], cwd=path, check=True)
    subprocess.run([sys.executable, "-m", "compileall", "-q", "src"], cwd=path, check=True)
    return path


def modules_digest(clone: Path) -> str:
    digest = hashlib.sha256()
    for module in MODULES:
        digest.update((clone / module).read_bytes())
    return digest.hexdigest()


def judge_again(session: Path) -> list[str]:
    """Forget the verdicts of the survivors HARMLESS does not explain (and the harness's
    errors): they run again, with the tests as they are now."""
    import sqlite3

    from cosmic_ray.work_db import WorkDB, use_db

    explained = Harmless.load(session)
    again = []
    with use_db(str(session), WorkDB.Mode.open) as db:
        for item, result in db.completed_work_items:
            verdict = json.loads(result.output or "{}").get("verdict")
            if verdict in NOT_KILLED and not explained.explains(item, result):
                again.append(item.job_id)
    with sqlite3.connect(session) as conn:
        conn.executemany("DELETE FROM work_results WHERE job_id = ?", [(j,) for j in again])
    print(f"{len(again)} survivors to judge again, first", flush=True)
    return again


def init_session(clone: Path, session: Path) -> None:
    config = clone / "mutation.toml"
    config.write_text(
        "[cosmic-ray]\n"
        f"module-path = {json.dumps(MODULES)}\n"
        "timeout = 600\nexcluded-modules = []\ntest-command = \"false\"\n"
        "\n[cosmic-ray.distributor]\nname = \"local\"\n", encoding="utf-8")
    cosmic = str(Path(sys.executable).parent / "cosmic-ray")
    subprocess.run([cosmic, "init", str(config), str(session), "--force"], cwd=clone,
                   check=True)


def skip_annotations(session: Path, clone: Path) -> None:
    """Skip the mutants inside type annotations: under `from __future__ import annotations`
    they are never evaluated, so `int | None` -> `int / None` changes nothing."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    with use_db(str(session), WorkDB.Mode.open) as db:
        trees: dict[str, Module] = {}
        for item in list(db.pending_work_items):
            mutation = item.mutations[0]
            path = str(mutation.module_path)
            if path not in trees:
                trees[path] = Module(clone / path)
            if trees[path].in_annotation(mutation.start_pos, mutation.end_pos):
                db.set_result(item.job_id, WorkResult(worker_outcome=WorkerOutcome.SKIPPED))


def pending_items(session: Path, size: int, seed: int, first: list[str]) -> list[Any]:
    from cosmic_ray.work_db import WorkDB, use_db

    with use_db(str(session), WorkDB.Mode.open) as db:
        pending = list(db.pending_work_items)
    # In a random order, so that a run stopped part way is a fair sample of all; the
    # survivors judged again (--again) before the rest.
    random.Random(seed).shuffle(pending)
    ahead = set(first)
    pending.sort(key=lambda item: item.job_id not in ahead)
    return pending[:size] if size else pending


@dataclass
class Tests:
    durations: dict[str, float]  # test id -> seconds
    by_line: dict[str, dict[int, set[str]]]  # module -> line -> ids of the tests running it

    def fastest(self, ids: set[str] | str, first: Counter[str] | None = None) -> list[str]:
        """`ids` (ALL: every test), those in `first` first (most often first), then fastest
        first."""
        chosen = self.durations if ids == ALL else ids
        first = first or Counter()
        return sorted(chosen, key=lambda test: (-first[test], self.durations.get(test, 0.0),
                                                test))


class Killers:
    """Which tests killed mutants in each function so far. They run first for the next
    mutant there: a test that noticed one change to a function tends to notice the next,
    and a kill then takes one test, not every faster one before it."""

    def __init__(self) -> None:
        self._by_scope: dict[tuple[str, str], Counter[str]] = {}
        self._lock = threading.Lock()

    def add(self, scope: tuple[str, str], test: str) -> None:
        with self._lock:
            self._by_scope.setdefault(scope, Counter())[test] += 1

    def of(self, scope: tuple[str, str]) -> Counter[str]:
        with self._lock:
            return Counter(self._by_scope.get(scope, ()))


def measure(clone: Path, work: Path) -> Tests:
    """Run TESTS once under coverage, each line's tests named; kept in `work` while the
    clone's src/ and tests/ stay as they are."""
    saved = work / "tests.json"
    head = subprocess.run(["git", "rev-parse", "HEAD:src", "HEAD:tests"], cwd=clone,
                          check=True, capture_output=True, text=True).stdout.split()
    data = json.loads(saved.read_text(encoding="utf-8")) if saved.exists() else {}
    if data.get("commit") == head:
        return Tests(data["durations"], {module: {int(n): set(ids) for n, ids in lines.items()}
                                         for module, lines in data["by_line"].items()})
    folder = work / "coverage"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    site = work / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text("import coverage\ncoverage.process_startup()\n",
                                           encoding="utf-8")
    rcfile = work / "coverage.ini"
    rcfile.write_text("[run]\nparallel = true\nsigterm = true\n"
                      f"data_file = {folder / '.coverage'}\n"
                      f"include = {clone / 'src' / 'wlock'}/*\n"
                      "context = ${WLOCK_MUTATION_TEST}\n", encoding="utf-8")
    env = {**os.environ, "COVERAGE_PROCESS_START": str(rcfile),
           "WLOCK_MUTATION_DURATIONS": str(folder),
           "PYTHONPATH": os.pathsep.join([str(site), str(clone / "src"), str(ROOT / "bench")])}
    env.pop("WLOCK_MUTATION_TEST", None)
    print("running the tests once under coverage, to learn which run each line...",
          flush=True)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "mutation_contexts", "-n", "2", *TESTS], cwd=clone, env=env,
                          preexec_fn=default_sigint)
    if done.returncode != 0:
        sys.exit(f"the tests fail on the unmutated code (exit {done.returncode}): fix that "
                 "first, a mutation score means nothing over failing tests")
    print(f"  took {time.monotonic() - started:.0f}s", flush=True)

    import coverage

    cov = coverage.Coverage(data_file=str(folder / ".coverage"), config_file=str(rcfile))
    cov.combine(strict=True)
    data = cov.get_data()
    durations: dict[str, float] = {}
    for path in folder.glob("durations.*.json"):
        durations.update(json.loads(path.read_text(encoding="utf-8")))
    by_line: dict[str, dict[int, set[str]]] = {}
    for module in MODULES:
        lines = data.contexts_by_lineno(str(clone / module))
        by_line[module] = {n: {c for c in contexts if c} for n, contexts in lines.items()}
    saved.write_text(json.dumps({
        "commit": head, "durations": durations,
        "by_line": {module: {n: sorted(ids) for n, ids in lines.items()}
                    for module, lines in by_line.items()}}), encoding="utf-8")
    return Tests(durations, by_line)


def default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Module:
    """A module's syntax tree, to place a mutation: in an annotation, in code run at import,
    or in which statement's lines."""

    HEADED = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try,
              ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.ExceptHandler,
              ast.Match, ast.match_case)

    def __init__(self, path: Path, text: str | None = None) -> None:
        self.tree = ast.parse(path.read_text(encoding="utf-8") if text is None else text)
        self.annotations: list[tuple[tuple[int, int], tuple[int, int]]] = []
        for node in ast.walk(self.tree):
            notes: list[ast.expr | None] = []
            if isinstance(node, ast.arg):
                notes.append(node.annotation)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                notes.append(node.returns)
            elif isinstance(node, ast.AnnAssign):
                notes.append(node.annotation)
            self.annotations += [(start(n), end(n)) for n in notes if n is not None]

    def in_annotation(self, first: tuple[int, int], last: tuple[int, int]) -> bool:
        return any(a <= first and last <= b for a, b in self.annotations)

    def enclosing(self, first: tuple[int, int], last: tuple[int, int]) -> Iterator[ast.AST]:
        """The nodes holding the span `first`..`last`, outermost first."""
        node: ast.AST = self.tree
        while True:
            inner = [child for child in ast.iter_child_nodes(node)
                     if hasattr(child, "lineno") and start(child) <= first
                     and last <= end(child)]
            if not inner:
                return
            node = inner[0]
            yield node

    def function(self, first: tuple[int, int]) -> str:
        """The qualified name of the function or class holding `first` ("" at module level)."""
        return ".".join(node.name for node in self.enclosing(first, first) if isinstance(
            node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))

    def lines(self, first: tuple[int, int], last: tuple[int, int]) -> range | None:
        """The lines of the innermost statement holding the mutation (of its header, for
        an `if`, a loop, a `def`...: its body runs apart), or None when that code runs at
        import: outside every function body. A default argument of a function defined at
        import gives the function's body: only calls use it."""
        in_function = False
        statement: ast.AST | None = None
        for node in self.enclosing(first, last):
            if isinstance(node, (ast.stmt, ast.ExceptHandler, ast.match_case)):
                statement = node
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                body = node.body if isinstance(node.body, list) else [node.body]
                if start(body[0]) <= first:
                    in_function = True
        if (not in_function and isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef))
                and start(statement) <= first < start(statement.body[0])):
            # A default argument of a function defined at import: evaluated then, but used
            # only by calls, each of which runs the body.
            return range(statement.body[0].lineno, (statement.end_lineno or 0) + 1)
        if not in_function or statement is None:
            return None
        head, tail = statement.lineno, statement.end_lineno or statement.lineno
        body = getattr(statement, "body", None)
        if (isinstance(statement, self.HEADED) and isinstance(body, list) and body
                and first < start(body[0])):
            tail = max(head, body[0].lineno - 1)
        return range(head, tail + 1)


def start(node: Any) -> tuple[int, int]:
    return (node.lineno, node.col_offset)


def end(node: Any) -> tuple[int, int]:
    return (node.end_lineno or node.lineno, node.end_col_offset or 0)


@dataclass
class Outcome:
    job_id: str
    verdict: str  # killed, survived, timeout, uncovered, error
    ran: int  # tests given to pytest
    covering: int  # tests that execute the mutated line (0 for import-time code: all)
    seconds: float
    diff: str
    output: str
    where: str = ""
    scope: tuple[str, str] = ("", "")  # module, function
    killer: str = ""  # the test that failed


def run(session: Path, items: list[Any], clones: list[Path], tests: Tests, budget: float,
        timeout: float, stop: Path, again: set[str]) -> None:
    """Each clone's thread takes the next mutant until none is left or `stop` exists (or
    Ctrl-C): the mutants in flight finish, their clone is restored, the rest stay pending.
    The mutants in `again` (survivors judged again) run with no budget."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome, WorkResult

    modules = {module: Module(clones[0] / module) for module in MODULES}
    killers = Killers()
    with use_db(str(session), WorkDB.Mode.open) as db:
        for done_item, result in db.completed_work_items:
            killer = json.loads(result.output or "{}").get("killer")
            if killer:
                mutation = done_item.mutations[0]
                module = str(mutation.module_path)
                killers.add((module, modules[module].function(mutation.start_pos)), killer)
    todo: queue.SimpleQueue[Any] = queue.SimpleQueue()
    for item in items:
        todo.put(item)
    outcomes: queue.SimpleQueue[Outcome | None] = queue.SimpleQueue()
    stopping = threading.Event()

    def work(clone: Path) -> None:
        try:
            while not stopping.is_set() and not stop.exists():
                try:
                    item = todo.get_nowait()
                except queue.Empty:
                    return
                outcomes.put(mutate_and_test(
                    clone, item, modules, tests, killers,
                    0.0 if item.job_id in again else budget, timeout))
        finally:
            outcomes.put(None)

    threads = [threading.Thread(target=work, args=(clone,)) for clone in clones]
    for thread in threads:
        thread.start()
    started = time.monotonic()
    verdicts: Counter[str] = Counter()
    running = len(threads)
    with use_db(str(session), WorkDB.Mode.open) as db:
        while running:
            try:
                outcome = outcomes.get()
            except KeyboardInterrupt:
                stopping.set()
                print("stopping: the mutants in flight finish first", flush=True)
                continue
            if outcome is None:
                running -= 1
                continue
            verdicts[outcome.verdict] += 1
            if outcome.killer:
                killers.add(outcome.scope, outcome.killer)
            test_outcome = {"killed": TestOutcome.KILLED, "timeout": TestOutcome.KILLED,
                            "error": TestOutcome.INCOMPETENT}.get(outcome.verdict,
                                                                  TestOutcome.SURVIVED)
            output = json.dumps({"verdict": outcome.verdict, "ran": outcome.ran,
                                 "covering": outcome.covering, "killer": outcome.killer,
                                 "seconds": round(outcome.seconds, 1),
                                 "tail": outcome.output[-3000:]})
            db.set_result(outcome.job_id, WorkResult(
                worker_outcome=WorkerOutcome.NORMAL, test_outcome=test_outcome,
                output=output, diff=outcome.diff))
            done = sum(verdicts.values())
            left = (time.monotonic() - started) / done * (len(items) - done)
            print(f"[{done}/{len(items)}] {outcome.verdict:9} {outcome.seconds:5.1f}s "
                  f"ran {outcome.ran:3} {outcome.where} | {dict(verdicts)} | "
                  f"~{left / 60:.0f} min left", flush=True)


def mutate_and_test(clone: Path, item: Any, modules: dict[str, Module], tests: Tests,
                    killers: Killers, budget: float, timeout: float) -> Outcome:
    import cosmic_ray.plugins
    from cosmic_ray.mutating import _make_diff, use_mutation

    mutation = item.mutations[0]
    module = str(mutation.module_path)
    where = (f"{module.removeprefix('src/wlock/')}:{mutation.start_pos[0]} "
             f"{mutation.operator_name.removeprefix('core/')}")
    lines = modules[module].lines(mutation.start_pos, mutation.end_pos)
    if lines is None:
        covering: set[str] | str = ALL
    else:
        covering = set()
        for n in lines:
            covering |= tests.by_line[module].get(n, set())
    scope = (module, modules[module].function(mutation.start_pos))
    ordered = tests.fastest(covering, killers.of(scope))
    chosen: list[str] = []
    spent = 0.0
    for test in ordered:
        spent += tests.durations.get(test, 0.0)
        if budget and chosen and spent > budget:
            break
        chosen.append(test)
    with _plugins:  # stevedore's registry, loaded on first use
        operator = cosmic_ray.plugins.get_operator(mutation.operator_name)(
            **(getattr(mutation, "operator_args", None) or {}))
    began = time.monotonic()
    with use_mutation(clone / module, operator, mutation.occurrence) as (before, after):
        if after is None:
            return Outcome(item.job_id, "error", 0, 0, 0.0, "", "no mutation applied", where,
                           scope)
        diff = "\n".join(_make_diff(before, after, module))
        if not chosen:
            return Outcome(item.job_id, "uncovered", 0, 0, 0.0, diff, "", where, scope)
        # Long enough for the chosen tests on a loaded machine; a mutant that hangs them
        # is killed sooner than the tests' own timeouts (two minutes a command) would.
        verdict, output = run_tests(clone, chosen, min(timeout, 30 + 3 * spent))
    count = 0 if covering == ALL else len(covering)
    failed = re.search(r"^(?:FAILED|ERROR) (\S+)", output, re.MULTILINE)
    killer = failed[1] if verdict == "killed" and failed and failed[1] in tests.durations \
        else ""
    return Outcome(item.job_id, verdict, len(chosen), count, time.monotonic() - began, diff,
                   output, where, scope, killer)


_plugins = threading.Lock()


def run_tests(clone: Path, chosen: list[str], timeout: float) -> tuple[str, str]:
    env = {**os.environ, "PYTHONPATH": str(clone / "src"),  # the clone's code, mutated
           "PYTHONDONTWRITEBYTECODE": "1"}  # never a mutant's bytecode cached
    for name in ("COVERAGE_PROCESS_START", "WLOCK_MUTATION_TEST"):
        env.pop(name, None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *chosen],
        cwd=clone, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True, preexec_fn=default_sigint)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return "timeout", ""
    text = output.decode("utf-8", "replace")
    if proc.returncode == 0:
        return "survived", text
    if proc.returncode == 5 or "ERROR: not found:" in text:  # the harness's fault
        return "error", text
    return "killed", text  # a test failed, or the mutant broke an import (exits 2, 4)


def report(session: Path) -> None:
    """The score, then each survivor: those HARMLESS explains (equivalent mutants, or ones
    no user could see) counted by reason, every other one in full."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome

    verdicts: Counter[str] = Counter()
    survivors = []
    with use_db(str(session), WorkDB.Mode.open) as db:
        for item, result in db.completed_work_items:
            if result.worker_outcome == WorkerOutcome.SKIPPED:
                continue
            detail = json.loads(result.output or "{}")
            verdict = detail.get("verdict", "error")
            verdicts[verdict] += 1
            if verdict in NOT_KILLED:
                survivors.append((item, result, detail))
    killed = verdicts["killed"] + verdicts["timeout"]
    judged = killed + verdicts["survived"] + verdicts["uncovered"]
    print(f"\n{judged} mutants judged: " + ", ".join(
        f"{n} {what}" for what, n in sorted(verdicts.items())))
    if not judged:
        return
    explained = Harmless.load(session)
    reasons: Counter[str] = Counter()
    unexplained = []
    for item, result, detail in sorted(survivors, key=lambda s: (
            str(s[0].mutations[0].module_path), s[0].mutations[0].start_pos)):
        why = explained.explains(item, result)
        if why:
            reasons[why] += 1
        else:
            unexplained.append((item, result, detail))
    harmless = sum(reasons.values())
    print(f"score: {killed / judged:.1%} killed; {harmless} survivors explained as harmless "
          f"in {HARMLESS.relative_to(ROOT)}, {len(unexplained)} not")
    if harmless < judged:
        print(f"score with the harmless ones set aside: {killed / (judged - harmless):.1%}")
    for item, result, detail in unexplained:
        mutation = item.mutations[0]
        ran = ("no test executes this line" if detail.get("verdict") == "uncovered" else
               f"ran {detail.get('ran')} of {detail.get('covering') or 'all'} tests")
        print(f"\n{detail.get('verdict', 'error').upper()} {mutation.module_path}:"
              f"{mutation.start_pos[0]} {mutation.operator_name} ({ran})")
        print(result.diff)
    if reasons:
        print("\nharmless survivors, by reason:")
        for why, n in reasons.most_common():
            print(f"  {n:4}  {why}")


HARMLESS = ROOT / "bench" / "mutation_harmless.toml"


def _listed(value: Any) -> list[Any]:
    """A harmless entry's `to`: one line, or a list of them."""
    return value if isinstance(value, list) else [value]


class Harmless:
    """bench/mutation_harmless.toml: survivors judged harmless, each by its module, the
    source line it mutates (as written, stripped: line numbers move as code does), the line
    after it or the function holding it where the same text occurs twice (`next`,
    `function`), what the mutant made of it where only that replacement is harmless (`to`:
    one line, or a list of the lines equally harmless), the operators (all when absent) and
    why."""

    def __init__(self, entries: list[dict[str, Any]], clone: Path) -> None:
        self.entries = entries
        self.clone = clone
        self._modules: dict[str, Module] = {}

    def _function(self, mutation: Any) -> str:
        """The function holding `mutation` in the session's code: its clone's commit (the
        checkout's modules may have moved on; the clone may hold a mutant in flight)."""
        module = str(mutation.module_path)
        if module not in self._modules:
            text = subprocess.run(["git", "show", f"HEAD:{module}"], cwd=self.clone,
                                  check=True, capture_output=True, text=True).stdout
            self._modules[module] = Module(self.clone / module, text)
        return self._modules[module].function(mutation.start_pos)

    @classmethod
    def load(cls, session: Path) -> Harmless:
        import tomllib

        with open(HARMLESS, "rb") as f:
            return cls(tomllib.load(f).get("harmless", []), session.parent / "repo-0")

    def explains(self, item: Any, result: Any) -> str | None:
        """Why the survivor `item` is harmless, or None (never for a harness error)."""
        if json.loads(result.output or "{}").get("verdict") == "error":
            return None
        return self.why(item.mutations[0], result.diff or "")

    def why(self, mutation: Any, diff: str) -> str | None:
        lines = diff.splitlines()
        changed = [n for n, line in enumerate(lines)
                   if line.startswith("-") and not line.startswith("---")]
        removed = lines[changed[0]][1:].strip() if changed else None
        added = next((line[1:].strip() for line in lines
                      if line.startswith("+") and not line.startswith("+++")), None)
        after = next((line[1:].strip() for line in lines[changed[-1] + 1:]
                      if not line.startswith("+")), None) if changed else None
        for entry in self.entries:
            operators = entry.get("operators")
            if entry["module"] == str(mutation.module_path) and entry["line"] == removed \
                    and entry.get("next", after) == after \
                    and added in _listed(entry.get("to", added)) \
                    and ("function" not in entry or entry["function"] == self._function(mutation)) \
                    and (operators is None or mutation.operator_name.removeprefix("core/")
                         in operators):
                return str(entry["why"])
        return None


if __name__ == "__main__":
    main()
