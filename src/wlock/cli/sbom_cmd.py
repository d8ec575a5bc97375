"""`wlock sbom`: a CycloneDX 1.6 bill of materials for the lock."""

from __future__ import annotations

from pathlib import Path

import click

from wlock.cli.options import Settings, common_options, lock_option
from wlock.cli.output import info
from wlock.models import LockedFile, LockedRepo


@click.command()
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path),
              metavar="FILE", help="Write it here (default: stdout).")
@lock_option
@common_options
def sbom(output: Path | None, settings: Settings) -> None:
    """Write a CycloneDX 1.6 bill of materials for the lock: a machine-learning-model (or
    data) component per repo with its purl (pkg:huggingface/org/name@commit), each licence
    its card lists, and every file's hash (a regular file's content hashes when its bytes
    are in the cache; its git blob id always); base models as provenance; required models as
    dependencies. Offline.

    \b
    Examples:
      wlock sbom -o weights.cdx.json
    """
    from wlock.atomic import write_text_atomic
    from wlock.cache.layout import RepoPaths
    from wlock.lock.lockfile import read_lock
    from wlock.lock.sbom import render_bom

    lock_path = settings.lock_path()
    cache = settings.cache_dir

    def blob_of(repo: LockedRepo, f: LockedFile) -> Path | None:
        blob = RepoPaths.of(cache, repo).blob(f.etag)
        return blob if blob.is_file() else None

    text = render_bom(read_lock(lock_path), lock_path.parent.name, blob_of) + "\n"
    if output is None:
        click.echo(text, nl=False)
        return
    write_text_atomic(output, text)
    info(f"Wrote {output}: CycloneDX 1.6, {len(read_lock(lock_path).repos)} components.")
