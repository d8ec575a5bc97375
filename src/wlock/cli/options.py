"""Options shared by several commands, defined once and stacked (pip-tools' way).

Flags win over the environment, which wins over defaults; each is resolved once here and then
passed down explicitly: huggingface_hub reads HF_ENDPOINT at import, so we never rely on it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from wlock.cache.layout import default_cache_dir
from wlock.errors import InvalidFileError, LocalError
from wlock.ratelimit import DEFAULT_MAX_WAIT

if TYPE_CHECKING:
    from wlock.ratelimit import RateBudget

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_ENDPOINT = "https://huggingface.co"


LOCK_ENV = "WLOCK_LOCK"
RATE_LIMIT_ENV = "WLOCK_RATE_LIMIT_WAIT"


@dataclass(frozen=True, slots=True)
class Settings:
    project_flag: Path | None
    endpoint: str
    token: str | None
    cache_root: Path
    json: bool
    lock_flag: Path | None = None
    offline: bool = False
    cache_source: str = "--cache-dir"
    rate_limit_wait: float = DEFAULT_MAX_WAIT

    def rate_budget(self, on_wait: Callable[[str], None] | None = None) -> RateBudget:
        """The Hub's rate limits for this command: waits shown by `on_wait` (a progress
        line), else on stderr (unless -q or --json), summed against --rate-limit-wait."""
        from wlock.cli.output import info
        from wlock.ratelimit import RateBudget

        return RateBudget(self.rate_limit_wait, authenticated=self.token is not None,
                          on_wait=on_wait or (None if self.json else info))

    @property
    def cache_dir(self) -> Path:
        """The HF cache folder. Checked here, on first use by a command that touches the
        cache (lint, add and lock never do): a cache path through a file would otherwise fail
        deep inside as NotADirectoryError, exit 1, the code of wrong bytes.

        Raises LocalError (exit 6) naming the setting the path came from.
        """
        from wlock.cache.layout import cache_dir_problem

        if problem := cache_dir_problem(self.cache_root):
            raise LocalError(
                f"the cache {self.cache_root} (from {self.cache_source}) cannot be used: "
                f"{problem}, not a folder",
                hint=f"Point {self.cache_source} at a folder (the Hugging Face cache is a "
                "folder of models--*/ folders), or move the file out of the way.",
            )
        return self.cache_root

    def project(self) -> Path:
        """The project folder: --project, else the nearest folder upward with weights.toml."""
        from wlock.lock.manifest import MANIFEST_NAME

        if self.project_flag is not None:
            return self.project_flag.resolve()
        found = default_project()
        if found is None:
            raise InvalidFileError(
                MANIFEST_NAME,
                f"not found in {Path.cwd()} or any parent directory",
                hint="Run `wlock init` to create one, or pass --project DIR.",
            )
        return found


    def lock_path(self) -> Path:
        """The lock to use: --lock, else $WLOCK_LOCK, else the project's weights.lock, where
        the project is --project or the nearest folder upward holding weights.toml or
        weights.lock (a deploy image or a CI job may have only the lock)."""
        from wlock.lock.lockfile import LOCK_NAME
        from wlock.lock.manifest import MANIFEST_NAME

        if self.lock_flag is not None:
            return self.lock_flag.resolve()
        if os.environ.get(LOCK_ENV):
            return Path(os.environ[LOCK_ENV]).resolve()
        if self.project_flag is not None:
            return self.project_flag.resolve() / LOCK_NAME
        here = Path.cwd().resolve()
        for folder in (here, *here.parents):
            if (folder / MANIFEST_NAME).is_file() or (folder / LOCK_NAME).is_file():
                return folder / LOCK_NAME
        raise InvalidFileError(
            LOCK_NAME, f"not found in {here} or any parent directory",
            hint="Run `wlock lock` in the project, or pass --lock FILE (or set WLOCK_LOCK).",
        )


def _seconds_from_env(name: str, default: float) -> float:
    """A number of seconds from the environment; a value that is none is a usage error
    naming the variable."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value < 0:
        raise click.UsageError(f"{name}={raw!r}: expected a number of seconds (0 or more)")
    return value


def offline_from_env() -> bool:
    """HF_HUB_OFFLINE as huggingface_hub reads it (constants._is_true)."""
    return os.environ.get("HF_HUB_OFFLINE", "").upper() in {"1", "ON", "YES", "TRUE"}


def default_project() -> Path | None:
    """The nearest folder at or above the current one that holds weights.toml."""
    from wlock.lock.manifest import find_project

    return find_project(Path.cwd())


def cache_source(flag: Path | None) -> str:
    """Where the cache path came from, in the user's words, for messages about it."""
    if flag is not None:
        return "--cache-dir"
    for name in ("HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        if os.environ.get(name):
            return name
    return "the default cache (~/.cache/huggingface/hub)"


def common_options(func: F) -> F:
    """--project, --endpoint, --token, --cache-dir, --json; collected into `settings`.
    Stack `lock_option` / `offline_option` above it for the commands that take them."""

    def build(
        project: Path | None, endpoint: str | None, token: str | None, cache_dir: Path | None,
        as_json: bool, lock: Path | None, offline: bool, rate_limit_wait: float | None,
    ) -> Settings:
        return Settings(
            project_flag=project,
            endpoint=(endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/"),
            token=token or os.environ.get("HF_TOKEN") or None,
            cache_root=cache_dir or default_cache_dir(),
            cache_source=cache_source(cache_dir),
            json=as_json,
            lock_flag=lock,
            offline=offline or offline_from_env(),
            rate_limit_wait=rate_limit_wait if rate_limit_wait is not None
            else _seconds_from_env(RATE_LIMIT_ENV, DEFAULT_MAX_WAIT),
        )

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        kwargs["settings"] = build(
            kwargs.pop("project"), kwargs.pop("endpoint"), kwargs.pop("token"),
            kwargs.pop("cache_dir"), kwargs.pop("as_json"), kwargs.pop("lock", None),
            kwargs.pop("offline", False), kwargs.pop("rate_limit_wait"),
        )
        return func(*args, **kwargs)

    wrapper.__name__ = func.__name__
    wrapper.__doc__ = func.__doc__
    decorators = [
        click.option("--project", type=click.Path(file_okay=False, path_type=Path),
                     help="Project folder (default: nearest folder upward with weights.toml)."),
        click.option("--endpoint", metavar="URL",
                     help="Hub endpoint (default: $HF_ENDPOINT, else https://huggingface.co)."),
        click.option("--token", metavar="TOKEN",
                     help="Hub token (default: $HF_TOKEN, else your `hf auth login`). "
                     "Never printed or written."),
        # A file there is exit 6 naming the setting (Settings.cache_dir), not a usage error.
        click.option("--cache-dir", type=click.Path(path_type=Path),
                     help="HF cache (default: $HF_HUB_CACHE, else $HF_HOME/hub)."),
        click.option("--json", "as_json", is_flag=True, help="Print a JSON report on stdout."),
        click.option("--rate-limit-wait", type=click.FloatRange(min=0), metavar="SECONDS",
                     help="The most to wait in all on the Hub's rate limits before giving up "
                     f"(default: ${RATE_LIMIT_ENV}, else {DEFAULT_MAX_WAIT:g})."),
    ]
    for decorator in reversed(decorators):
        wrapper = decorator(wrapper)
    return wrapper  # type: ignore[return-value]


lock_option = click.option(
    "--lock", type=click.Path(dir_okay=False, path_type=Path),
    help="The weights.lock to use (default: $WLOCK_LOCK, else the project's).")
offline_option = click.option(
    "--offline", is_flag=True,
    help="Make no network request, as HF_HUB_OFFLINE=1 (which is honoured too).")


ARCHIVE_ENV = "WLOCK_ARCHIVE"

archive_option = click.option(
    "--archive", "archive_flag", metavar="URL",
    help="The archive: a folder, s3://bucket/prefix or oci://REGISTRY/NAMESPACE (default: "
    "$WLOCK_ARCHIVE, else [tool.wlock.archive] url in weights.toml). Credentials come from "
    "the AWS environment, or docker/podman login.")


def archive_url(settings: Settings, flag: str | None) -> str | None:
    """--archive (or --to), else $WLOCK_ARCHIVE, else `[tool.wlock.archive] url` in the
    project's weights.toml; None when none is set."""
    import tomllib

    from wlock.lock.manifest import MANIFEST_NAME

    if flag:
        return flag
    if os.environ.get(ARCHIVE_ENV):
        return os.environ[ARCHIVE_ENV]
    try:
        manifest = settings.lock_path().parent / MANIFEST_NAME
        with open(manifest, "rb") as f:
            table = tomllib.load(f).get("tool", {}).get("wlock", {}).get("archive", {})
    except (OSError, tomllib.TOMLDecodeError, InvalidFileError):
        return None  # a broken manifest is reported by the command that reads it
    url = table.get("url") if isinstance(table, dict) else None
    if url is not None and not isinstance(url, str):
        raise InvalidFileError(str(manifest), "must be a string: a folder or s3://bucket/prefix",
                               key="tool.wlock.archive.url")
    if isinstance(url, str) and not url.startswith(("/", "~")) and "://" not in url:
        return str(manifest.parent / url)  # relative to weights.toml, not to the cwd
    return url
