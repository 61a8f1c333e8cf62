"""Find the local server for ``mlbench tui``, or start one in the background, and stop it when idle.

The TUI launches runs (``mlbench apply --detach``) that report to this server, so the server must
not live inside the TUI process: quitting the TUI would cut the runs off. When none runs,
``mlbench server --port 0`` is started in its own session; on exit it is stopped again unless
runs are still going, in which case it is left serving them (and said so).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlbench_tui.detached import Detached, start_detached
from mlbench_tui.errors import ServerError


@dataclass
class LocalServer:
    """The server the TUI talks to; ``process`` is set when the TUI started it."""

    info: Any  # mlbench_tui.server.serve.ServerInfo
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None


def find_or_start(db: str | None, *, timeout: float = 20.0) -> LocalServer:
    """Reuse the recorded server of ``db`` (default store), or start ``mlbench server`` for it."""
    from mlbench_tui.server.serve import ensure_server
    from mlbench_tui.settings import Paths

    try:
        return LocalServer(ensure_server(db, start=False))
    except ServerError:
        pass
    argv = [sys.executable, "-m", "mlbench_tui", "server", "--port", "0"]
    if db:
        argv += ["--db", str(Path(db).expanduser().resolve())]
    found: list[Any] = []

    def serving(_started: Detached) -> bool:
        try:
            found.append(ensure_server(db, start=False))
        except ServerError:
            return False
        return True

    log_path = Paths.from_env().state_dir / "server.log"
    started, ready = start_detached(argv, log_path, serving, timeout=timeout)
    if ready:
        return LocalServer(found[-1], started.proc, log_path)
    if started.proc.poll() is not None:
        raise ServerError(
            "the local mlbench server could not start: "
            + (" | ".join(started.tail()) or f"exit code {started.proc.returncode}"),
            hint=f"see {log_path}",
        )
    _terminate(started.proc)
    raise ServerError(f"the local mlbench server did not start within {timeout:g}s", hint=f"see {log_path}")


def _terminate(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


def release(server: LocalServer) -> str | None:
    """Stop the server the TUI started unless runs are still going; returns a note for the user."""
    if server.process is None or server.process.poll() is not None:
        return None
    active = 0
    try:
        client = server.info.client(timeout=5.0)
        try:
            active = sum(1 for r in client.list_runs() if r.state.value in ("running", "pending"))
        finally:
            client.close()
    except ServerError:
        active = 0
    if active:
        return (
            f"mlbench server {server.info.url} keeps running for {active} active run(s) "
            f"(pid {server.process.pid}; stop it with: kill {server.process.pid})"
        )
    _terminate(server.process)
    return None
