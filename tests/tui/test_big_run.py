"""Opening a run of a realistic size (a million metric rows) shows its charts in one load that the
client does not give up on: the run screen reads only the metrics it shows, downsampled by the
server, so what crosses the wire is bounded by the screen, not by the run."""

from __future__ import annotations

import asyncio
import math
import time
from pathlib import Path

import pytest

from mlbench_tui.server.serve import EmbeddedServer
from mlbench_tui.store.api_models import RunCreate
from mlbench_tui.store.store import Store
from mlbench_tui.tui.app import MlbenchApp
from mlbench_tui.tui.feed import CHART_POINTS, HISTORY_TIMEOUT_S
from mlbench_tui.tui.screens.run_detail import RunDetailScreen, history_plan
from mlbench_tui.tui.widgets.metric_chart import MetricChart
from mlbench_tui.tui.widgets.status_line import StatusLine

pytestmark = pytest.mark.anyio

STEPS = 125_000  # per rank; 2 ranks x 4 metrics per step (+ validation and totals): ~1M rows
GOAL = {"metric": "val_global_Prec@1", "target": 80.0, "direction": "max", "kind": "full"}


def big_run(path: Path) -> str:
    """A 2-rank training run of ~1M metric rows, written through the store's batch ingest."""
    with Store(path) as store:
        run, _ = store.create_run(RunCreate(name="big", task="1a", backend="gloo", workers=2, goal=GOAL))
        seq = 0
        for start in range(0, STEPS, 25_000):
            for rank in range(2):
                rows: list[tuple[str, int, float, float, float]] = []
                for step in range(start, start + 25_000):
                    epoch, t = step / 1000, 1.7e9 + step * 0.05
                    rows.append(("train_loss", step, epoch, t, math.exp(-step / 40_000) + 0.01 * rank))
                    rows.append(("train_Prec@1", step, epoch, t, 90 * (1 - math.exp(-step / 40_000))))
                    rows.append(("step_time", step, epoch, t, 0.05 + 0.001 * (step % 5)))
                    rows.append(("lr", step, epoch, t, 0.1))
                    if step % 1000 == 999:
                        accuracy = 85 * (1 - math.exp(-step / 30_000))
                        rows.append(("val_global_Prec@1", step, epoch, t, accuracy))
                        rows.append(("time_compute", step, epoch, t, step * 0.04))
                        rows.append(("time_communication", step, epoch, t, step * 0.01))
                store.ingest_metrics(run.id, rank, seq, rows)
                seq += 1
        return run.id


async def test_a_big_run_opens_with_its_charts_from_one_bounded_read(tmp_path: Path) -> None:
    run_id = big_run(tmp_path / "big.db")
    srv = EmbeddedServer(tmp_path / "big.db", record=False).start()
    try:
        app = MlbenchApp(srv.url, token=srv.info.read_token, admin_token=srv.info.admin_token)
        async with app.run_test(size=(140, 45)) as pilot:
            screen = RunDetailScreen(run_id)
            app.push_screen(screen)
            await pilot.pause()
            assert "loading run" in str(screen.query_one("#loading", StatusLine).render())
            # A hang guard only (the feed itself waits HISTORY_TIMEOUT_S for the history): what
            # is pinned is one bounded read, not how fast a busy machine answers it.
            deadline = time.monotonic() + 2 * HISTORY_TIMEOUT_S
            while not (
                screen.run is not None and screen.charts.charts and screen.charts.charts["train_loss"].series
            ):
                assert time.monotonic() < deadline, "the run screen never showed its charts"
                await pilot.pause(0.05)
                await asyncio.sleep(0.02)
            assert screen.feed is not None and screen.feed.loads == 1  # no read timed out and retried
            assert not screen.query_one("#loading").display
            # only what the screen shows was read: no history of the metrics it does not show
            assert set(screen.charts.metric_ranks) <= set(history_plan(screen.run).series)
            assert not {"lr", "train_Prec@1"} & set(screen.charts.metric_ranks)
            await pilot.press("3")
            loss = screen.query_one("#chart-train_loss", MetricChart)
            points = len(loss.series["r0"])
            assert CHART_POINTS <= points <= 3 * CHART_POINTS  # buckets (min and max kept), not 125k points
            assert loss.series["r0"].last == (STEPS - 1, pytest.approx(math.exp(-(STEPS - 1) / 40_000)))
            assert screen.goal_points and max(v for _, v in screen.goal_points) > 80  # goal reached
            assert screen.ranks[1].compute == pytest.approx((STEPS - 1) * 0.04)  # tracker totals
    finally:
        srv.stop()
