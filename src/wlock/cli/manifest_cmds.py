"""`wlock init`, `wlock add`, `wlock remove`: edit weights.toml, keeping its comments."""

from __future__ import annotations

from pathlib import Path

import click

from wlock.cli.options import Settings, common_options
from wlock.cli.output import emit
from wlock.models import RepoKind


@click.command()
@common_options
def init(settings: Settings) -> None:
    """Write a starter weights.toml in the project folder (default: here).

    \b
    Examples:
      wlock init
      wlock init --project path/to/project
    """
    from wlock.lock.manifest import init_manifest

    folder = (settings.project_flag or Path.cwd()).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    path = init_manifest(folder)
    if settings.json:
        emit({"manifest": str(path), "written": True})
    click.echo(f"Wrote {path}. Next: `wlock add ORG/NAME`, then `wlock lock`.", err=True)


@click.command()
@click.argument("spec", metavar="ID[@REF]")
@click.option("--dataset", is_flag=True, help="The repo is a dataset (default: a model).")
@click.option("--include", multiple=True, metavar="GLOB",
              help="Lock only files matching GLOB (repeatable).")
@click.option("--exclude", multiple=True, metavar="GLOB",
              help="Leave out files matching GLOB (repeatable).")
@common_options
def add(
    spec: str, dataset: bool, include: tuple[str, ...], exclude: tuple[str, ...],
    settings: Settings,
) -> None:
    """Add a model or dataset to weights.toml (or update its ref and globs).

    REF is a branch, a tag or a 40-hex commit; without it the entry follows `main`.

    \b
    Examples:
      wlock add sentence-transformers/all-MiniLM-L6-v2
      wlock add Qwen/Qwen2.5-0.5B@main --include '*.json' --include '*.safetensors'
      wlock add stanfordnlp/imdb@v1.0 --dataset --exclude '*.tar.gz'
    """
    from wlock.lock.manifest import MANIFEST_NAME, add_entry, parse_requirement

    repo_id, ref = parse_requirement(spec)
    kind: RepoKind = "dataset" if dataset else "model"
    path = settings.project() / MANIFEST_NAME
    new = add_entry(path, kind, repo_id, ref, include, exclude)
    verb = "Added" if new else "Updated"
    if settings.json:
        emit({"manifest": str(path), "kind": kind, "id": repo_id, "ref": ref, "added": new})
    click.echo(f"{verb} {kind} {repo_id} in {path}. Run `wlock lock` to pin it.", err=True)


@click.command()
@click.argument("repo_id", metavar="ID")
@click.option("--dataset", is_flag=True, help="The repo is a dataset (default: a model).")
@common_options
def remove(repo_id: str, dataset: bool, settings: Settings) -> None:
    """Remove a model or dataset from weights.toml.

    \b
    Examples:
      wlock remove acme/tiny-bert
      wlock remove stanfordnlp/imdb --dataset
    """
    from wlock.lock.manifest import MANIFEST_NAME, remove_entry

    kind: RepoKind = "dataset" if dataset else "model"
    path = settings.project() / MANIFEST_NAME
    remove_entry(path, kind, repo_id)
    if settings.json:
        emit({"manifest": str(path), "kind": kind, "id": repo_id, "removed": True})
    click.echo(f"Removed {kind} {repo_id} from {path}. Run `wlock lock` to update the lock.",
               err=True)
