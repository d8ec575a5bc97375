"""A download worker process: `python -m wlock.cache.engines.hf_transfer_worker`, driven
over its stdin/stdout.

hf_transfer holds the GIL for a whole download, so parallel large downloads need processes.
We start plain child processes rather than a multiprocessing pool: they do not depend on how
the parent's `__main__` was started (a REPL, `python -c`, a notebook), and the token travels
through a pipe, never through argv where `ps` would show it.

Protocol: one JSON object per line each way.
    in:  {"url": ..., "temp": ..., "hash_kind": "sha256" | "git-sha1" | null,
          "headers": {...}, "connections": N}
    out: {"ok": true, "hash": ... (null without a hash_kind), "size": ...}
         or {"ok": false, "error": ...}
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from wlock.hashing import hash_file

# hf_transfer reads each range whole into memory before writing it, so a worker holds about
# 3 x CHUNK per connection. Measured on 4 x 256 MiB shards (bench/sync_throughput.py's data):
# 8 MiB ranges, 240 MiB peak for the sync's whole process tree; 4 MiB, 165; 2 MiB, 130; the
# time the same within noise (hf_transfer alone, 2 to 16 MiB: 1.5 to 1.8 s either way).
# 4 MiB keeps a distant CDN's round trip per range small beside its transfer.
CHUNK = 4 * 1024 * 1024
MAX_RANGE_RETRIES = 8
PARENT_ENV = "WLOCK_TRANSFER_PARENT"


def download_and_hash(
    url: str, temp: str, hash_kind: str | None, headers: dict[str, str], connections: int
) -> dict[str, object]:
    import hf_transfer

    try:
        # hf_transfer gives a download up when more of its ranges are failing at once than
        # `parallel_failures`, or one range fails `max_retries` times. Every connection may
        # be retrying at once on a flaky link (with min(2, connections), `--jobs 1` put 8
        # connections on one file and failed 5 of 5 syncs on a CDN failing one request in
        # two); a range gets 8 tries (backoff inside hf_transfer), so the file is not lost
        # to one unlucky range.
        hf_transfer.download(
            url=url, filename=temp, max_files=connections, chunk_size=CHUNK,
            parallel_failures=connections, max_retries=MAX_RANGE_RETRIES, headers=headers,
        )
        size = os.stat(temp).st_size
        # hash_kind None: the parent hashes the file as it grows (GrowingHash).
        digest = hash_file(Path(temp), hash_kind) if hash_kind else None
        return {"ok": True, "hash": digest, "size": size}
    except Exception as e:  # noqa: BLE001 - hf_transfer raises plain Exceptions; report all
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}


def die_with_parent() -> None:
    """Linux: have the kernel kill this worker when the sync that started it dies (even by
    SIGKILL), instead of finishing a download nobody will publish."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    pr_set_pdeathsig = 1
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    # The parent may have died while this interpreter was starting, before prctl: compare
    # with the pid it gave us, not with getppid() read here (by then, the new parent's).
    if os.getppid() != int(os.environ.get(PARENT_ENV, os.getppid())):
        sys.exit(1)


def main() -> None:
    die_with_parent()
    try:
        for line in sys.stdin:
            job = json.loads(line)
            result = download_and_hash(job["url"], job["temp"], job["hash_kind"],
                                       job["headers"], job["connections"])
            sys.stdout.write(json.dumps(result) + "\n")
            sys.stdout.flush()
    except (KeyboardInterrupt, BrokenPipeError):
        # Ctrl-C reaches the whole process group; the parent reports it, once.
        sys.exit(130)


if __name__ == "__main__":
    main()
