"""One detached server per store, found or started by ``ensure_server`` for every command.

Real processes throughout: ``mlbench`` commands as subprocesses, the TUI in a tmux terminal,
the detached server they start and its idle exit (waited for, never timed against a window).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from support.tmux import Tmux

from mlbench_tui import __version__
from mlbench_tui.server.daemon import (
    IDLE_TIMEOUT_ENV,
    ServerInfo,
    alive,
    ensure_server,
    read_state,
    recorded_servers,
    state_path,
    write_state,
)
from mlbench_tui.server.idle import IdleWatch, watch_idle
from mlbench_tui.server.serve import EmbeddedServer
from mlbench_tui.store.api_models import RunCreate

pytestmark = pytest.mark.slow

HANG_GUARD_S = 120.0  # only stops a broken test from hanging; nothing is timed against it

LONG_SPEC = """\
apiVersion: mlbench/v1
kind: Benchmark
metadata:
  name: meet
spec:
  task: 0a
  workers: 2
  backend: gloo
  target: local
  data: synthetic
  hyperparameters:
    sizes_max_exp: 4
    num_sizes: 8
    repetitions: 1000000
    warmup: 1
    dtypes: [fp32]
"""


def _mlbench(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mlbench_tui", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=HANG_GUARD_S,
    )


def _wait(predicate: object, what: str) -> None:
    deadline = time.monotonic() + HANG_GUARD_S
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _the_server() -> ServerInfo:
    (server,) = recorded_servers()
    return server


def test_apply_status_cancel_and_the_tui_meet_one_server(tmp_path: Path) -> None:
    """The TUI (started with no server running) starts the store's server; ``apply --detach``,
    ``status`` and ``cancel`` use that same process, cancel of the detached run is answered (the
    old 500 when apply's embedded server went away), and the server outlives every command."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (./dev test installs it; or: apt-get install -y tmux)")
    spec = tmp_path / "meet.yaml"
    spec.write_text(LONG_SPEC)
    tmux = Tmux(tmp_path / "tmux.sock")
    env_args = [
        f"{k}={v}" for k, v in os.environ.items() if k.startswith("MLBENCH_") or k in ("PATH", "HOME")
    ]
    env_args.append(f"PYTHONPATH={os.environ.get('PYTHONPATH', '')}")
    tmux(
        "new-session", "-d", "-s", tmux.name, "-x", "140", "-y", "40",
        "env", *env_args, "TERM=xterm-256color", sys.executable, "-m", "mlbench_tui", "tui",
    )  # fmt: skip
    try:
        tmux.wait(lambda s: "No benchmark runs yet" in s, "the first-run screen of an empty store")
        server = _the_server()
        assert os.getsid(server.pid) == server.pid  # its own session: no command's child to lose
        assert server.client().health().pid == server.pid

        applied = _mlbench("apply", "--detach", str(spec))
        assert applied.returncode == 0, applied.stderr
        apply_pid = int(re.search(r"pid (\d+)", applied.stderr)[1])  # type: ignore[index]
        client = server.client()
        _wait(lambda: [r for r in client.list_runs() if r.state.value == "running"], "the run to start")
        tmux.wait(lambda s: "meet-gloo-2w" in s and "running" in s, "the run in the TUI")

        status = _mlbench("status")
        assert status.returncode == 0 and re.search(r"meet-gloo-2w\s+running", status.stdout), status.stderr
        cancelled = _mlbench("cancel", "meet-gloo-2w")
        assert cancelled.returncode == 0, cancelled.stderr
        assert "cancelled meet-gloo-2w" in cancelled.stderr and "500" not in cancelled.stderr
        _wait(lambda: not alive(apply_pid), "the background apply to end")
        tmux.wait(lambda s: "meet-gloo-2w" in s and "cancelled" in s, "the cancelled run in the TUI")
        tmux.keys("q")
        _wait(lambda: not tmux.alive(), "q to quit the TUI")

        assert _the_server() == server and alive(server.pid)  # one server, still serving
        assert "state:    cancelled" in _mlbench("status", "meet-gloo-2w").stdout
    finally:
        if tmux.alive():
            tmux("kill-session", "-t", tmux.name)
        subprocess.run([*tmux.base, "kill-server"], capture_output=True)


def test_commands_starting_at_once_meet_on_one_server() -> None:
    """Three ``mlbench status`` at once with no server: all succeed on one server (the store has
    one writer, so a second server would have failed its command)."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "mlbench_tui", "status"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=HANG_GUARD_S)
        assert proc.returncode == 0 and "no runs yet" in out, err
    server = _the_server()
    assert server.pid not in [p.pid for p in procs] and alive(server.pid)
    assert server.version == __version__ and server.idle_timeout is not None


def test_the_server_serves_a_going_run_then_exits_once_idle(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """With a 1 s idle timeout, a run going in the store holds the server (so the requests below
    cannot race its exit); once the run ended the server exits by itself and drops its record."""
    db = tmp_path / "s.db"
    with EmbeddedServer(db, record=False) as embedded, embedded.info.client() as client:
        run = client.create_run(RunCreate(name="brief", task="0a", backend="gloo", workers=1)).run
        client.update_run(run.id, state="running")
    monkeypatch.setenv(IDLE_TIMEOUT_ENV, "1")
    server = ensure_server(db)
    assert server.idle_timeout == 1.0 and alive(server.pid)
    with server.client() as client:
        assert client.get_run(run.id).state.value == "running"
        client.update_run(run.id, state="succeeded")
    _wait(lambda: not alive(server.pid), "the idle server to exit")
    assert read_state(state_path(db)) is None
    again = ensure_server(db)  # the next command starts a new one
    assert again.pid != server.pid


def test_a_stale_state_file_is_replaced() -> None:
    """A record left by a server killed with SIGKILL (its process gone) is replaced."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    store = Path(os.environ["MLBENCH_HOME"]) / "mlbench.db"
    stale = ServerInfo(
        url="http://127.0.0.1:9", pid=gone.pid, store=str(store.resolve()), admin_token="a", read_token="r",
        version=__version__, idle_timeout=900.0,
    )  # fmt: skip
    write_state(stale)
    result = _mlbench("status")
    assert result.returncode == 0, result.stderr
    server = _the_server()
    assert server.pid != gone.pid and alive(server.pid) and server.url != stale.url


def test_a_server_of_another_version_is_replaced(tmp_path: Path) -> None:
    info = ensure_server(tmp_path / "s.db")
    write_state(replace(info, version="0.0.1"))  # what an older mlbench's server records
    again = ensure_server(tmp_path / "s.db")
    assert again.pid != info.pid and again.version == __version__
    _wait(lambda: not alive(info.pid), "the old server to stop")
    assert read_state(state_path(tmp_path / "s.db")) == again


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_idle_clock_counts_from_the_last_request_and_holds_while_one_is_open() -> None:
    clock = FakeClock()
    release = asyncio.Event()

    async def app(scope: object, receive: object, send: object) -> None:
        await release.wait()  # a stream held open

    watch = IdleWatch(app, clock=clock)
    clock.now = 10.0
    assert watch.idle_for() == 10.0

    async def scenario() -> None:
        task = asyncio.create_task(watch({"type": "http"}, None, None))
        await asyncio.sleep(0)
        clock.now = 100.0
        assert watch.idle_for() == 0.0  # open for 90 s: not idle
        release.set()
        await task
        assert watch.idle_for() == 0.0  # ended just now
        clock.now = 103.0
        assert watch.idle_for() == 3.0

    asyncio.run(scenario())


def test_a_going_run_holds_the_server_and_idleness_stops_it() -> None:
    clock = FakeClock()
    watch = IdleWatch(None, clock=clock)
    going = [True]
    stopped = threading.Event()
    done = threading.Event()

    def runs_going() -> bool:
        clock.now += 60.0  # every check a minute later
        return going[0]

    thread = threading.Thread(
        target=watch_idle, args=(watch, 30.0, runs_going, stopped.set, done), kwargs={"check_s": 0.001}
    )
    thread.start()
    _wait(lambda: clock.now > 600.0, "ten minutes of a going run")
    assert not stopped.is_set()  # a run is going: never idle, however long
    going[0] = False
    thread.join(HANG_GUARD_S)
    assert stopped.is_set() and not thread.is_alive()
