"""``mlbench tui``: the terminal UI over a server (the default local store's unless told otherwise)."""

from __future__ import annotations

import argparse

from mlbench_tui.commands.usage import documented


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "tui",
        help="watch, launch and compare runs in a terminal UI",
        description="Open the terminal UI. With no options it shows the default local store through its "
        "server, starting one in the background when none runs (it exits once unused). --server "
        "watches any mlbench server (e.g. one in a cluster).",
        **documented("tui"),
    )
    p.add_argument(
        "--server", metavar="URL", help="mlbench server URL (default: MLBENCH_SERVER_URL or local)"
    )
    p.add_argument("--db", metavar="PATH", help="store file for the local server (default: the user store)")
    p.add_argument(
        "--token", metavar="TOKEN", help="read token (default: MLBENCH_READ_TOKEN / MLBENCH_TOKEN)"
    )
    p.add_argument("--specs", metavar="PATH", help="spec file or directory for the spec screen (default: .)")
    p.set_defaults(handler=cmd_tui)


def cmd_tui(args: argparse.Namespace) -> int:
    import os
    from pathlib import Path

    from mlbench_tui.errors import UsageError
    from mlbench_tui.settings import load_settings

    settings = load_settings()
    if args.server and args.db:
        raise UsageError(
            "--server and --db exclude each other", hint="--db picks the store of a local server"
        )
    if args.server and not args.server.startswith(("http://", "https://")):
        raise UsageError(f"--server must be an http(s) URL, got {args.server!r}")
    specs = Path(args.specs) if args.specs else None
    if specs is not None and not specs.exists():
        raise UsageError(f"--specs: {specs} does not exist")

    reattach = None
    if args.server:
        url = args.server.rstrip("/")
        token = args.token or os.environ.get("MLBENCH_READ_TOKEN") or os.environ.get("MLBENCH_TOKEN")
        admin = os.environ.get("MLBENCH_TOKEN")
    else:  # the store's server, shared with apply, status and cancel (started detached if none runs)
        from mlbench_tui.server.client import Attachment
        from mlbench_tui.server.daemon import ensure_server

        local = ensure_server(args.db)
        url = local.url
        token = args.token or local.read_token or None
        admin = local.admin_token or None

        def reattach() -> Attachment:  # the store's server again, when this one went away
            found = ensure_server(args.db)
            return Attachment(found.url, found.admin_token)

    from mlbench_tui.tui.app import MlbenchApp

    app = MlbenchApp(
        url,
        token=token,
        admin_token=admin,
        keymap=settings.keymap,
        spec_path=specs,
        error_log=settings.paths.state_dir / "tui-errors.log",
        reattach=reattach,
    )
    app.run()
    return app.return_code or 0
