"""A no-op `wlock sync` on a 1,000-file lock: everything present, so no request is made and
the answer comes from `stat` alone.

    python bench/noop_sync.py [--files 1000] [--runs 10]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from _common import compile_wlock, machine, median, run, timed

from wlock.hubserver.process import HubProcess
from wlock.hubserver.store import StoreBuilder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    compile_wlock()

    with tempfile.TemporaryDirectory(prefix="wlock-bench-", dir=os.environ.get("BENCH_DIR")) as tmp:
        root = Path(tmp)
        files: dict[str, bytes | Path] = {
            f"shards/{n // 100:02d}/part-{n:05d}.json": f'{{"n": {n}}}\n'.encode()
            for n in range(args.files)
        }
        StoreBuilder(root / "store").commit("dataset", "bench/many", files)
        project, cache = root / "project", root / "cache"
        project.mkdir()
        (project / "weights.toml").write_text('[[dataset]]\nid = "bench/many"\n')
        with HubProcess(root / "store") as hub:
            run([sys.executable, "-m", "wlock", "lock", "--endpoint", hub.endpoint], cwd=project)
            run([sys.executable, "-m", "wlock", "sync", "--endpoint", hub.endpoint,
                 "--cache-dir", str(cache)],
                cwd=project)
            hub.reset_stats()
            # The console script, as users run it (python -m adds runpy's imports).
            wlock = str(Path(sys.executable).with_name("wlock"))
            argv = [wlock, "sync", "--endpoint", hub.endpoint, "--cache-dir", str(cache)]
            noop = [timed(lambda: run(argv, cwd=project)) for _ in range(args.runs)]
            requests = hub.stats()["requests"]
            python = [timed(lambda: run([sys.executable, "-c", "pass"]))
                      for _ in range(args.runs)]

    print(f"machine: {machine()}")
    print(f"no-op wlock sync, {args.files} locked files: median {median(noop):.3f}s over "
          f"{args.runs} runs (best {min(noop):.3f}s); requests made: {requests}")
    print(f"for scale, the interpreter alone (`python -c pass`): {median(python):.3f}s")


if __name__ == "__main__":
    main()
