"""A pytest plugin for bench/mutation.py's coverage run: names coverage's context after the
running test, in this process (`switch_context`) and in every process the test starts
(coverage's subprocess patch reads the context from WLOCK_MUTATION_TEST through the config's
`context = ${WLOCK_MUTATION_TEST}`), and writes how long each test took, so each mutant can
run only the tests that execute its line, fastest first.

    pytest -p mutation_contexts ...   (with bench/ on PYTHONPATH, under `coverage run`)
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import coverage
import pytest

_durations: dict[str, float] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    os.environ["WLOCK_MUTATION_TEST"] = item.nodeid
    current = coverage.Coverage.current()
    if current is not None:
        current.switch_context(item.nodeid)
    started = time.perf_counter()
    yield
    _durations[item.nodeid] = time.perf_counter() - started


def pytest_sessionfinish(session: pytest.Session) -> None:
    folder = os.environ.get("WLOCK_MUTATION_DURATIONS")
    if folder and _durations:
        path = Path(folder) / f"durations.{os.getpid()}.json"
        path.write_text(json.dumps(_durations), encoding="utf-8")
