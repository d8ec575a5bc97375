"""Checkpoint retention on runs laid out exactly as the transformers Trainer lays them out
(checkpoint-N/ folders, trainer_state.json with best_model_checkpoint and log_history), as
Lightning names its files, and as our own metrics file describes; archived to a folder and to
a real S3 server killed mid-way."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import default_signals, run_wlock
from tests.seaweed import s3_server
from wlock.units import human_size

OLD = time.time() - 3600  # written an hour ago: settled


def trainer_run(root: Path, evals: dict[int, float] | None, *, metric: str = "eval_loss",
                best: int | None = None, size: int = 3000) -> Path:
    """checkpoint-N folders as Trainer.save_model writes them, and the final one's
    trainer_state.json holding the whole log history."""
    root.mkdir(parents=True)
    steps = [100, 200, 300, 400]
    history: list[dict] = []
    for step in steps:
        history.append({"step": step, "loss": 1.0 / step, "epoch": step / 100})
        if evals is not None:
            history.append({"step": step, metric: evals[step], "epoch": step / 100})
        folder = root / f"checkpoint-{step}"
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(os.urandom(size))
        (folder / "optimizer.pt").write_bytes(os.urandom(size * 2))
        (folder / "config.json").write_text(json.dumps({"step": step}))
        state = {"global_step": step, "log_history": list(history),
                 "best_model_checkpoint": (str(root / f"checkpoint-{best}")
                                           if best and best <= step else None),
                 "best_metric": evals[best] if best and evals and best <= step else None}
        (folder / "trainer_state.json").write_text(json.dumps(state))
        for p in [folder, *folder.iterdir()]:
            os.utime(p, (OLD, OLD))
    return root


def digests(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def keep(run: Path, *args: str, env: dict[str, str] | None = None) -> dict:
    done = run_wlock("checkpoints", "keep", str(run), "--json", *args, env=env)
    assert done.code == 0, done.stderr
    return json.loads(done.stdout)


def test_min_metric_keeps_best_and_final_archives_and_restores(tmp_path: Path) -> None:
    run = trainer_run(tmp_path / "run", {100: 0.9, 200: 0.4, 300: 0.5, 400: 0.6}, best=200)
    archive = tmp_path / "nas"
    before = {c: digests(run / c) for c in ("checkpoint-200", "checkpoint-400")}
    sizes = sum(p.stat().st_size for c in ("checkpoint-100", "checkpoint-300")
                for p in (run / c).rglob("*") if p.is_file())

    plan = keep(run, "--archive", str(archive), "--dry-run")
    assert (plan["best"], plan["final"]) == ("checkpoint-200", "checkpoint-400")
    assert plan["delete"] == ["checkpoint-100", "checkpoint-300"]
    assert plan["bytes_freed"] == sizes and "best_model_checkpoint" in plan["why_best"]
    assert {p.name for p in run.iterdir()} == {f"checkpoint-{s}" for s in (100, 200, 300, 400)}

    done = keep(run, "--archive", str(archive))
    assert done["deleted"] == ["checkpoint-100", "checkpoint-300"]
    assert {p.name for p in run.iterdir()} == {"checkpoint-200", "checkpoint-400"}
    for name, kept_as in (("checkpoint-200", "best"), ("checkpoint-400", "final")):
        manifest = json.loads((archive / "checkpoints" / "run" / f"{name}.json").read_text())
        assert manifest["kept_as"] == kept_as and manifest["metric"] == "eval_loss"
        assert {f["path"]: f["sha256"] for f in manifest["files"]} == before[name]
        for f in manifest["files"]:  # content-addressed, the bytes verified
            blob = archive / "blobs" / f["sha256"]
            assert hashlib.sha256(blob.read_bytes()).hexdigest() == f["sha256"]

    import shutil

    shutil.rmtree(run / "checkpoint-200")
    restored = run_wlock("checkpoints", "restore", str(run), "checkpoint-200", "--archive",
                         str(archive))
    assert restored.code == 0, restored.stderr
    assert digests(run / "checkpoint-200") == before["checkpoint-200"]


def test_max_metric_chosen_by_flag(tmp_path: Path) -> None:
    run = trainer_run(tmp_path / "run", {100: 0.5, 200: 0.7, 300: 0.9, 400: 0.8},
                      metric="eval_accuracy")
    plan = keep(run, "--metric", "eval_accuracy", "--mode", "max", "--dry-run")
    assert (plan["best"], plan["final"]) == ("checkpoint-300", "checkpoint-400")
    assert plan["delete"] == ["checkpoint-100", "checkpoint-200"]
    plan = keep(run, "--metric", "eval_accuracy", "--mode", "min", "--dry-run")
    assert plan["best"] == "checkpoint-100"


def test_a_run_without_eval_keeps_the_final_only_and_says_so(tmp_path: Path) -> None:
    run = trainer_run(tmp_path / "run", None)
    done = keep(run, "--archive", str(tmp_path / "nas"))
    assert done["best"] is None and done["final"] == "checkpoint-400"
    assert "only the final one is kept" in done["why_best"]
    assert {p.name for p in run.iterdir()} == {"checkpoint-400"}


def test_a_checkpoint_being_written_is_never_touched(tmp_path: Path) -> None:
    run = trainer_run(tmp_path / "run", {100: 0.9, 200: 0.4, 300: 0.5, 400: 0.6}, best=200)
    (run / "checkpoint-400" / "optimizer.pt").write_bytes(b"still writing")  # now
    done = keep(run, "--archive", str(tmp_path / "nas"))
    assert done["in_progress"] == ["checkpoint-400"]
    assert done["final"] == "checkpoint-300"  # the last one settled
    assert (run / "checkpoint-400").is_dir() and done["deleted"] == ["checkpoint-100"]

    # A live training process (a file open in the run): nothing deleted at all.
    run2 = trainer_run(tmp_path / "run2", {100: 0.9, 200: 0.4, 300: 0.5, 400: 0.6})
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; f = open(sys.argv[1], 'ab'); "
         "print('open', flush=True); time.sleep(60)", str(run2 / "train.log")],
        stdout=subprocess.PIPE, text=True, preexec_fn=default_signals)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
        refused = run_wlock("checkpoints", "keep", str(run2), "--archive",
                            str(tmp_path / "nas"))
        assert refused.code == 2 and str(holder.pid) in refused.stderr
        assert len([p for p in run2.iterdir() if p.name.startswith("checkpoint-")]) == 4
    finally:
        holder.kill()
        holder.wait()


def test_lightning_names_and_our_metrics_file(tmp_path: Path) -> None:
    run = tmp_path / "lightning"
    ckpts = run / "lightning_logs" / "version_0" / "checkpoints"
    ckpts.mkdir(parents=True)
    for epoch, loss in ((0, 0.8), (1, 0.3), (2, 0.5)):
        path = ckpts / f"epoch={epoch}-step={(epoch + 1) * 50}-val_loss={loss:.2f}.ckpt"
        path.write_bytes(os.urandom(500))
        os.utime(path, (OLD, OLD))
    plan = keep(run, "--metric", "val_loss", "--dry-run")
    assert plan["best"].endswith("epoch=1-step=100-val_loss=0.30.ckpt")
    assert plan["final"].endswith("epoch=2-step=150-val_loss=0.50.ckpt")
    assert len(plan["delete"]) == 1 and "epoch=0" in plan["delete"][0]

    other = tmp_path / "custom"
    (other / "ckpt").mkdir(parents=True)
    lines = []
    for step, score in ((10, 0.1), (20, 0.7), (30, 0.2)):
        (other / "ckpt" / f"s{step}.bin").write_bytes(os.urandom(100))
        os.utime(other / "ckpt" / f"s{step}.bin", (OLD, OLD))
        lines.append(json.dumps({"path": f"ckpt/s{step}.bin", "step": step,
                                 "metrics": {"bleu": score}}))
    (other / "wlock-checkpoints.jsonl").write_text("\n".join(lines) + "\n")
    plan = keep(other, "--metric", "bleu", "--mode", "max", "--dry-run")
    assert (plan["best"], plan["final"]) == ("ckpt/s20.bin", "ckpt/s30.bin")


def test_archive_server_stopped_mid_way_deletes_nothing(tmp_path: Path) -> None:
    run = trainer_run(tmp_path / "run", {100: 0.9, 200: 0.4, 300: 0.5, 400: 0.6}, best=200,
                      size=12 * 1024 * 1024)
    with s3_server(tmp_path / "seaweed") as server:
        server.make_bucket("ckpt")
        proc = subprocess.Popen(
            [sys.executable, "-m", "wlock", "checkpoints", "keep", str(run), "--archive",
             "s3://ckpt/runs"], env={**os.environ, **server.env()}, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, preexec_fn=default_signals)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if server.requests().get("PUT", 0) >= 1:
                break
            time.sleep(0.02)
        assert proc.poll() is None, proc.communicate()
        server.stop()
        _, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 5, stderr
        assert "s3://ckpt/runs" in stderr
        assert len([p for p in run.iterdir() if p.name.startswith("checkpoint-")]) == 4
        server.start()  # back: the next keep completes
        done = keep(run, "--archive", "s3://ckpt/runs", env=server.env())
        assert done["deleted"] == ["checkpoint-100", "checkpoint-300"]


def disk_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def test_reported_bytes_are_the_bytes_that_left_the_disk(tmp_path: Path) -> None:
    """Issue 28: `--settle 0` deleted three checkpoints of 0.5 MB and reported `0 B` (each
    size was read after its deletion). The dry run and the real run report the same figures,
    and they equal what left the disk."""
    run = trainer_run(tmp_path / "run", {100: 0.9, 200: 0.4, 300: 0.5, 400: 0.6}, best=200,
                      size=170_000)
    for p in run.rglob("*"):  # written now: only --settle 0 lets them go
        os.utime(p)
    two = ["checkpoint-100", "checkpoint-300"]
    each = {c: disk_bytes(run / c) for c in two}
    planned = keep(run, "--settle", "0", "--no-archive", "--dry-run")
    before = disk_bytes(run)
    done = run_wlock("checkpoints", "keep", str(run), "--settle", "0", "--no-archive")
    assert done.code == 0, done.stderr
    gone = before - disk_bytes(run)
    assert gone == sum(each.values()) > 1_000_000
    assert planned["bytes_freed"] == gone and planned["delete"] == two
    assert [line for line in done.stdout.splitlines() if "deleted" in line] == [
        f"  deleted {c} ({human_size(each[c])})" for c in two]
    assert f"Freed {human_size(gone)} (2 checkpoints)." in done.stderr, done.stderr
    # The same through --json, on a run like it.
    again = trainer_run(tmp_path / "again", {100: 0.9, 200: 0.4, 300: 0.5, 400: 0.6},
                        best=200, size=170_000)
    before = disk_bytes(again)
    data = keep(again, "--settle", "0", "--no-archive")
    assert data["bytes_freed"] == before - disk_bytes(again) > 1_000_000
    assert sum(data["deleted_bytes"].values()) == data["bytes_freed"]


def test_a_fresh_run_names_best_and_final_and_says_why_nothing_was_deleted(
        tmp_path: Path) -> None:
    """Issue 28: on a run that had just finished, keep said `best: -` and blamed the metric
    ("no checkpoint has 'eval_loss'"), although every trainer_state.json records it."""
    run = trainer_run(tmp_path / "run", {100: 0.9, 200: 0.4, 300: 0.5, 400: 0.6}, best=200)
    for p in run.rglob("*"):
        os.utime(p)  # written just now
    before = digests(run)
    done = run_wlock("checkpoints", "keep", str(run), "--archive", str(tmp_path / "nas"))
    assert done.code == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("best:  checkpoint-200  (trainer_state.json's "
                               "best_model_checkpoint (best_metric 0.4))"), lines
    assert lines[1] == "final: checkpoint-400"
    assert "no evaluation" not in done.stdout + done.stderr
    assert "nothing is archived or deleted yet: the best checkpoint-200, final checkpoint-400 " \
        "changed within --settle 10 min" in done.stderr, done.stderr
    assert "Freed 0 B (0 checkpoints)." in done.stderr
    assert digests(run) == before and not (tmp_path / "nas").exists()
    data = keep(run, "--archive", str(tmp_path / "nas"))
    assert (data["best"], data["final"], data["deleted"]) == (
        "checkpoint-200", "checkpoint-400", [])
    assert "--settle 10 min" in data["waiting"]
