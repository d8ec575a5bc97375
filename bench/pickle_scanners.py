"""Which judgement wlock builds on: its own walk (wlock.scan) against picklescan, and fickling
and modelscan where they are installed, on the corpus of tests/pickle_corpus.py.

    python bench/pickle_scanners.py          # pip install -e . --group dev --group bench first

- caught: malicious files refused (every case of the corpus, each citing its source);
- false alarms: benign files refused, over the benign twins (one per case, each loaded by
  torch, numpy or joblib in tests/unit/test_pickles.py) and 25 real files written by
  torch.save, np.save/np.savez, joblib.dump and pickle;
- bytes read per file, through a reader that counts (wlock reads through HTTP ranges at
  lock time, so what it reads is what the network carries);
- the bounds: peak memory (the process's max RSS) and bytes read judging a 1 MB zip whose
  pickle inflates to 1 GiB, and 6 MiB of one opcode, each in a process of its own.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.pickle_corpus import CASES, MARKER, benign_checkpoints  # noqa: E402

logging.disable(logging.WARNING)
MIB = 1024 * 1024


class Counting(io.BytesIO):
    read_bytes = 0

    def read(self, n: int | None = -1) -> bytes:
        data = super().read(n)
        self.read_bytes += len(data)
        return data

    def readinto(self, b: memoryview) -> int:  # type: ignore[override]
        n = super().readinto(b)
        self.read_bytes += n
        return n

    def readline(self, limit: int | None = -1) -> bytes:
        data = super().readline(limit)
        self.read_bytes += len(data)
        return data


def wlock_verdict(name: str, data: bytes) -> tuple[bool, int]:
    from wlock.policy import Policy, judge_pickle
    from wlock.scan import judge_file

    stream = Counting(data)
    found = judge_file(stream, name, None, len(data))
    return bool(judge_pickle("bench/x", found, Policy())), stream.read_bytes


def picklescan_verdict(name: str, data: bytes) -> tuple[bool, int]:
    from picklescan.scanner import SafetyLevel, scan_bytes

    stream = Counting(data)
    try:
        result = scan_bytes(stream, name, "." + name.rsplit(".", 1)[-1])
    except Exception:  # noqa: BLE001 - a file it cannot read counts as flagged, as for the others
        return True, stream.read_bytes
    # What wlock's earlier lock did with picklescan: refused an import outside the allowlist
    # (picklescan's own danger levels are a deny list; its allowlist-equivalent is "not
    # innocuous"), and nothing for a file it could not finish.
    from wlock.policy import safe_import

    bad = any(not safe_import(f"{g.module}.{g.name}") for g in result.globals) or any(
        g.safety == SafetyLevel.Dangerous for g in result.globals)
    return bad, stream.read_bytes


def _via_file(check: Callable[[Path], bool]) -> Callable[[str, bytes], tuple[bool, int]]:
    def verdict(name: str, data: bytes) -> tuple[bool, int]:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / name
            path.write_bytes(data)
            with contextlib.redirect_stdout(io.StringIO()):
                try:
                    return check(path), -1
                except Exception:  # noqa: BLE001 - a file it cannot read counts as flagged
                    return True, -1
    return verdict


def _fickling(path: Path) -> bool:
    import fickling

    return not fickling.is_likely_safe(str(path))


def _modelscan(path: Path) -> bool:
    from modelscan.modelscan import ModelScan

    result = ModelScan().scan(str(path))
    return bool(result.get("issues")) or bool(result.get("errors"))


def bound_cases(folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    bomb = folder / "inflates-to-1GiB.bin"
    size = 1024 * MIB
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z, \
            z.open("archive/data.pkl", "w", force_zip64=True) as member:
        member.write(b"\x80\x04\x8e" + size.to_bytes(8, "little"))
        for _ in range(size // MIB):
            member.write(bytes(MIB))
        member.write(b".")
    bomb.write_bytes(out.getvalue())
    flood = folder / "one-opcode-6MiB.pkl"
    flood.write_bytes(b"\x80\x02" + b"]" * (6 * MIB) + b".")
    return {bomb.name: bomb, flood.name: flood}


# VmHWM, not ru_maxrss: Linux keeps a process's ru_maxrss across exec, so a child would report
# the parent's peak (this script holds torch and the corpus).
_CHILD = """
import json, sys, time
sys.path.insert(0, {root!r})
from bench.pickle_scanners import {fn}
data = open({path!r}, "rb").read()
started = time.perf_counter()
refused, read = {fn}({name!r}, data)
hwm = next(int(line.split()[1]) for line in open("/proc/self/status")
           if line.startswith("VmHWM:"))
print(json.dumps({{"refused": refused, "read": read, "seconds": time.perf_counter() - started,
                  "rss": hwm * 1024}}))
"""


def bounded(fn: str, path: Path) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-c", _CHILD.format(
        root=str(ROOT), fn=fn, path=str(path), name=path.name)], capture_output=True,
        text=True, timeout=1800)
    if done.returncode:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr else "?"}  # type: ignore[dict-item]
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def main() -> None:
    contenders: dict[str, Callable[[str, bytes], tuple[bool, int]]] = {
        "wlock": wlock_verdict}
    for label, module, fn in (("picklescan", "picklescan", picklescan_verdict),
                              ("fickling", "fickling", _via_file(_fickling)),
                              ("modelscan", "modelscan", _via_file(_modelscan))):
        try:
            __import__(module)
        except ImportError:
            print(f"{label}: not installed (pip install {module}), left out")
            continue
        contenders[label] = fn
    with tempfile.TemporaryDirectory(prefix="wlock-pickles-") as tmp:
        real = {name: path.read_bytes() for name, path in benign_checkpoints(Path(tmp)).items()}
        bad = {c.name: c.malicious() for c in CASES}
        twins = {c.name: c.benign() for c in CASES}
        print(f"corpus: {len(bad)} malicious, {len(twins)} benign twins, {len(real)} real "
              "files of torch, numpy and joblib")
        print(f"{'judge':<11} {'caught':>8} {'false alarms':>13} {'(real)':>7} "
              f"{'bytes read/file':>16} {'time':>7}")
        for label, verdict in contenders.items():
            started = time.perf_counter()
            caught = {n for n, d in bad.items() if verdict(n, d)[0]}
            alarms = {n for n, d in twins.items() if verdict(n, d)[0]}
            real_alarms = {n for n, d in real.items() if verdict(n, d)[0]}
            reads = [verdict(n, d)[1] for n, d in {**bad, **real}.items()]
            took = time.perf_counter() - started
            mean = (f"{sum(reads) / len(reads):,.0f}" if all(r >= 0 for r in reads)
                    else "n/a")
            print(f"{label:<11} {len(caught):>4}/{len(bad):<3} "
                  f"{len(alarms) + len(real_alarms):>6}/{len(twins) + len(real):<6} "
                  f"{len(real_alarms):>4}   {mean:>16} {took:>6.2f}s")
            if missed := sorted(set(bad) - caught):
                print(f"{'':<11} missed: {', '.join(missed)}")
            if flagged := sorted(alarms | real_alarms):
                print(f"{'':<11} false alarms: {', '.join(flagged)}")
        print("\nbounds (each judged in a process of its own; default limits):")
        for name, path in bound_cases(Path(tmp) / "bounds").items():
            for label, fn in (("wlock", "wlock_verdict"), ("picklescan", "picklescan_verdict")):
                if label not in contenders:
                    continue
                got = bounded(fn, path)
                if "error" in got:
                    print(f"  {name} ({path.stat().st_size:,} bytes) {label}: {got['error']}")
                    continue
                print(f"  {name} ({path.stat().st_size:,} bytes) {label}: "
                      f"{'refused' if got['refused'] else 'passed'}, peak RSS "
                      f"{got['rss'] / MIB:,.0f} MiB, read {got['read']:,} bytes, "
                      f"{got['seconds']:.1f}s")
        locked_memory(bound_cases(Path(tmp) / "bounds"), Path(tmp))
    print(f"marker left by a payload that ran: {os.path.exists(f'/tmp/{MARKER}')}")


# A process's ru_maxrss starts at its parent's (Linux keeps it across fork and exec), so the
# lock runs under a small Python that reports its children's peak.
_MEASURE = """
import resource, subprocess, sys
done = subprocess.run(sys.argv[2:], cwd=sys.argv[1], capture_output=True, text=True)
print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)
print(done.stderr)
"""


def locked_memory(files: dict[str, Path], root: Path) -> None:
    """`wlock lock` of a repo holding both hostile files, on the emulator over loopback:
    its exit code, peak memory and the bytes the emulator served."""
    from wlock.hubserver.process import HubProcess
    from wlock.hubserver.store import StoreBuilder

    builder = StoreBuilder(root / "store")
    builder.commit("model", "bench/hostile", {n: p.read_bytes() for n, p in files.items()})
    project = root / "project"
    project.mkdir()
    (project / "weights.toml").write_text('[[model]]\nid = "bench/hostile"\n')
    with HubProcess(root / "store") as hub:
        hub.reset_stats()
        done = subprocess.run([sys.executable, "-c", _MEASURE, str(project), sys.executable,
                               "-m", "wlock", "lock", "--endpoint", hub.endpoint],
                              capture_output=True, text=True, check=True)
        served = sum(e["bytes"] for e in hub.stats()["log"])
    code, peak = done.stdout.split("\n", 1)[0].split()
    total = sum(p.stat().st_size for p in files.values())
    print(f"\nwlock lock of both ({total:,} bytes in the repo): exit {code}, peak RSS "
          f"{int(peak) / MIB:,.0f} MiB, {served:,} bytes served by the emulator")


if __name__ == "__main__":
    main()
