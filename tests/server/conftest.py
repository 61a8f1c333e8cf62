"""Fixtures: a real ``mlbench server`` process on 127.0.0.1 (free port) and an embedded one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from mlbench_tui.server.client import MlbenchClient

ADMIN = "admin-token-for-tests"
READ = "read-token-for-tests"


@dataclass
class ServerProcess:
    proc: subprocess.Popen[str]
    url: str
    db: Path

    def admin(self) -> MlbenchClient:
        return MlbenchClient(self.url, ADMIN)

    def reader(self) -> MlbenchClient:
        return MlbenchClient(self.url, READ)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(10)


def start_server(db: Path, *extra: str, env: dict[str, str] | None = None) -> ServerProcess:
    """``python -m mlbench_tui server --port 0 --db DB``; returns once it printed its URL."""
    full_env = dict(os.environ, MLBENCH_TOKEN=ADMIN, MLBENCH_READ_TOKEN=READ, **(env or {}))
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlbench_tui", "server", "--port", "0", "--db", str(db), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=full_env,
    )
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    if not url.startswith("http://"):
        proc.kill()
        _, err = proc.communicate(timeout=10)
        raise AssertionError(f"server did not start: {err}")
    return ServerProcess(proc, url, db)


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator[Callable[..., ServerProcess]]:
    started: list[ServerProcess] = []

    def factory(*extra: str, db: Path | None = None) -> ServerProcess:
        server = start_server(db or tmp_path / "store.db", *extra)
        started.append(server)
        return server

    yield factory
    for server in started:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait(10)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server process shared by a test module (each test makes its own runs)."""
    home = tmp_path_factory.mktemp("server-home")
    proc = start_server(home / "store.db", env={"MLBENCH_HOME": str(home)})
    yield proc
    if proc.proc.poll() is None:
        proc.proc.kill()
        proc.proc.wait(10)
