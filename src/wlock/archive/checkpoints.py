"""Checkpoint retention: keep the best-by-eval and the final checkpoint of a run, archived and
verified, and only then free the working tier of the others.

A run's checkpoints are read from:
- the transformers Trainer's layout: `checkpoint-<step>/` folders, each with a
  `trainer_state.json` (`best_model_checkpoint`, `best_metric`, `log_history`);
- PyTorch Lightning's `ModelCheckpoint` files, `*.ckpt` anywhere under the run, whose names
  carry `key=value` parts (`epoch=3-step=400-val_loss=0.25.ckpt`, its `filename` template);
- for any other trainer, a file of ours, `wlock-checkpoints.jsonl` in the run folder: one JSON
  object per checkpoint, `{"path": "ckpt/step-400", "step": 400, "metrics": {"eval_loss":
  0.25}}` (path relative to the run folder, a file or a folder).

In the archive, each checkpoint file is a blob named by its sha256 (`blobs/<sha256>`, shared
with the locked weights' blobs), and each kept checkpoint gets a manifest,
`checkpoints/<run>/<checkpoint>.json`: its files, sizes and hashes, why it was kept, and the
metric that chose it. A checkpoint changed in the last minutes, or under a run whose process
still has files open, is never touched.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from wlock.archive.store import Archive
from wlock.errors import CheckFailedError, InvalidFileError, LocalError, UsageError
from wlock.hashing import hash_file

METRICS_FILE = "wlock-checkpoints.jsonl"
SETTLE_SECONDS = 600.0  # a checkpoint written to in the last 10 minutes may be in progress
_TRAINER = re.compile(r"checkpoint-(\d+)")


@dataclass
class Checkpoint:
    name: str  # relative to the run folder
    path: Path
    step: int
    metrics: dict[str, float] = field(default_factory=dict)
    changed: float = 0.0  # newest mtime of anything in it
    # Its bytes on disk, measured when the run was read: what a report of the plan says
    # (measured again just before a deletion, for what the deletion freed).
    size: int = 0

    def files(self) -> list[tuple[str, Path]]:
        if self.path.is_file():
            return [(self.path.name, self.path)]
        return sorted((str(p.relative_to(self.path)), p) for p in self.path.rglob("*")
                      if p.is_file() and not p.is_symlink())

    def measure(self) -> int:
        """Its bytes on disk now (0 once gone)."""
        total = 0
        for _, path in self.files():
            with contextlib.suppress(FileNotFoundError):
                total += path.stat().st_size
        return total


@dataclass
class RetentionPlan:
    run: Path
    checkpoints: list[Checkpoint]
    best: Checkpoint | None
    final: Checkpoint | None
    metric: str | None
    mode: str | None
    why_best: str
    delete: list[Checkpoint] = field(default_factory=list)
    in_progress: list[Checkpoint] = field(default_factory=list)  # changed within `settle`
    alive: list[int] = field(default_factory=list)  # pids with files open in the run
    settle: float = SETTLE_SECONDS
    # Kept checkpoints (best, final) still too fresh to archive: nothing is deleted until
    # they settle, so a half-written final never stands alone.
    waiting: list[Checkpoint] = field(default_factory=list)

    @property
    def keep(self) -> list[Checkpoint]:
        kept = [c for c in (self.best, self.final) if c is not None]
        return [c for n, c in enumerate(kept) if c not in kept[:n]]

    @property
    def bytes_to_free(self) -> int:
        """What deleting the plan's checkpoints frees, as measured when the run was read."""
        return sum(c.size for c in self.delete)


def _newest_change(path: Path) -> float:
    newest = path.lstat().st_mtime
    if path.is_dir():
        for p in path.rglob("*"):
            with contextlib.suppress(OSError):
                newest = max(newest, p.lstat().st_mtime)
    return newest


def discover(run: Path) -> list[Checkpoint]:
    """The run's checkpoints, oldest step first, with the metrics recorded for each."""
    if not run.is_dir():
        raise UsageError(f"{run} is not a folder", hint="Give the run's output folder.")
    found: dict[str, Checkpoint] = {}
    metrics_file = run / METRICS_FILE
    if metrics_file.is_file():
        for number, line in enumerate(metrics_file.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
                name = str(entry["path"])
                found[name] = Checkpoint(name, run / name, int(entry.get("step", 0)),
                                         {k: float(v) for k, v in
                                          dict(entry.get("metrics", {})).items()})
            except (ValueError, KeyError, TypeError) as e:
                raise InvalidFileError(str(metrics_file), f"not a checkpoint entry ({e})",
                                       line=number,
                                       hint='Each line: {"path": ..., "step": N, "metrics": '
                                       '{"eval_loss": 0.3}}') from e
    for child in run.iterdir():
        m = _TRAINER.fullmatch(child.name)
        if m and child.is_dir() and child.name not in found:
            found[child.name] = Checkpoint(child.name, child, int(m.group(1)))
    for ckpt in run.rglob("*.ckpt"):
        name = str(ckpt.relative_to(run))
        if name in found:
            continue
        parts = dict(re.findall(r"([A-Za-z_][\w./]*)=(-?[\d.]+(?:[eE]-?\d+)?)",
                                ckpt.name.removesuffix(".ckpt")))
        values = {}
        for key, value in parts.items():
            with contextlib.suppress(ValueError):
                values[key] = float(value.rstrip("."))
        step = int(values.pop("step", values.get("epoch", 0)))
        found[name] = Checkpoint(name, ckpt, step, values)
    checkpoints = [c for c in found.values() if c.path.exists()]
    for c in checkpoints:
        c.changed = _newest_change(c.path)
        c.size = c.measure()
    _trainer_metrics(run, checkpoints)
    return sorted(checkpoints, key=lambda c: (c.step, c.name))


def _trainer_metrics(run: Path, checkpoints: list[Checkpoint]) -> None:
    """Give each Trainer checkpoint the eval metrics logged at its step."""
    trainer = [c for c in checkpoints if _TRAINER.fullmatch(c.name)]
    if not trainer:
        return
    state = _trainer_state(max(trainer, key=lambda c: c.step))
    by_step: dict[int, dict[str, float]] = {}
    for entry in state.get("log_history", []):
        if isinstance(entry, dict) and "step" in entry:
            for key, value in entry.items():
                if key.startswith("eval_") and isinstance(value, int | float):
                    by_step.setdefault(int(entry["step"]), {})[key] = float(value)
    for c in trainer:
        c.metrics.update(by_step.get(c.step, {}))


def _trainer_state(checkpoint: Checkpoint) -> dict[str, Any]:
    path = checkpoint.path / "trainer_state.json"
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise InvalidFileError(str(path), f"cannot be read as JSON ({e})") from e
    return state if isinstance(state, dict) else {}


def open_pids(run: Path) -> list[int]:
    """Processes (other than us) with a file open or their working folder in the run: the
    training is alive. Only processes we may inspect are seen (all of them as root)."""
    prefix = os.path.realpath(run) + "/"
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            links = [os.readlink(f"/proc/{entry}/cwd")]
            links += [os.readlink(f"/proc/{entry}/fd/{fd}")
                      for fd in os.listdir(f"/proc/{entry}/fd")]
        except OSError:
            continue
        if any((link + "/").startswith(prefix) for link in links):
            pids.append(int(entry))
    return pids


def plan_retention(run: Path, *, metric: str | None = None, mode: str | None = None,
                   settle: float = SETTLE_SECONDS, now: float | None = None) -> RetentionPlan:
    """Which checkpoints to keep (best by `metric`, and final) and which to delete."""
    now = time.time() if now is None else now
    checkpoints = discover(run)
    settled = [c for c in checkpoints if now - c.changed >= settle]
    in_progress = [c for c in checkpoints if c not in settled]
    # Best is named from the evaluation data of every checkpoint, fresh ones too: what is
    # known does not wait. Final is the last settled one (a newer one may still be being
    # written), else the last one. A kept checkpoint that has not settled holds back every
    # deletion (plan.waiting), and the report says so, naming --settle.
    final = settled[-1] if settled else (checkpoints[-1] if checkpoints else None)
    best, why = None, ""
    if metric is None:
        trainer = [c for c in checkpoints if _TRAINER.fullmatch(c.name)]
        state = _trainer_state(max(trainer, key=lambda c: c.step)) if trainer else {}
        chosen = state.get("best_model_checkpoint")
        if isinstance(chosen, str):
            named = next((c for c in checkpoints if c.name == Path(chosen).name), None)
            if named is not None:
                best = named
                why = (f"trainer_state.json's best_model_checkpoint (best_metric "
                       f"{state.get('best_metric')})")
                # Which logged metric that was: the one with best_metric's value there.
                metric = next((k for k, v in named.metrics.items()
                               if v == state.get("best_metric")), None)
        if best is None:
            candidates = {k for c in checkpoints for k in c.metrics}
            metric = "eval_loss" if "eval_loss" in candidates else (
                sorted(candidates)[0] if len(candidates) == 1 else None)
    if best is None and metric is not None:
        mode = mode or ("min" if "loss" in metric or "error" in metric else "max")
        scored = [c for c in checkpoints if metric in c.metrics]
        if scored:
            pick = min if mode == "min" else max
            best = pick(scored, key=lambda c: (c.metrics[metric], -c.step if mode == "min"
                                               else c.step))
            why = f"{metric} = {best.metrics[metric]} ({mode} of {len(scored)} evaluated)"
    if best is None:
        why = ("no evaluation recorded for any checkpoint: only the final one is kept"
               + (f" (no checkpoint has {metric!r})" if metric else ""))
    plan = RetentionPlan(run=run, checkpoints=checkpoints, best=best, final=final,
                         metric=metric, mode=mode, why_best=why, in_progress=in_progress,
                         settle=settle)
    plan.waiting = [c for c in plan.keep if c in in_progress]
    plan.delete = [] if plan.waiting else [c for c in settled if c not in plan.keep]
    return plan


def _manifest_name(run_name: str, checkpoint: Checkpoint) -> str:
    return f"checkpoints/{run_name}/{checkpoint.name.replace('/', '--')}.json"


def archive_checkpoint(archive: Archive, run_name: str, checkpoint: Checkpoint, reason: str,
                       plan: RetentionPlan, there: dict[str, int]) -> dict[str, Any]:
    """Upload a checkpoint's files as blobs (verified on the way in) unless `there` (the
    archive's listing, kept up to date here) has them, then its manifest; returns the
    manifest."""
    files = []
    for rel, path in checkpoint.files():
        size = path.stat().st_size
        digest = hash_file(path, "sha256")
        if there.get(digest) != size:
            archive.put_blob(digest, path, "sha256", size)
            there[digest] = size
        files.append({"path": rel, "size": size, "sha256": digest})
    manifest = {
        "schema": 1, "run": run_name, "checkpoint": checkpoint.name, "step": checkpoint.step,
        "kept_as": reason, "metric": plan.metric, "mode": plan.mode,
        "value": checkpoint.metrics.get(plan.metric) if plan.metric else None,
        "why": plan.why_best if reason.startswith("best") else "the last checkpoint",
        "file": checkpoint.path.is_file(), "files": files,
        "archived": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    archive.put_text(_manifest_name(run_name, checkpoint), json.dumps(manifest, indent=1) + "\n")
    return manifest


def verify_archived(archive: Archive, manifests: list[dict[str, Any]]) -> None:
    """Every file of every kept checkpoint is in the archive with its size (the bytes were
    hashed on the way in); raises CheckFailedError otherwise."""
    there = archive.listing("blobs")
    absent = [f"{m['checkpoint']}/{f['path']}" for m in manifests for f in m["files"]
              if there.get(f["sha256"]) != f["size"]]
    if absent:
        raise CheckFailedError(f"{len(absent)} files of the kept checkpoints are not in the "
                               f"archive at {archive.url}: {', '.join(absent[:5])}",
                               hint="Nothing was deleted. Run `wlock checkpoints keep` again.")


def delete_checkpoints(plan: RetentionPlan) -> list[tuple[str, int]]:
    """Delete the plan's checkpoints; each one's name and the bytes it held, measured just
    before it was deleted (what left the disk, not what the plan guessed)."""
    deleted = []
    for c in plan.delete:
        size = c.measure()
        try:
            if c.path.is_dir():
                shutil.rmtree(c.path)
            else:
                c.path.unlink()
        except OSError as e:
            raise LocalError(f"cannot delete {c.path}: {e.strerror or e}",
                             hint="Check the run folder's permissions.") from e
        deleted.append((c.name, size))
    return deleted


def restore_checkpoint(archive: Archive, run: Path, run_name: str, name: str) -> int:
    """Bring a kept checkpoint back into the run folder, every file verified; returns bytes."""
    text = archive.get_text(f"checkpoints/{run_name}/{name.replace('/', '--')}.json")
    if text is None:
        kept = sorted(n.removesuffix(".json") for n in archive.listing(f"checkpoints/{run_name}"))
        raise UsageError(f"the archive at {archive.url} holds no checkpoint {name!r} of run "
                         f"{run_name!r}",
                         hint=f"Kept checkpoints of that run: {', '.join(kept) or '(none)'}.")
    manifest = json.loads(text)
    target = run / manifest["checkpoint"]
    total = 0
    for f in manifest["files"]:
        dest = target if manifest.get("file") else target / f["path"]
        dest.parent.mkdir(parents=True, exist_ok=True)
        temp = dest.with_name(f".{dest.name}.wlock-restore")
        try:
            archive.get_blob(f["sha256"], temp, "sha256", f["size"])
            actual = hash_file(temp, "sha256")
            if actual != f["sha256"] or temp.stat().st_size != f["size"]:
                raise CheckFailedError(
                    f"{archive.url}: {manifest['checkpoint']}/{f['path']}: wrong bytes in the "
                    f"archive (expected sha256 {f['sha256']}, got {actual})",
                    hint="The archive copy is damaged; nothing was written under its name.")
            os.replace(temp, dest)
        finally:
            with contextlib.suppress(FileNotFoundError):
                temp.unlink()
        total += f["size"]
    return total
