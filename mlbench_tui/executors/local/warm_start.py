"""Warm starts of local ranks: the executor's side of the fork server (``mlbench_worker.warm``),
spoken through its protocol (``mlbench_worker.warm_protocol``; the engine never imports the server).

A one-rank local run is forked from a server that has already imported torch and the tasks,
instead of starting a fresh interpreter that imports them (seconds per run on a GPU machine).
The server is started on first use and kept for the runs that follow; what it imported depends
only on its environment, so it serves runs whose environment differs from its own in nothing
but the per-run variables (``rank_env.RUN_VARIABLES``, none of them read at import): a run with other thread
counts or another spec ``env`` gets a server of its own (the previous one is closed). Every run
starts cold with ``MLBENCH_WARM_START=0``, and so does any run the server cannot take (it failed
to preload, died, or did not answer): a warm start is only ever a faster way to the same rank.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from mlbench_worker import rank_env
from mlbench_worker.warm_protocol import SERVER_MODULE, SWITCH, Exited, Ready, Started, StartRequest

from mlbench_tui.executors.local import processes

READY_TIMEOUT_S = 300.0  # importing torch from a cold disk can take a minute
ANSWER_TIMEOUT_S = 30.0  # a fork answers at once
EXIT_FILE = "warm-exit.json"  # in the run directory: the server's record of the rank's end


class Unavailable(Exception):
    """No server can fork this rank (the message says why): start it cold."""


def enabled(environ: Mapping[str, str]) -> bool:
    return environ.get(SWITCH, "1").strip().lower() not in ("0", "off", "false", "no")


def import_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The part of a rank's environment its imports may read: everything but the per-run variables."""
    return {key: value for key, value in env.items() if key not in rank_env.RUN_VARIABLES}


@dataclass
class WarmProcess:
    """A rank forked by the server, watched like the ``Popen`` of a cold start: its exit status
    is what the server wrote to ``status_path`` when it reaped it."""

    pid: int
    status_path: Path
    server: subprocess.Popen[bytes]
    returncode: int | None = None
    lost: bool = False  # the server died before it could say how the rank ended

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        exited = read_exit(self.status_path)
        if exited is not None:
            self.returncode = exited.exit_code
        elif self.server.poll() is not None and not processes.is_alive(self.pid):
            self.lost = True
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None and not self.lost:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"warm rank {self.pid}", timeout or 0.0)
            time.sleep(0.02)
        return -1 if code is None else code


def read_exit(path: Path) -> Exited | None:
    try:
        return Exited.model_validate_json(path.read_text())
    except (OSError, ValueError):
        return None


@dataclass
class _Server:
    proc: subprocess.Popen[bytes]
    environment: dict[str, str]
    buffer: bytes = b""
    selector: selectors.BaseSelector = field(default_factory=selectors.DefaultSelector)

    def __post_init__(self) -> None:
        assert self.proc.stdout is not None
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.selector.register(self.proc.stdout, selectors.EVENT_READ)

    def line(self, timeout: float) -> bytes | None:
        """The server's next line; None when it ended or said nothing within ``timeout``."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not self.selector.select(left):
                return None
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line

    def close(self) -> None:
        """End its input: it exits once the ranks it forked have ended (they are not stopped)."""
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        self.selector.close()


_LOCK = threading.Lock()
_SERVER: _Server | None = None


def _server_for(environment: dict[str, str], log_path: Path) -> _Server:
    """The ready server for ``environment``: the running one, or a new one (closing the old)."""
    global _SERVER
    if _SERVER is not None and (_SERVER.environment != environment or _SERVER.proc.poll() is not None):
        _SERVER.close()
        _SERVER = None
    if _SERVER is None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            try:
                proc = subprocess.Popen(
                    [sys.executable, "-m", SERVER_MODULE],
                    env=environment,
                    cwd=log_path.parent,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=log,
                    start_new_session=True,
                )
            except OSError as exc:
                raise Unavailable(f"cannot start its server: {exc}") from None
        server = _Server(proc, environment)
        line = server.line(READY_TIMEOUT_S)
        try:
            ready = None if line is None else Ready.model_validate_json(line)
        except ValueError:
            ready = None
        if ready is None or ready.error is not None:
            server.close()
            why = "it did not answer" if ready is None else ready.error
            raise Unavailable(f"its server could not preload: {why} (its log: {log_path})")
        _SERVER = server
    return _SERVER


def start(request: StartRequest, runs_dir: Path) -> WarmProcess:
    """Fork the rank ``request`` describes from the server for its environment; ``Unavailable``
    when no server can take it (the caller starts it cold)."""
    global _SERVER
    environment = import_environment(request.env)
    with _LOCK:
        server = _server_for(environment, runs_dir / "warm-start.log")
        assert server.proc.stdin is not None
        try:
            server.proc.stdin.write(request.model_dump_json().encode() + b"\n")
            server.proc.stdin.flush()
            line = server.line(ANSWER_TIMEOUT_S)
            started = None if line is None else Started.model_validate_json(line)
        except (OSError, ValueError) as exc:
            started = Started(error=str(exc))
        if started is None or started.pid is None:
            server.close()
            _SERVER = None
            why = "no answer" if started is None else started.error
            raise Unavailable(f"its server did not fork the rank: {why}")
        return WarmProcess(started.pid, Path(request.status_path), server.proc)


def shutdown() -> None:
    """Close the server (tests; a process that exits closes it by ending)."""
    global _SERVER
    with _LOCK:
        if _SERVER is not None:
            _SERVER.close()
            _SERVER = None
