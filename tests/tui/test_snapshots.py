"""Snapshot tests (pytest-textual-snapshot) of every screen over the recorded fixture store.

The server listens on a fixed loopback port and the app gets a fixed clock, so the screens are
byte-for-byte stable. Update after an intended change with ``pytest tests/tui --snapshot-update``
and review the SVGs (``snapshot_report.html``).
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from mlbench_worker import sysmetrics as sm

from mlbench_tui.server.client import MlbenchClient
from mlbench_tui.server.serve import EmbeddedServer
from mlbench_tui.tui.app import MlbenchApp

PORT = 47211  # fixed: the URL is on screen
FIXED_NOW = 1_795_242_400.0
SIZE = (140, 42)


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.fixture
def fixed_server(store_copy: Path) -> Iterator[EmbeddedServer]:
    if not _port_free(PORT):
        pytest.skip(f"port {PORT} is taken: snapshots need a fixed server URL")
    srv = EmbeddedServer(store_copy, port=PORT, record=False).start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def fixed_empty_server(tmp_path: Path) -> Iterator[EmbeddedServer]:
    if not _port_free(PORT):
        pytest.skip(f"port {PORT} is taken: snapshots need a fixed server URL")
    srv = EmbeddedServer(tmp_path / "empty.db", port=PORT, record=False).start()
    try:
        yield srv
    finally:
        srv.stop()


def _app(srv: EmbeddedServer) -> MlbenchApp:
    return MlbenchApp(srv.url, token=srv.info.read_token, clock=lambda: FIXED_NOW)


async def _until(pilot: Any, predicate: Callable[[], Any], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("screen did not load")
        await pilot.pause(0.05)
        await asyncio.sleep(0.02)


def _open(name: str, *keys: str, ready: Callable[[Any], Any] | None = None) -> Callable[[Any], Any]:
    """A run_before that waits for the runs, opens run ``name``, waits for it, and presses ``keys``."""

    async def run_before(pilot: Any) -> None:
        app = pilot.app
        await _until(pilot, lambda: getattr(app.screen, "loaded", False))
        names = [r.name for r in app.screen.rows]
        app.screen.query_one("#runs").move_cursor(row=names.index(name))
        await pilot.press("enter")
        await _until(pilot, lambda: getattr(app.screen, "run", None) is not None)
        await _until(pilot, lambda: app.screen.query_one("LogView").entries)
        if keys:
            await pilot.press(*keys)
        if ready is not None:
            await _until(pilot, lambda: ready(app.screen))
        await pilot.pause(0.3)

    return run_before


def _charts_filled(screen: Any) -> bool:
    return all(len(chart.series) for chart in screen.query("MetricChart"))


def test_runs_screen(snap_compare: Any, fixed_server: EmbeddedServer) -> None:
    async def run_before(pilot: Any) -> None:
        await _until(pilot, lambda: getattr(pilot.app.screen, "loaded", False))
        await pilot.pause(0.2)

    assert snap_compare(_app(fixed_server), terminal_size=SIZE, run_before=run_before)


def test_run_overview(snap_compare: Any, fixed_server: EmbeddedServer) -> None:
    assert snap_compare(_app(fixed_server), terminal_size=SIZE, run_before=_open("tui-fixture-gloo-2w"))


def test_run_ranks(snap_compare: Any, fixed_server: EmbeddedServer) -> None:
    assert snap_compare(_app(fixed_server), terminal_size=SIZE, run_before=_open("tui-fixture-gloo-2w", "2"))


def _post_telemetry(srv: EmbeddedServer, name: str) -> None:
    """A minute of telemetry for both ranks of run ``name``, as GPU ranks report it: rank 1's
    GPU mostly idle (flagged), its memory under a pod limit."""
    with MlbenchClient(srv.url, srv.info.admin_token) as client:
        (run,) = [r for r in client.list_runs() if r.name == name]
        assert run.started is not None
        start = run.started.timestamp()
        for rank, util, rss in ((0, 92.0, 1843.0), (1, 31.0, 2410.0)):
            samples = [{"name": sm.MEM_LIMIT_MIB, "value": 4096.0, "t": start}] * rank + [
                {"name": sm.GPU_MEM_TOTAL_MIB, "value": 81559.0, "t": start}
            ]
            for k in range(60):
                t = start + k
                wave = (k % 10) / 10
                samples += [
                    {"name": sm.CPU_PERCENT, "value": 97.0 + 2 * rank, "t": t},
                    {"name": sm.RSS_MIB, "value": rss + 5 * wave, "t": t},
                    {"name": sm.GPU_UTIL, "value": util + 4 * wave, "t": t},
                    {"name": sm.GPU_MEM_USED_MIB, "value": 12400.0 + 300 * rank, "t": t},
                    {"name": sm.GPU_POWER_W, "value": 300.0 + 100 * wave - 150 * rank, "t": t},
                ]
            client.post_metrics(run.id, samples, rank=rank)


def test_run_ranks_with_telemetry(snap_compare: Any, fixed_server: EmbeddedServer) -> None:
    _post_telemetry(fixed_server, "tui-fixture-gloo-2w")
    run_before = _open(
        "tui-fixture-gloo-2w", "2", ready=lambda screen: screen.query_one("RankTable").underused == {1}
    )
    assert snap_compare(_app(fixed_server), terminal_size=SIZE, run_before=run_before)


def test_telemetry_charts_have_a_line_per_rank(snap_compare: Any, fixed_server: EmbeddedServer) -> None:
    from textual.widgets import SelectionList

    _post_telemetry(fixed_server, "tui-fixture-gloo-2w")

    async def run_before(pilot: Any) -> None:
        await _open("tui-fixture-gloo-2w")(pilot)
        screen = pilot.app.screen
        await pilot.press("m")
        await _until(pilot, lambda: pilot.app.screen.query(SelectionList))
        picker = pilot.app.screen.query_one(SelectionList)
        picker.deselect_all()
        picker.select(sm.GPU_UTIL)
        picker.select(sm.RSS_MIB)
        await pilot.press("enter")
        await _until(pilot, lambda: _charts_filled(screen) and len(screen.query("MetricChart")) == 2)
        util = screen.query_one("#chart-sys_gpu_util")
        assert sorted(util.series) == ["r0", "r1"]  # one line per rank
        await pilot.pause(0.3)

    assert snap_compare(_app(fixed_server), terminal_size=SIZE, run_before=run_before)


def test_run_charts(snap_compare: Any, fixed_server: EmbeddedServer) -> None:
    run_before = _open("tui-fixture-gloo-2w", "3", ready=_charts_filled)
    assert snap_compare(_app(fixed_server), terminal_size=SIZE, run_before=run_before)


def test_allreduce_bandwidth_charts(snap_compare: Any, fixed_server: EmbeddedServer) -> None:
    run_before = _open("tui-fixture-allreduce-gloo-2w", "3", ready=_charts_filled)
    assert snap_compare(_app(fixed_server), terminal_size=SIZE, run_before=run_before)


def test_compare_screen(snap_compare: Any, fixed_server: EmbeddedServer) -> None:
    async def run_before(pilot: Any) -> None:
        app = pilot.app
        await _until(pilot, lambda: getattr(app.screen, "loaded", False))
        await pilot.press("o")  # sort by name: 1w, 2w, allreduce
        await pilot.press("down", "space", "space", "c")
        # the runs screen has ``rows`` too: wait for the compare screen itself to have its rows
        await _until(pilot, lambda: type(app.screen).__name__ == "CompareScreen" and app.screen.rows)
        await pilot.pause(0.2)

    assert snap_compare(_app(fixed_server), terminal_size=SIZE, run_before=run_before)


def test_first_run_screen(snap_compare: Any, fixed_empty_server: EmbeddedServer) -> None:
    async def run_before(pilot: Any) -> None:
        await _until(pilot, lambda: type(pilot.app.screen).__name__ == "FirstRunScreen")
        await pilot.pause(0.2)

    assert snap_compare(_app(fixed_empty_server), terminal_size=SIZE, run_before=run_before)


@pytest.fixture
def fixed_gpu_server(tmp_path: Path) -> Iterator[EmbeddedServer]:
    """The real H200 holdout store on the fixed port: a bf16 ResNet-20 GPU run with NVML telemetry."""
    from tests.tui.conftest import gpu_store_copy

    if not _port_free(PORT):
        pytest.skip(f"port {PORT} is taken: snapshots need a fixed server URL")
    srv = EmbeddedServer(gpu_store_copy(tmp_path, "holdout"), port=PORT, record=False).start()
    try:
        yield srv
    finally:
        srv.stop()


def test_gpu_run_overview(snap_compare: Any, fixed_gpu_server: EmbeddedServer) -> None:
    assert snap_compare(_app(fixed_gpu_server), terminal_size=SIZE, run_before=_open("g-energy-nccl-1w"))


def test_gpu_run_charts(snap_compare: Any, fixed_gpu_server: EmbeddedServer) -> None:
    run_before = _open("g-energy-nccl-1w", "3", ready=_charts_filled)
    assert snap_compare(_app(fixed_gpu_server), terminal_size=(140, 60), run_before=run_before)


def test_one_rank_allreduce_run_charts(snap_compare: Any, fixed_gpu_server: EmbeddedServer) -> None:
    run_before = _open("g-race-nccl-1w-r7", "3", ready=_charts_filled)
    assert snap_compare(_app(fixed_gpu_server), terminal_size=SIZE, run_before=run_before)


def test_compare_one_rank_allreduce_runs(snap_compare: Any, fixed_gpu_server: EmbeddedServer) -> None:
    async def run_before(pilot: Any) -> None:
        app = pilot.app
        await _until(pilot, lambda: getattr(app.screen, "loaded", False))
        for name in ("g-race-nccl-1w-r7", "g-race-nccl-1w-r6"):
            names = [r.name for r in app.screen.rows]
            app.screen.query_one("#runs").move_cursor(row=names.index(name))
            await pilot.press("space")
        await pilot.press("c")
        await _until(pilot, lambda: type(app.screen).__name__ == "CompareScreen" and app.screen.charted)
        await pilot.pause(0.2)

    assert snap_compare(_app(fixed_gpu_server), terminal_size=(140, 50), run_before=run_before)


ROOT = Path(__file__).resolve().parents[2]
LAUNCH = Path("tests/fixtures/tui/launch")  # relative: the screen shows the path


def _launch_dialog(spec: Path) -> Callable[[Any], Any]:
    """A run_before that opens the spec screen on ``spec``, waits until it knows what apply would
    do, and presses the launch key."""

    async def run_before(pilot: Any) -> None:
        app = pilot.app
        await _until(pilot, lambda: getattr(app.screen, "loaded", False))
        await pilot.press("S")
        await _until(pilot, lambda: type(app.screen).__name__ == "SpecScreen" and app.screen.preview)
        await pilot.press("a")
        await _until(pilot, lambda: type(app.screen).__name__ == "LaunchScreen")
        await pilot.pause(0.3)

    return run_before


def _spec_app(srv: EmbeddedServer, spec: Path) -> MlbenchApp:
    return MlbenchApp(srv.url, token=srv.info.read_token, clock=lambda: FIXED_NOW, spec_path=spec)


def test_launch_dialog_says_the_runs_start(
    snap_compare: Any, fixed_server: EmbeddedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    spec = LAUNCH / "start.yaml"
    assert snap_compare(_spec_app(fixed_server, spec), terminal_size=SIZE, run_before=_launch_dialog(spec))


def test_launch_dialog_says_an_unchanged_spec_is_skipped_and_offers_force(
    snap_compare: Any, fixed_server: EmbeddedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlbench_tui.plan import expand
    from mlbench_tui.spec.loader import load_paths
    from mlbench_tui.store.api_models import RunCreate

    monkeypatch.chdir(ROOT)
    spec = LAUNCH / "start.yaml"
    (loaded,) = load_paths([spec])
    (plan,) = expand(loaded.spec)
    with MlbenchClient(fixed_server.url, fixed_server.info.admin_token) as client:  # it ran before
        run = client.create_run(RunCreate.from_plan(plan, loaded.text)).run
        client.update_run(run.id, state="succeeded")
    assert snap_compare(_spec_app(fixed_server, spec), terminal_size=SIZE, run_before=_launch_dialog(spec))


def test_launch_dialog_says_why_apply_refuses(
    snap_compare: Any, fixed_server: EmbeddedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # a GPU run on a machine that shows no GPU
    spec = LAUNCH / "gpu.yaml"
    assert snap_compare(_spec_app(fixed_server, spec), terminal_size=SIZE, run_before=_launch_dialog(spec))


def test_runs_screen_shows_a_sweeps_queued_points(snap_compare: Any, fixed_server: EmbeddedServer) -> None:
    from mlbench_tui.store.api_models import RunCreate

    with MlbenchClient(fixed_server.url, fixed_server.info.admin_token) as client:
        running = client.create_run(
            RunCreate(name="sweep-gloo-1w", spec_name="sweep", task="1a", workers=1)
        ).run
        client.update_run(running.id, state="running", handle="local://host/" + running.id)
        for workers in (2, 4):  # what apply registers ahead of starting them
            client.create_run(
                RunCreate(
                    name=f"sweep-gloo-{workers}w", spec_name="sweep", task="1a", workers=workers,
                    labels={"mlbench.io/queued-by": "bench-host:4242"},
                )
            )  # fmt: skip

    async def run_before(pilot: Any) -> None:
        await _until(pilot, lambda: getattr(pilot.app.screen, "loaded", False))
        await _until(pilot, lambda: len(pilot.app.screen.rows) == 6)
        await pilot.pause(0.2)

    assert snap_compare(_app(fixed_server), terminal_size=SIZE, run_before=run_before)
