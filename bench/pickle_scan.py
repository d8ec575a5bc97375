"""What judging pickles at lock time costs: `wlock lock` of a repo of 100 torch checkpoints
(each a torch.save zip: data.pkl and a tensor of --mb MiB), which reads each one's zip
directory and data.pkl through HTTP ranges, against downloading them (`snapshot_download`),
and against `wlock lock` of the same repo with its pickles named .safetensors (no scan).

    python bench/pickle_scan.py [--files 100] [--mb 4]

Prints wall times and the bytes the emulator served to each.
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from _common import WLOCK, machine, snapshot_download

from wlock.hubserver.process import HubProcess
from wlock.hubserver.store import StoreBuilder
from wlock.units import human_size


def checkpoint(n: int, megabytes: int) -> bytes:
    """A file as torch.save lays it out: a pickle naming torch's rebuild functions, then
    one tensor's bytes."""
    import pickle

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pickle.dumps({"layer": n, "shape": [megabytes, 2**20]}))
        z.writestr("archive/data/0", os.urandom(megabytes * 2**20))
        z.writestr("archive/version", b"3\n")
    return out.getvalue()


def served(hub: HubProcess) -> int:
    return sum(e["bytes"] for e in hub.stats()["log"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=100)
    parser.add_argument("--mb", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="wlock-bench-") as tmp:
        root = Path(tmp)
        builder = StoreBuilder(root / "store")
        files = {f"shard-{n:03d}.bin": checkpoint(n, args.mb) for n in range(args.files)}
        total = sum(len(b) for b in files.values())
        builder.commit("model", "bench/pickles", files)
        builder.commit("model", "bench/plain", {k.replace(".bin", ".safetensors"): v
                                               for k, v in files.items()})
        print(f"machine: {machine()}")
        print(f"{args.files} checkpoints, {human_size(total)}")
        with HubProcess(root / "store") as hub:
            env = {**os.environ, "HF_HUB_DISABLE_TELEMETRY": "1"}
            for repo, label in (("bench/pickles", "wlock lock, pickles scanned"),
                                ("bench/plain", "wlock lock, nothing to scan")):
                project = root / repo.replace("/", "-")
                project.mkdir()
                (project / "weights.toml").write_text(
                    f'[[model]]\nid = "{repo}"\n\n[tool.wlock.policy]\npickle = "allow"\n')
                hub.reset_stats()
                started = time.monotonic()
                subprocess.run([*WLOCK, "-q", "lock", "--endpoint", hub.endpoint], cwd=project,
                               check=True, env=env)
                took = time.monotonic() - started
                print(f"{label:<34} {took:>6.2f}s  served {human_size(served(hub)):>9}")
            hub.reset_stats()
            started = time.monotonic()
            subprocess.run(snapshot_download("bench/pickles", root / "hf", hub.endpoint),
                           check=True, env=env, capture_output=True)
            took = time.monotonic() - started
            print(f"{'snapshot_download (all the bytes)':<34} {took:>6.2f}s  served "
                  f"{human_size(served(hub)):>9}")
    return


if __name__ == "__main__":
    sys.exit(main())
