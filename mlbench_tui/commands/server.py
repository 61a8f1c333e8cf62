"""``mlbench server``: run the metrics server in the foreground (127.0.0.1 by default)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from mlbench_tui.commands.usage import documented


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "server",
        help="run the metrics server (HTTP API for workers, CLI and TUI)",
        description=(
            "Serve the metric store over HTTP until interrupted (or, with --idle-timeout, until unused "
            "that long). The server records its URL and tokens in a state file (mode 0600) under the "
            "state directory, so other mlbench commands find and use it instead of starting their own."
        ),
        **documented("server"),
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=None, help="port (default: 8765; 0 picks a free port)")
    parser.add_argument("--db", default=None, help="store file (default: MLBENCH_DB or the data directory)")
    parser.add_argument(
        "--require-read-token",
        action="store_true",
        help=argparse.SUPPRESS,  # reads always need the read token now; kept so old scripts still run
    )
    parser.add_argument(
        "--prefer-port",
        type=int,
        default=None,
        metavar="PORT",
        help="listen on PORT when it is free, else as --port says (commands restart a store's server "
        "on the port its last one had, so running ranks find it again)",
    )
    parser.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="also answer requests whose Host is NAME (a name clients reach this server by, e.g. a DNS "
        "name in front of it); by default only its own address, and on 0.0.0.0 this machine's names "
        "(more: MLBENCH_SERVER_HOSTS, comma-separated)",
    )
    parser.add_argument(
        "--idle-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="exit after this long without a request, an open stream or a run going (commands start "
        "their server this way; default: serve until interrupted)",
    )
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    import os

    from mlbench_tui.errors import UsageError
    from mlbench_tui.server.daemon import ServerInfo
    from mlbench_tui.server.serve import serve_foreground
    from mlbench_tui.settings import DEFAULT_SERVER_PORT

    port = DEFAULT_SERVER_PORT if args.port is None else args.port
    if not 0 <= port <= 65535:
        raise UsageError(f"--port must be between 0 and 65535, got {port}")
    if args.idle_timeout is not None and not args.idle_timeout > 0:
        raise UsageError(f"--idle-timeout must be a positive number of seconds, got {args.idle_timeout:g}")

    if args.prefer_port is not None and not 0 < args.prefer_port <= 65535:
        raise UsageError(f"--prefer-port must be between 1 and 65535, got {args.prefer_port}")

    def ready(info: ServerInfo) -> None:
        print(
            f"mlbench server {info.url} store={info.store} reads=read token required",
            file=sys.stderr,
            flush=True,
        )
        print(info.url, flush=True)

    return serve_foreground(
        args.db,
        host=args.host,
        port=port,
        admin_token=os.environ.get("MLBENCH_TOKEN") or None,
        read_token=os.environ.get("MLBENCH_READ_TOKEN") or None,
        on_ready=ready,
        idle_timeout=args.idle_timeout,
        prefer_port=args.prefer_port,
        allow_hosts=tuple(args.allow_host),
    )
