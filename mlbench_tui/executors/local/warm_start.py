"""Warm starts of local ranks: the executor's side of the fork server (``mlbench_worker.launch.warm``),
spoken through its protocol (``mlbench_worker.warm_protocol``; the engine never imports the server).

Every rank of a local PyTorch gloo or nccl run is forked from a server that has already imported
torch and the tasks, instead of starting fresh interpreters that import them (seconds per rank on
a GPU machine), under a launcher forked there too that plays torchrun's agent.
The server is started on first use and kept for the runs that follow; what it imported depends
only on its environment, so it serves runs whose environment differs from its own in nothing
but the per-run variables (``rank_env.RUN_VARIABLES``, none of them read at import): a run with other thread
counts or another spec ``env`` gets a server of its own (the previous one is closed). Every run
starts cold with ``MLBENCH_WARM_START=0``, and so does any run the server cannot take (it failed
to preload, died, or did not answer): a warm start is only ever a faster way to the same ranks.
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
from mlbench_worker.warm_protocol import (
    SERVER_MODULE,
    SWITCH,
    Exited,
    GroupRecord,
    Ready,
    Started,
    StartRequest,
)

from mlbench_tui.executors.local import processes

READY_TIMEOUT_S = 300.0  # importing torch from a cold disk can take a minute
ANSWER_TIMEOUT_S = 30.0  # a fork answers at once
EXIT_FILE = "warm-exit.json"  # in the run directory: the server's record of the launcher's end
LOG_FILE = "warm-start.log"  # in the runs directory: what the servers say on stderr


class Unavailable(Exception):
    """No server can fork this rank (the message says why): start it cold."""


def enabled(environ: Mapping[str, str]) -> bool:
    return environ.get(SWITCH, "1").strip().lower() not in ("0", "off", "false", "no")


def import_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The part of a rank's environment its imports may read: everything but the per-run variables."""
    return {key: value for key, value in env.items() if key not in rank_env.RUN_VARIABLES}


@dataclass
class WarmProcess:
    """A forked group's launcher, watched like the ``Popen`` of a cold launcher: its exit status
    is what the server wrote to ``status_path`` when it reaped it, or, when the server is gone,
    what the launcher's group record says of how the group ended."""

    pid: int
    status_path: Path
    record_path: Path
    server: subprocess.Popen[bytes]
    returncode: int | None = None
    lost: bool = False  # the server and the launcher died before either could say how it ended

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        exited = read_exit(self.status_path)
        if exited is not None:
            self.returncode = exited.exit_code
        elif self.server.poll() is not None and not processes.is_alive(self.pid):
            status = end_of_group(self.record_path)
            if status is None:
                self.lost = True
            self.returncode = status
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


def end_of_group(record_path: Path) -> int | None:
    """The exit status a group's record says its launcher ended with; None before it ended."""
    try:
        record = GroupRecord.model_validate_json(record_path.read_text())
    except (OSError, ValueError):
        return None
    return record.exit_status()


@dataclass
class _Server:
    proc: subprocess.Popen[bytes]
    environment: dict[str, str]
    log_path: Path
    buffer: bytes = b""
    selector: selectors.BaseSelector = field(default_factory=selectors.DefaultSelector)
    ready: bool = False  # its Ready line was read

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


def _started(environment: dict[str, str], log_path: Path) -> _Server:
    """The server for ``environment``: the running one, or a new one (closing the old), which
    may still be importing."""
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
        _SERVER = _Server(proc, environment, log_path)
    return _SERVER


def _server_for(environment: dict[str, str], log_path: Path) -> _Server:
    """The ready server for ``environment``: it has said what it preloaded."""
    global _SERVER
    server = _started(environment, log_path)
    if not server.ready:
        line = server.line(READY_TIMEOUT_S)
        try:
            ready = None if line is None else Ready.model_validate_json(line)
        except ValueError:
            ready = None
        if ready is None or ready.error is not None:
            server.close()
            _SERVER = None
            why = "it did not answer" if ready is None else ready.error
            raise Unavailable(f"its server could not preload: {why} (its log: {server.log_path})")
        server.ready = True
    return server


def prepare(env: Mapping[str, str], runs_dir: Path) -> None:
    """Start the server for ranks with environment ``env`` now, without waiting for its imports
    (they overlap what the engine does before the first run starts); nothing when one runs."""
    with _LOCK, contextlib.suppress(Unavailable):
        _started(import_environment(env), runs_dir / LOG_FILE)


def start(request: StartRequest, runs_dir: Path) -> WarmProcess:
    """Fork the rank ``request`` describes from the server for its environment; ``Unavailable``
    when no server can take it (the caller starts it cold)."""
    global _SERVER
    environment = import_environment(request.env)
    with _LOCK:
        server = _server_for(environment, runs_dir / LOG_FILE)
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
        return WarmProcess(started.pid, Path(request.status_path), Path(request.record_path), server.proc)


def current_server_pid() -> int | None:
    """The pid of this process's warm-start server while one runs."""
    with _LOCK:
        return _SERVER.proc.pid if _SERVER is not None and _SERVER.proc.poll() is None else None


def shutdown() -> None:
    """Close the server (tests; a process that exits closes it by ending)."""
    global _SERVER
    with _LOCK:
        if _SERVER is not None:
            _SERVER.close()
            _SERVER = None
