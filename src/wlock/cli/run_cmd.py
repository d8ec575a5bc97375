"""`wlock run -- CMD...`: run a command offline against the locked cache."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from wlock.cli.options import Settings, common_options, lock_option

if TYPE_CHECKING:
    from wlock.models import Lock


@click.command(context_settings={"ignore_unknown_options": True,
                                 "allow_interspersed_args": False})
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED, metavar="-- CMD...")
@click.option("--record", "record_log", type=click.Path(dir_okay=False, path_type=Path),
              metavar="FILE", help="Append what this run uses to FILE (JSON lines, as `wlock "
              "record`) before CMD starts, and CMD's exit status after.")
@lock_option
@common_options
def run(command: tuple[str, ...], record_log: Path | None, settings: Settings) -> None:
    """Run CMD with every Hub model load served from the locked cache, offline.

    Served by repo id: what goes through huggingface_hub's cache (from_pretrained,
    hf_hub_download, snapshot_download, SentenceTransformer, DiffusionPipeline, peft). A
    dataset is served by its locked folder, `load_dataset(str(wlock.snapshot_path(ID)),
    CONFIG, split=...)`, which `wlock lint` points at: datasets' `load_dataset(ID)` asks the
    Hub before any cache and does not load by id offline.

    First checks (sizes and links only, no hashing) that every locked file is in the cache,
    and says which `wlock sync` is needed if not. Then runs CMD with HF_HUB_OFFLINE=1 (and
    TRANSFORMERS_OFFLINE, HF_DATASETS_OFFLINE), WLOCK_LOCK set to the lock (so
    `wlock.revision()` finds it), and HF_HUB_CACHE set to this project's view of the cache
    (`.wlock/` beside the lock): its own refs, so a bare-name load gets this lock's commit
    even when another project moved the shared `refs/main`, and only the locked repos, so a
    load of anything else fails loudly instead of fetching whatever the Hub has today.
    Exits with CMD's own status.

    \b
    Examples:
      wlock run -- python train.py --epochs 3
      wlock run --record runs/weights.jsonl -- python eval.py
      wlock run -- pytest tests/
    """
    from wlock.cache.sync import plan_sync
    from wlock.errors import CheckFailedError, LocalError, UsageError
    from wlock.lock.lockfile import read_lock
    from wlock.units import human_size

    lock_path = settings.lock_path()
    lock = read_lock(lock_path)
    plan = plan_sync(lock, settings.cache_dir)
    missing = [r for r in plan.repos if not r.files_ready]
    if missing:
        detail = "; ".join(f"{r.repo.id}: {len(r.downloads) + len(r.link)} file(s)"
                           for r in missing)
        raise CheckFailedError(
            f"the cache at {settings.cache_dir} does not hold the locked set ({detail}; "
            f"{human_size(plan.bytes_to_fetch)} to fetch)",
            hint=f"Run `wlock sync{_cache_flag(settings)}` first.",
        )
    from wlock.cache.view import build_view, view_location

    view = view_location(lock_path, settings.cache_dir)
    try:
        build_view(lock, settings.cache_dir, view)
    except OSError as e:
        raise LocalError(f"cannot write the project's view of the cache at {view}: "
                         f"{e.strerror or e}",
                         hint="Check that the project folder (or the temp folder) is "
                         "writable.") from e
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        # This project's view: its own refs, only its locked repos (wlock.cache.view).
        "HF_HUB_CACHE": str(view),
        "WLOCK_LOCK": str(lock_path),
    }
    sys.stdout.flush()
    sys.stderr.flush()
    if record_log is not None:
        raise SystemExit(_run_recorded(command, env, lock, lock_path, settings, record_log))
    try:
        os.execvpe(command[0], list(command), env)  # noqa: S606 - running CMD is the point
    except FileNotFoundError:
        raise UsageError(f"command not found: {command[0]}",
                         hint="Check the command after `--`.") from None
    except PermissionError:
        raise UsageError(f"not executable: {command[0]}") from None


def _cache_flag(settings: Settings) -> str:
    from wlock.cache.layout import default_cache_dir

    return "" if settings.cache_dir == default_cache_dir() else f" --cache-dir {settings.cache_dir}"


def _run_recorded(command: tuple[str, ...], env: dict[str, str], lock: Lock, lock_path: Path,
                  settings: Settings, log: Path) -> int:
    """CMD as a child: the record is written before it starts, its exit status after."""
    import signal
    import subprocess
    import time

    from wlock.errors import UsageError
    from wlock.lock.record import append_records, exit_record

    records = record_lines(lock, lock_path, settings)
    append_records(log, records)
    started = time.monotonic()
    # Ctrl-C reaches CMD (the terminal sends it to the whole group); we wait for its end.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        code = subprocess.call(list(command), env=env,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    except FileNotFoundError:
        code = 127
        append_records(log, [exit_record(records[0]["run_id"] if records else "", code,
                                         started)])
        raise UsageError(f"command not found: {command[0]}",
                         hint="Check the command after `--`.") from None
    finally:
        signal.signal(signal.SIGINT, previous)
    if code < 0:
        code = 128 - code  # killed by a signal: the shell's convention
    append_records(log, [exit_record(records[0]["run_id"] if records else "", code, started)])
    return code


def record_lines(lock: Lock, lock_path: Path, settings: Settings) -> list[dict[str, Any]]:
    from wlock.cache.layout import RepoPaths
    from wlock.lock.record import make_record

    return make_record(lock, lock_path, settings.cache_dir,
                       lambda repo: RepoPaths.of(settings.cache_dir, repo).snapshot(
                           repo.revision))
