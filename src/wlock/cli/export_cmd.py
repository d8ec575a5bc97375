"""`wlock export`: one locked repo as plain files in a folder, from the cache."""

from __future__ import annotations

from pathlib import Path

import click

from wlock.cli.completion_cmd import locked_ids
from wlock.cli.options import Settings, common_options, lock_option
from wlock.cli.output import emit, info, warn
from wlock.units import count, human_size


@click.command()
@click.argument("repo_id", metavar="ID", shell_complete=locked_ids)
@click.argument("dest", type=click.Path(path_type=Path))
@click.option("--dataset", is_flag=True, help="ID is a dataset (when both are locked).")
@click.option("--copy", is_flag=True,
              help="Independent copies, never hard links to the cache's blobs (for a folder "
              "that something will modify in place).")
@click.option("--delete", is_flag=True, help="Remove files in DEST that the lock does not name.")
@click.option("--verify", is_flag=True,
              help="Also hash the files already in DEST (default: size and time, as rsync).")
@click.option("--jobs", "-j", type=click.IntRange(1, 64), default=4, show_default=True,
              help="Files written at once.")
@lock_option
@common_options
def export(repo_id: str, dest: Path, dataset: bool, copy: bool, delete: bool, verify: bool,
           jobs: int, settings: Settings) -> None:
    """Materialize one locked repo as plain files (no symlinks) in DEST, from the cache.

    Hard links where DEST is on the cache's filesystem, reflinks where the filesystem shares
    blocks, else a kernel-side copy; each file hashed against the lock before it appears.
    Makes no network request: run `wlock sync` first (it restores from an archive without
    the Hub). A second export changes nothing. Files in DEST the lock does not name are
    reported and left alone unless --delete.

    \b
    Examples:
      wlock export sentence-transformers/all-MiniLM-L6-v2 /dev/shm/minilm
      wlock export acme/gsm-mini /dev/shm/gsm --dataset --delete
      vllm serve /dev/shm/minilm       # any loader that takes a folder
    """
    from wlock.api import locked
    from wlock.cache.export import export_repo
    from wlock.cli.progress import make_progress

    lock_path = settings.lock_path()
    repo = locked(repo_id, kind="dataset" if dataset else None, lock=lock_path)
    progress = make_progress("Exporting", repo.size, quiet=settings.json)
    try:
        result = export_repo(repo, settings.cache_dir, dest, copy=copy, delete=delete,
                             verify=verify, jobs=jobs, on_bytes=progress.advance)
    finally:
        progress.close()
    if settings.json:
        emit({
            "kind": repo.kind, "id": repo.id, "revision": repo.revision, "dest": result.dest,
            "written_files": result.written, "written_bytes": result.written_bytes,
            "unchanged_files": result.unchanged, "how": result.how, "extra": result.extra,
            "deleted": result.deleted,
        })
        return
    hows = ", ".join(f"{n} by {how}" for how, n in sorted(result.how.items()))
    info(f"Exported {repo.kind} {repo.id}@{repo.revision[:7]} to {dest}: "
         f"{count(result.written, 'file')} written ({human_size(result.written_bytes)}"
         + (f"; {hows}" if hows else "") + f"), {result.unchanged} unchanged.")
    if result.deleted:
        info(f"Deleted {count(len(result.deleted), 'file')} the lock does not name.")
    elif result.extra:
        shown = ", ".join(result.extra[:5]) + (
            f" and {len(result.extra) - 5} more" if len(result.extra) > 5 else "")
        warn(f"{count(len(result.extra), 'file')} in {dest} not in the lock "
             f"left alone ({shown}); --delete removes them.", label="note")
