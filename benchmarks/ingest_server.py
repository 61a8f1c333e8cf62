"""The ingest path as it was before the record was guarded (issue 35), for ``benchmarks.ingest``:
the same app, store and writer as ``mlbench server``, without the write rules (run ended, rank
outside the world, rank stopped) and without the Host check. Prints its URL once it answers.

    python -m benchmarks.ingest_server --db STORE   (admin token: MLBENCH_TOKEN)
"""

from __future__ import annotations

import argparse
import gc
import os
import sys

from mlbench_tui.server.app import create_app
from mlbench_tui.server.auth import AuthConfig
from mlbench_tui.server.serve import bind_socket, make_server
from mlbench_tui.store.store import Store


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ingest_server", description=__doc__)
    parser.add_argument("--db", required=True)
    args = parser.parse_args(argv)
    store = Store(args.db, checks=False)
    try:
        auth = AuthConfig.generate(admin=os.environ.get("MLBENCH_TOKEN") or None)
        sock = bind_socket("127.0.0.1", 0)
        server = make_server(create_app(store, auth))  # no Host policy: any Host is answered
        gc.collect()
        gc.freeze()  # as mlbench server does
        print(f"http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
        server.run(sockets=[sock])
    finally:
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
