"""`python -m wlock.hubserver`: run the Hub emulator in the foreground.

    python -m wlock.hubserver --fixtures             # a temp store of the bundled fixture repos
    python -m wlock.hubserver --fixtures --xet       # the same with LFS files on Xet (hf_xet)
    python -m wlock.hubserver --store DIR --port 8080

It prints one JSON line, {"endpoint": ..., "cdn": ..., "store": ...}, once both listeners
accept connections; HubProcess reads it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from wlock.hubserver.fixtures import build_fixture_store
from wlock.hubserver.server import HubServer
from wlock.hubserver.store import DiskStore


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m wlock.hubserver", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", type=Path, help="store folder (see wlock.hubserver.store)")
    parser.add_argument("--fixtures", action="store_true",
                        help="build the bundled fixture repos into the store first")
    parser.add_argument("--xet", action="store_true",
                        help="keep the fixtures' LFS files on Xet too, as the Hub does: "
                             "huggingface_hub then downloads them through hf_xet")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--cdn-port", type=int, default=0)
    parser.add_argument("--verbose", action="store_true", help="log every request to stderr")
    args = parser.parse_args(argv)
    if args.store is None and not args.fixtures:
        parser.error("give --store DIR, --fixtures, or both")
    store_root = args.store or Path(tempfile.mkdtemp(prefix="wlock-hub-"))
    if args.fixtures:
        build_fixture_store(store_root, xet=args.xet)
    server = HubServer(DiskStore(store_root), host=args.host, port=args.port,
                       cdn_port=args.cdn_port, verbose=args.verbose)
    print(json.dumps({"endpoint": server.endpoint, "cdn": server.cdn_url,
                      "store": str(store_root)}), flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
