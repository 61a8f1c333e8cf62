"""Starting, finding and reusing servers: ``mlbench server``, ``ensure_server``, state files."""

from __future__ import annotations

import os
import select
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from mlbench_tui.server.client import MlbenchClient
from mlbench_tui.server.daemon import ensure_server, read_state, run_reader, state_path, stop_server
from mlbench_tui.server.serve import SOMAXCONN, EmbeddedServer, listen_backlog
from mlbench_tui.store.api_models import RunCreate
from mlbench_tui.store.reader import StoreReader

from .conftest import ADMIN, ServerProcess

pytestmark = pytest.mark.slow


def test_mlbench_server_prints_its_url_once_it_answers_healthz(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlbench_tui", "server", "--port", "0", "--db", str(tmp_path / "s.db")],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        # A hang guard only: this pins when the server says it is ready, not how fast it starts.
        ready, _, _ = select.select([proc.stdout], [], [], 120)
        assert ready, "mlbench server printed no URL"
        url = proc.stdout.readline().strip()
        # The URL is printed when the server is ready: the first request is answered, no retry.
        assert httpx.get(f"{url}/healthz").json()["status"] == "ok"
    finally:
        proc.terminate()
        assert proc.wait(10) == 0


def test_state_file_is_private_and_ensure_server_reuses_it(
    server_factory: Callable[..., ServerProcess],
) -> None:
    server = server_factory()
    path = state_path(server.db)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    info = ensure_server(server.db)
    assert info.url == server.url and info.admin_token == ADMIN
    assert info.client().create_run(RunCreate(name="reused")).run.name == "reused"


def test_ensure_server_starts_a_detached_one_for_another_store(
    server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    server = server_factory()
    other = tmp_path / "other.db"
    info = ensure_server(other)
    assert info.url != server.url and info.pid not in (os.getpid(), server.proc.pid)
    assert Path(info.store) == other.resolve() and info.idle_timeout is not None
    assert ensure_server(other) == info  # the same detached server, not a second one
    created = info.client().create_run(RunCreate(name="detached"))
    assert info.client(admin=False).get_run(created.run.id).name == "detached"
    assert read_state(state_path(server.db)).url == server.url  # type: ignore[union-attr]


def test_ensure_server_without_any_server_starts_and_records_one(tmp_path: Path) -> None:
    info = ensure_server(tmp_path / "fresh.db")
    recorded = read_state(state_path(tmp_path / "fresh.db"))
    assert recorded == info
    assert stop_server(info)
    assert read_state(state_path(tmp_path / "fresh.db")) is None


def test_env_server_url_is_used_as_is(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLBENCH_SERVER_URL", "http://example.invalid:1/")
    monkeypatch.setenv("MLBENCH_TOKEN", "tok")
    info = ensure_server()
    assert info.url == "http://example.invalid:1" and info.admin_token == "tok"


def test_run_reader_reads_the_file_unless_a_server_is_named_or_must_create_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "s.db"
    fresh = run_reader(store)  # no store yet: a server creates it
    assert isinstance(fresh, MlbenchClient) and fresh.list_runs() == []
    started = read_state(state_path(store))
    assert started is not None and stop_server(started)
    reader = run_reader(store)  # now it exists: read in this process, no server started
    assert isinstance(reader, StoreReader) and reader.list_runs() == []
    reader.close()
    assert read_state(state_path(store)) is None
    monkeypatch.setenv("MLBENCH_SERVER_URL", "http://127.0.0.1:9/")
    named = run_reader(store)
    assert isinstance(named, MlbenchClient) and named.url == "http://127.0.0.1:9"


def test_second_server_on_same_store_fails_cleanly(tmp_path: Path) -> None:
    with EmbeddedServer(tmp_path / "one.db", record=False):
        result = subprocess.run(
            [sys.executable, "-m", "mlbench_tui", "server", "--port", "0", "--db", str(tmp_path / "one.db")],
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert result.returncode != 0
    assert "in use by another mlbench server" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2) to read a listen queue's length")
def test_the_listen_queue_is_as_long_as_the_system_allows(tmp_path: Path) -> None:
    """Thousands of ranks connect at a run's start: a short queue drops their handshakes."""
    if SOMAXCONN.exists():
        assert listen_backlog() == int(SOMAXCONN.read_text())
    with EmbeddedServer(tmp_path / "q.db", record=False) as embedded:
        port = embedded.url.rsplit(":", 1)[1]
        listening = subprocess.run(
            ["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True, check=True
        ).stdout.split()
    assert listening[0] == "LISTEN"
    assert int(listening[2]) == listen_backlog()  # a listening socket's Send-Q is its queue's length


def test_busy_port_and_bad_port_are_clear_errors(tmp_path: Path) -> None:
    with EmbeddedServer(tmp_path / "a.db") as embedded:
        port = embedded.url.rsplit(":", 1)[1]
        busy = subprocess.run(
            [sys.executable, "-m", "mlbench_tui", "server", "--port", port, "--db", str(tmp_path / "b.db")],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert busy.returncode != 0 and "cannot listen" in busy.stderr and "Traceback" not in busy.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "mlbench_tui", "server", "--port", "70000"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert bad.returncode == 2 and "--port" in bad.stderr
