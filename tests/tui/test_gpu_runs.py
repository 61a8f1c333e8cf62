"""Pilot tests over a real H200 store: what a GPU user sees of one-rank all-reduce runs and of a
GPU training run (charts, compare, overview)."""

from __future__ import annotations

import io
from typing import Any

import pytest
from mlbench_worker import sysmetrics as sm
from rich.console import Console
from textual.widgets import DataTable, Static

from mlbench_tui.results.model import StartupFigures
from mlbench_tui.results.table import startup_text
from mlbench_tui.server.serve import EmbeddedServer
from mlbench_tui.tui.screens.compare import LATENCY_TITLE, CompareScreen
from mlbench_tui.tui.screens.run_detail import RunDetailScreen
from mlbench_tui.tui.widgets.metric_chart import MetricChart
from mlbench_tui.tui.widgets.run_overview import result_renderable
from tests.tui.test_pilot import _runs_loaded, _select, make_app, wait_for

pytestmark = pytest.mark.anyio

ALLREDUCE_1W = "g-race-nccl-1w-r7"
ALLREDUCE_1W_OTHER = "g-race-nccl-1w-r6"
GPU_TRAINING = "g-energy-nccl-1w"


async def _open(pilot: Any, app: Any, name: str) -> RunDetailScreen:
    await _runs_loaded(pilot, app)
    await _select(pilot, app, name)
    await pilot.press("enter")
    screen: RunDetailScreen = await wait_for(
        pilot,
        lambda: isinstance(app.screen, RunDetailScreen) and app.screen.run is not None and app.screen,
        what="run loaded",
    )
    return screen


def _plain(renderable: Any) -> str:
    """What a Rich renderable reads as on a wide terminal."""
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def _filled(screen: RunDetailScreen) -> bool:
    return all(len(chart.series) for chart in screen.query(MetricChart))


async def test_one_rank_allreduce_run_charts_its_latency(holdout_server: EmbeddedServer) -> None:
    app = make_app(holdout_server)
    async with app.run_test(size=(140, 45)) as pilot:
        screen = await _open(pilot, app, ALLREDUCE_1W)
        await pilot.press("3")
        charts = list(screen.charts.charts)
        assert charts[:2] == ["allreduce_fp32_latency_p50", "allreduce_fp16_latency_p50"]
        assert not any(name.endswith("_busbw") for name in charts)  # one rank moves no data
        await wait_for(pilot, lambda: _filled(screen), what="every chart drawn")
        latency = screen.charts.charts["allreduce_fp32_latency_p50"]
        assert len(latency.series["r0"]) == 4  # the plan's num_sizes: every size measured


async def test_gpu_run_opens_with_gpu_charts(holdout_server: EmbeddedServer) -> None:
    app = make_app(holdout_server)
    async with app.run_test(size=(140, 45)) as pilot:
        screen = await _open(pilot, app, GPU_TRAINING)
        await pilot.press("3")
        assert list(screen.charts.charts)[-3:] == [sm.GPU_UTIL, sm.GPU_POWER_W, sm.GPU_MEM_USED_MIB]
        await wait_for(pilot, lambda: _filled(screen), what="every chart drawn")
        titles = [str(c.border_title) for c in screen.query(MetricChart)]
        assert titles[-3:] == ["GPU utilisation (%)", "GPU power (W)", "GPU memory used (GiB)"]
        memory = screen.charts.charts[sm.GPU_MEM_USED_MIB].series["r0"]
        assert memory.last is not None and 0 < memory.last[1] < 141  # GiB of a 141 GB H200, not MiB
        gpu_memory = screen.charts.charts[sm.GPU_MEM_USED_MIB]
        total = await wait_for(pilot, lambda: gpu_memory.border_subtitle, what="the GPU's total")
        assert total == "of 140 GiB per GPU"  # the H200's 143,771 MiB
        power = screen.charts.charts[sm.GPU_POWER_W].series["r0"]
        assert power.last is not None and power.last[0] >= 0  # seconds since the run started


async def test_compare_of_one_rank_allreduce_runs_shows_latency_per_size(
    holdout_server: EmbeddedServer,
) -> None:
    app = make_app(holdout_server)
    async with app.run_test(size=(160, 50)) as pilot:
        await _runs_loaded(pilot, app)
        for name in (ALLREDUCE_1W, ALLREDUCE_1W_OTHER):
            await _select(pilot, app, name)
            await pilot.press("space")
        await pilot.press("c")
        screen: CompareScreen = await wait_for(
            pilot, lambda: isinstance(app.screen, CompareScreen) and app.screen.charted and app.screen
        )
        configs = _plain(screen.query_one("#configs", Static).content)
        assert "latency p50 · bus bandwidth" in configs
        assert f"{ALLREDUCE_1W} (1w)" in configs and f"{ALLREDUCE_1W_OTHER} (1w)" in configs
        assert " us · —" in configs  # latency per size; one rank: no bandwidth
        chart = screen.query_one("#busbw-chart", MetricChart)
        assert chart.border_title == LATENCY_TITLE and len(chart.series) >= 1
        assert screen.query_one(DataTable).row_count == 2


def _overview(screen: RunDetailScreen) -> str:
    return "\n".join(_plain(screen.query_one(f"#{part}", Static).content) for part in ("summary", "result"))


async def test_overview_shows_the_hyperparameters_that_ran(suite_server: EmbeddedServer) -> None:
    app = make_app(suite_server)
    async with app.run_test(size=(140, 45)) as pilot:
        screen = await _open(pilot, app, "gpu-3a-fp32-nccl-1w")
        text = await wait_for(pilot, lambda: "Result" in (t := _overview(screen)) and t, what="overview")
        assert "Hyperparameters (as run)" in text
        assert "bptt" in text and "15  (data.options; plan 70)" in text  # the smoke model ran
        assert "96  (data.options; plan 1150)" in text  # hidden_size


async def test_overview_shows_the_result_checks(holdout_server: EmbeddedServer) -> None:
    app = make_app(holdout_server)
    async with app.run_test(size=(140, 45)) as pilot:
        screen = await _open(pilot, app, ALLREDUCE_1W)
        text = await wait_for(pilot, lambda: "verdict" in (t := _overview(screen)) and t, what="checks")
        # judged like for like: this sweep (1-1000 elements, 5 repetitions) against the row of its 8
        # recorded repeats, with their spread as the band (not the 1e7-element, 20-repetition row)
        assert (
            "latency 31.4 us: normal: 47% below expected 58.7 us (band +-76%, from the reference's 8 repeats"
            in " ".join(text.split())
        )
        run = screen.run
        assert run is not None and run.result is not None
        # this store predates startup figures: a result with them shows results.table's line
        startup = StartupFigures(
            launcher_s=6.76,
            launcher="scheduled, pulled and started",
            launcher_parts={"scheduled": 1.0, "image pulled": 4.5, "pod started": 1.0, "spawn": 0.26},
            phases={"imports": 5.82, "device": 4.1},
            slowest_rank=0,
            ranks=1,
        )
        with_startup = run.model_copy(update={"result": run.result.model_copy(update={"startup": startup})})
        shown = " ".join(_plain(result_renderable(with_startup, [], None)).split())
        assert f"startup {startup_text(startup)}" in shown
        assert "(scheduled 1.00 s, image pulled 4.50 s, pod started 1.00 s, spawn 0.260 s)" in shown


async def test_a_failure_is_shown_once(holdout_server: EmbeddedServer) -> None:
    app = make_app(holdout_server)
    async with app.run_test(size=(140, 45)) as pilot:
        screen = await _open(pilot, app, "g-model-nccl-1w")

        def shown() -> str | None:  # the failure line and its traceback arrive in separate reads
            text = _overview(screen)
            flat = " ".join(text.split())
            done = "rank 0 failed" in text and flat.count("but the spec asks for A100") >= 2
            return text if done and "stopped: failed" in text else None

        text = await wait_for(pilot, shown, what="the failure and its traceback")
        flat = " ".join(text.split())
        assert flat.count("but the spec asks for A100") == 2  # the failure line and its traceback's last
        assert "error: rank 0 failed" not in flat  # the run's error repeats the rank's failure
        assert "stopped: failed" in text
