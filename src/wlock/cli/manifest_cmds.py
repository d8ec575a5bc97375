"""`wlock init`, `wlock add`, `wlock remove`: edit weights.toml, keeping its comments."""

from __future__ import annotations

from pathlib import Path

import click

from wlock.cli.completion_cmd import locked_ids
from wlock.cli.options import Settings, common_options, offline_option
from wlock.cli.output import emit, info
from wlock.errors import WlockError
from wlock.lock.loaders import LOADERS
from wlock.models import LockResult, RepoKind


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
    info(f"Wrote {path}. Next: `wlock add ORG/NAME`, then `wlock lock`.")


@click.command()
@click.argument("spec", metavar="ID[@REF]")
@click.option("--dataset", is_flag=True, help="The repo is a dataset (default: a model).")
@click.option("--include", multiple=True, metavar="GLOB",
              help="Lock only files matching GLOB (repeatable).")
@click.option("--exclude", multiple=True, metavar="GLOB",
              help="Leave out files matching GLOB (repeatable).")
@click.option("--loader", type=click.Choice(LOADERS), metavar="NAME",
              help="The library that loads it, whose rule picks the files to lock: "
              f"{', '.join(LOADERS)} (default: from the Hub's library_name, else the files).")
@click.option("--variant", metavar="NAME",
              help="A weights variant (diffusers/transformers: fp16) or a GGUF quant (Q4_K_M).")
@click.option("--base", metavar="ORG/NAME[@REF]",
              help="An adapter's base model, where its adapter_config.json names a local "
              "folder (written as `base` on the entry; needs the peft loader).")
@click.option("--config", "config", metavar="NAME",
              help="A dataset's config, as load_dataset(ID, NAME) names it: only its data "
              "files are locked (the datasets loader).")
@click.option("--split", metavar="SPLIT",
              help="Only this split of the config (train, or train+test), as load_dataset's "
              "split= names it.")
@click.option("--no-lock", is_flag=True,
              help="Only edit weights.toml: do not ask the Hub or update weights.lock.")
@click.option("--timeout", type=click.FloatRange(0.1, 3600), default=30, show_default=True,
              metavar="SECONDS",
              help="Give up on a Hub request that answers nothing for this long (tried twice).")
@offline_option
@common_options
def add(
    spec: str, dataset: bool, include: tuple[str, ...], exclude: tuple[str, ...],
    loader: str | None, variant: str | None, base: str | None, config: str | None,
    split: str | None, no_lock: bool, timeout: float, settings: Settings,
) -> None:
    """Add a model or dataset to weights.toml (or update its ref and globs), and lock it.

    REF is a branch, a tag or a 40-hex commit; without it the entry follows `main`. As
    `uv add`, the entry is checked on the Hub and weights.lock updated at once: a repo that
    does not exist (or is a dataset added as a model), a ref that does not exist, or globs
    that match nothing leave weights.toml as it was and say why. --no-lock (or --offline)
    only edits weights.toml.

    A new entry gets a `loader` (written into weights.toml, so the choice is reviewed): the
    library that loads it, from the Hub's library_name or its files. Its rule leaves out only
    what that library never reads (other formats and variants of the weights, other configs
    of a dataset) and locks the models it requires (an adapter's base); `--include` adds a
    left-out file back, `--exclude` drops one, `--loader all` locks every file.

    \b
    Examples:
      wlock add sentence-transformers/all-MiniLM-L6-v2
      wlock add acme/llama-lora                 # locks the adapter and its base model
      wlock add acme/lora --base meta-llama/Llama-3.1-8B@main   # its config names a folder
      wlock add TheBloke/Llama-2-7B-GGUF --variant Q4_K_M
      wlock add HuggingFaceFW/fineweb-edu --dataset --config sample-10BT
      wlock add stanfordnlp/imdb --dataset --split train
      wlock add stanfordnlp/imdb@refs/convert/parquet --dataset --config plain_text
      wlock add Qwen/Qwen2.5-0.5B@main --loader all --include '*.json' --include '*.safetensors'
    """
    from wlock.lock.manifest import MANIFEST_NAME, add_entry, parse_requirement, read_manifest

    repo_id, ref = parse_requirement(spec)
    kind: RepoKind = "dataset" if dataset else "model"
    from wlock.lock.loaders import DATASET_LOADERS

    if dataset and (variant or base):
        raise click.UsageError("--variant and --base are for models")
    if dataset and loader is not None and loader not in DATASET_LOADERS:
        raise click.UsageError(f"--loader {loader} loads models: a dataset's loader is "
                               "`datasets` (or `all`: every file)")
    if not dataset and (config or split or loader == "datasets"):
        raise click.UsageError("--config, --split and --loader datasets are for a dataset: "
                               "add --dataset")
    chosen_by = "--loader" if loader else None
    if (config or split) and loader is None:
        loader, chosen_by = "datasets", "--config" if config else "--split"
    project = settings.project()
    budget = settings.rate_budget()  # one for the listing and the lock after it
    path = project / MANIFEST_NAME
    listed = any(e.key == (kind, repo_id) for e in read_manifest(path).entries)
    if variant and not loader and not listed and (no_lock or settings.offline):
        raise click.UsageError("--variant needs --loader when the Hub is not asked")
    if loader is None and not listed and not (no_lock or settings.offline):
        from wlock.lock.hub import HubClient
        from wlock.lock.loaders import datasets, detect_loader

        client = HubClient(settings.endpoint, settings.token, timeout=timeout,
                           budget=budget, note=None if settings.json else info)
        try:
            snap = client.snapshot(kind, repo_id, ref or "main")
            if kind == "dataset":
                # The datasets loader when the card or the layout tells it what to read.
                usable = datasets.usable(frozenset(f.path for f in snap.files), lambda p: (
                    client.read_file(kind, snap.hub_id, snap.revision, p)))
                loader = "datasets" if usable else "all"
                chosen_by = "its card and files"
        except WlockError as e:
            _blame_the_flag(e, kind, spec, ref, path, {})
            e.hint = ((e.hint + "\n") if e.hint else "") + f"{MANIFEST_NAME} was left as it was."
            raise
        if kind == "model":
            loader = detect_loader(snap.library_name, (f.path for f in snap.files))
            chosen_by = (f"the Hub's library_name {snap.library_name!r}" if snap.library_name
                         and loader != "all" else "its files")
        if snap.hub_id != repo_id:
            # A renamed repo (the Hub redirects the old name): added under the name the Hub
            # gives it now, which is what a reader of weights.toml should see, and once.
            how = ("is spelt" if snap.hub_id.lower() == repo_id.lower() else "was renamed to")
            info(f"{repo_id} {how} {snap.hub_id} on the Hub: added as {snap.hub_id}.")
            repo_id = snap.hub_id
    before = path.read_bytes()
    if base is not None:
        parse_requirement(base)  # a usage error (exit 2) before anything is written
    new = add_entry(path, kind, repo_id, ref, include, exclude, loader, variant, base, config,
                    split)
    verb = "Added" if new else "Updated"
    revision = None
    result = None
    if not (no_lock or settings.offline):
        from wlock.atomic import write_bytes_atomic
        from wlock.lock.resolve import lock_project

        try:
            from wlock.policy import enforcer, read_policy

            def lock() -> LockResult:
                return lock_project(project, endpoint=settings.endpoint, token=settings.token,
                                    timeout=timeout,
                                    accept=enforcer(path, "weights.lock was left as it was."),
                                    scan_limits=read_policy(path).limits, budget=budget,
                                    note=None if settings.json else info)

            result = lock()
            now = dict(result.renamed).get(repo_id)
            if now is not None and not listed:
                # Renamed on the Hub, and the Hub was not asked before (--loader given): the
                # entry goes under the name the Hub gives it now, once, and is locked so.
                write_bytes_atomic(path, before)
                new = add_entry(path, kind, now, ref, include, exclude, loader, variant, base,
                                config, split)
                verb = "Added" if new else "Updated"
                how = "is spelt" if now.lower() == repo_id.lower() else "was renamed to"
                info(f"{repo_id} {how} {now} on the Hub: added as {now}.")
                repo_id = now
                result = lock()
        except WlockError as e:
            write_bytes_atomic(path, before)  # as it was: nothing half-added
            _blame_the_flag(e, kind, spec, ref, path, {
                "variant": variant, "config": config, "split": split, "base": base,
                "include": " ".join(include), "exclude": " ".join(exclude)},
                written_from=before.count(b"\n") + 1)
            e.hint = ((e.hint + "\n") if e.hint else "") + (
                f"{MANIFEST_NAME} was left as it was.")
            raise
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM mid-lock: nothing half-added either
            write_bytes_atomic(path, before)
            raise
        entry = result.lock.find(kind, repo_id) or next(
            r for r in result.lock.repos if r.kind == kind and r.id.lower() == repo_id.lower())
        revision = entry.revision
    if settings.json:
        emit({"manifest": str(path), "kind": kind, "id": repo_id, "ref": ref, "added": new,
              "revision": revision, "loader": loader, "variant": variant, "config": config,
              "split": split,
              "selected": list(result.selected) if result else []})
    how = f" (loader {loader}, from {chosen_by})" if loader and chosen_by else ""
    if revision is None:
        info(f"{verb} {kind} {repo_id} in {path}{how}. Run `wlock lock` to pin it.")
    else:
        for line in result.selected if result else ():
            info(line)
        info(f"{verb} {kind} {repo_id} in {path}{how} and locked it at {revision[:7]}.")


def _blame_the_flag(e: WlockError, kind: str, spec: str, ref: str | None, manifest: Path,
                    given: dict[str, str | None], written_from: int | None = None) -> None:
    """An error about the entry `add` just wrote, at a key a flag set (`model.variant`), is
    the flag's: said as `--variant int8: ...`, not as a line of weights.toml the user never
    wrote (and that was put back as it was); a ref that does not exist is the `@REF` typed.
    `written_from`: the first line of what `add` appended (an error there is the entry's
    though it does not name the repo)."""
    from wlock.errors import InvalidFileError

    repo_id = spec.split("@")[0]
    other = "dataset" if kind == "model" else "model"
    if e.hint and e.hint.startswith(f"Move it to a [[{other}]] table") and \
            getattr(e, "repo", None) == repo_id:
        # The Hub has the other kind: said as the command that adds it, not as an entry of
        # weights.toml to move (add wrote none; the file is as it was).
        e.hint = f"Add the {other}: `wlock add {'--dataset ' if other == 'dataset' else ''}" \
            f"{spec}`."
        return
    if ref and e.hint and "Check `ref` in weights.toml" in e.hint:
        e.hint = e.hint.replace("Check `ref` in weights.toml", f"Check the @{ref} of {spec}")
        return
    if not isinstance(e, InvalidFileError) or e.path != str(manifest) or not e.key:
        return
    field = e.key.removeprefix(f"{kind}.")
    value = given.get(field)
    ours = spec.split("@")[0] in e.problem or (
        written_from is not None and e.line is not None and e.line >= written_from)
    if not value or not ours:  # another entry's, not the flag's
        return
    e.message = f"--{field} {value}: {e.problem}"
    if e.hint:
        e.hint = e.hint.replace(f"Remove `{field}`", f"Drop --{field}").replace(
            f"remove `{field}`", f"drop --{field}").replace(
            "or fix the pattern", f"or fix --{field}").replace(
            'Set loader = "peft"', "Add it with --loader peft")


@click.command()
@click.argument("repo_id", metavar="ID", shell_complete=locked_ids)
@click.option("--dataset", is_flag=True, help="The repo is a dataset (default: a model).")
@common_options
def remove(repo_id: str, dataset: bool, settings: Settings) -> None:
    """Remove a model or dataset from weights.toml, and from weights.lock.

    As `uv remove`, the lock is updated at once, with what only that entry required (an
    adapter's base, a code repo); every other pin is kept as it is, so nothing is asked of
    the Hub. When the lock was already out of date for another entry, it is left as it was
    and `wlock lock` named as the next step.

    \b
    Examples:
      wlock remove acme/tiny-bert
      wlock remove stanfordnlp/imdb --dataset
    """
    from wlock.lock.lockfile import LOCK_NAME, read_lock
    from wlock.lock.manifest import MANIFEST_NAME, remove_entry

    kind: RepoKind = "dataset" if dataset else "model"
    project = settings.project()
    path = project / MANIFEST_NAME
    if (project / LOCK_NAME).exists() and not (project / LOCK_NAME).is_file():
        read_lock(project / LOCK_NAME)  # exit 4 naming it, before weights.toml is touched
    remove_entry(path, kind, repo_id)
    locked = _relock_offline(project, settings)
    if settings.json:
        emit({"manifest": str(path), "kind": kind, "id": repo_id, "removed": True,
              "locked": locked})
    if locked:
        info(f"Removed {kind} {repo_id} from {path} and weights.lock.")
    else:
        info(f"Removed {kind} {repo_id} from {path}. Run `wlock lock` to update the lock.")


def _relock_offline(project: Path, settings: Settings) -> bool:
    """weights.lock written again from weights.toml without the Hub (every remaining entry
    kept as locked); False when there is no lock, or an entry needs the Hub."""
    from wlock.atomic import write_bytes_atomic
    from wlock.lock.lockfile import LOCK_NAME
    from wlock.lock.resolve import lock_project

    if not (project / LOCK_NAME).is_file():
        return False
    before = (project / LOCK_NAME).read_bytes()
    try:
        lock_project(project, endpoint=settings.endpoint, token=None, offline=True)
    except WlockError:
        write_bytes_atomic(project / LOCK_NAME, before)
        return False
    return True
