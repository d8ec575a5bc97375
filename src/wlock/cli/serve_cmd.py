"""`wlock serve`: this node's cache as a read-only Hub endpoint for other nodes."""

from __future__ import annotations

import os
from pathlib import Path

import click

from wlock.cli.options import Settings, common_options, lock_option
from wlock.cli.output import info
from wlock.errors import UsageError
from wlock.units import count

TOKEN_ENV = "WLOCK_SERVE_TOKEN"  # noqa: S105 - the name of a variable, not a secret


@click.command()
@click.argument("extra_locks", metavar="[LOCK]...", nargs=-1,
                type=click.Path(dir_okay=False, exists=True, path_type=Path))
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; 0.0.0.0 for the whole network.")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True,
              help="Port (0: any free one; the endpoint is printed).")
@click.option("--require-token", is_flag=True,
              help=f"Refuse requests without `Authorization: Bearer ${TOKEN_ENV}`.")
@lock_option
@common_options
def serve(extra_locks: tuple[Path, ...], host: str, port: int, require_token: bool,
          settings: Settings) -> None:
    """Serve the locked revisions of this node's cache as a read-only Hub endpoint.

    Other nodes then point HF_ENDPOINT (or `--endpoint`) at it and run `wlock sync`,
    `snapshot_download` or `hf_hub_download`, which see the Hub's own API, redirects,
    headers and Range requests. Served: the revisions this project's lock pins, and those of
    any other LOCK given, each only if the cache holds it complete with verified bytes
    (hashed once at start, as `wlock check`). Anything else answers 404. Listens on
    127.0.0.1 unless --host says otherwise; with --require-token every request must carry
    the token set in $WLOCK_SERVE_TOKEN (clients send it as HF_TOKEN).

    \b
    Examples:
      wlock serve --host 0.0.0.0 --port 8080
      HF_ENDPOINT=http://node1:8080 wlock sync          # on another node
      wlock serve ../other-project/weights.lock --port 0
    """
    from wlock.cache.serve import CacheStore
    from wlock.cli.progress import make_progress
    from wlock.hubserver.server import HubServer
    from wlock.lock.lockfile import read_lock

    token = os.environ.get(TOKEN_ENV) if require_token else None
    if require_token and not token:
        raise UsageError(f"--require-token needs the token in ${TOKEN_ENV}",
                         hint=f"export {TOKEN_ENV}=<a secret>, and give it to clients as "
                         "HF_TOKEN.")
    locks = [read_lock(path) for path in (settings.lock_path(), *extra_locks)]
    total = sum(r.size for lock in locks for r in lock.repos)
    progress = make_progress("Verifying", total, quiet=settings.json)
    try:
        store = CacheStore.from_locks(locks, settings.cache_dir,
                                      on_hashed=lambda n: progress.advance("", n))
    finally:
        progress.close()
    for reason in store.skipped:
        info(f"not served: {reason}")
    try:
        server = HubServer(store, host=host, port=port, emulator=False, token=token)
    except OSError as e:
        raise UsageError(f"cannot listen on {host}:{port}: {e.strerror or e}",
                         hint="Choose another --port (0 picks a free one).") from e
    files = sum(len(c.files) for r in store.repos.values() for c in r.commits.values())
    click.echo(server.endpoint)
    info(f"Serving {count(len(store.repos), 'repo')} ({count(files, 'file')}) from "
         f"{settings.cache_dir} at {server.endpoint}; on other nodes: "
         f"HF_ENDPOINT={server.endpoint} wlock sync. Ctrl-C stops.")
    # Until Ctrl-C or SIGTERM, which end it as every command ends: exit 130 / 143. A client
    # that stalls mid-file holds a daemon thread, which does not keep the process.
    server.serve_forever()
