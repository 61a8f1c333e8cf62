"""Where this user's records of local servers live, and the read token they hold for a URL.

The daemon (``server.daemon``) writes one 0600 state file per store; a client made for a URL
without a token (``server.client``) reads the token here. Kept apart from the daemon, which starts
servers and opens stores, so a client (the TUI's included) imports nothing of the store.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from mlbench_tui.owners import pid_alive


def servers_dir() -> Path:
    """``<state dir>/servers``: one state file (and lock, and log) per store."""
    from mlbench_tui.settings import Paths

    return Paths.from_env().state_dir / "servers"


def credentials_for(url: str) -> str | None:
    """The read token of the server at ``url`` as this user's records know it (the records are
    0600 files: a web page has no way to them), else ``MLBENCH_READ_TOKEN`` / ``MLBENCH_TOKEN``
    when ``url`` is ``MLBENCH_SERVER_URL``'s; None when nothing here knows it."""
    wanted = url.rstrip("/")
    for path in sorted(servers_dir().glob("*.json")):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            found, pid, token = str(record["url"]), int(record.get("pid") or 0), record["read_token"]
        except (OSError, ValueError, TypeError, KeyError):
            continue
        if found.rstrip("/") == wanted and isinstance(token, str) and (not pid or pid_alive(pid)):
            return token
    named = os.environ.get("MLBENCH_SERVER_URL", "").rstrip("/")
    if named and named == wanted:
        return os.environ.get("MLBENCH_READ_TOKEN") or os.environ.get("MLBENCH_TOKEN") or None
    return None
