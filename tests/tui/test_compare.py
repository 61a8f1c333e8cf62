"""The compare screen's charts (the report's own figure data, in the terminal) and its report key."""

from __future__ import annotations

import math
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Static
from tui.test_gpu_runs import _plain
from tui.test_pilot import make_app, wait_for

from mlbench_tui.server.serve import EmbeddedServer
from mlbench_tui.tui.screens.compare import BUSBW_TITLE, SPEEDUP_TITLE, CompareScreen
from mlbench_tui.tui.widgets.metric_chart import MetricChart

pytestmark = pytest.mark.anyio

NAMES = ("tui-fixture-gloo-1w", "tui-fixture-gloo-2w", "tui-fixture-allreduce-gloo-2w")


@asynccontextmanager
async def compare(
    srv: EmbeddedServer, tmp_path: Path, names: tuple[str, ...] = NAMES
) -> AsyncIterator[tuple[Any, CompareScreen]]:
    """The app showing the compare screen of ``names`` once its charts are drawn."""
    app = make_app(srv)
    async with app.run_test(size=(150, 45)) as pilot:
        ids = {r.name: r.id for r in srv.info.client().list_runs()}
        screen = CompareScreen([ids[name] for name in names], report_dir=tmp_path)
        await app.push_screen(screen)
        await wait_for(pilot, lambda: screen.charted, what="the compare charts")
        yield pilot, screen


async def test_compare_charts_speedup_per_backend_and_bandwidth_curves(
    server: EmbeddedServer, tmp_path: Path
) -> None:
    async with compare(server, tmp_path) as (_, screen):
        speedup = screen.query_one("#speedup-chart", MetricChart)
        assert speedup.border_title == SPEEDUP_TITLE
        assert list(speedup.series) == ["gloo", "gloo without communication", "ideal"]
        gloo = speedup.series["gloo"]
        assert (gloo.xmin, gloo.xmax) == (1.0, 2.0)
        assert gloo.ymax == 1.0 and 0 < gloo.ymin < 1  # the 2-worker run was slower on 2 shared cores
        busbw = screen.query_one("#busbw-chart", MetricChart)
        assert busbw.border_title == BUSBW_TITLE
        assert sorted(busbw.series) == ["fp16 gloo 2w", "fp32 gloo 2w"]
        fp32 = busbw.series["fp32 gloo 2w"]
        assert len(fp32) == 12  # one point per size measured
        assert fp32.xmax == pytest.approx(math.log10(100_000 * 4))  # bytes on a log axis
        assert fp32.ymax == pytest.approx(0.897, rel=1e-2)  # the run's peak, as `mlbench results` shows


async def test_compare_charts_say_why_they_are_empty(server: EmbeddedServer, tmp_path: Path) -> None:
    async with compare(server, tmp_path, ("tui-fixture-gloo-2w",)) as (_, screen):
        # nothing to draw: the charts are not shown (no pane waiting forever), and it is said once
        assert not screen.query_one("#speedup-chart", MetricChart).display
        assert not screen.query_one("#busbw-chart", MetricChart).display
        assert screen.unshown == [
            "no speedup vs workers chart: every run used 2 worker(s): no other worker count to compare",
            "no all-reduce bus bandwidth (GB/s) chart: no all-reduce run compared",
        ]
        group = screen.query_one("#configs", Static).content
        note = str(group.renderables[0])  # the line under the table, before the scores
        assert note.count("no other worker count to compare") == 1


async def test_report_key_writes_the_report_of_the_compared_runs(
    server: EmbeddedServer, tmp_path: Path
) -> None:
    async with compare(server, tmp_path) as (pilot, screen):
        await pilot.press("R")
        path = await wait_for(pilot, lambda: screen.report_path, timeout=120, what="the report")
        assert path.parent == tmp_path and path.suffix == ".html"
        page = path.read_text()
        for name in NAMES:
            assert name in page
        assert re.findall(r'<figure id="([^"]+)"', page) == [
            "scaling-tui-fixture",
            "allreduce-fp16",
            "allreduce-fp32",
            "allreduce-best-busbw",
            "training-1a",
            "ranks-tui-fixture-gloo-2w",
        ]


async def test_compare_shows_each_configuration_s_history_with_its_versions(
    holdout_server: EmbeddedServer, tmp_path: Path
) -> None:
    """Two of nine recorded repeats compared: the history lists all nine (the cancelled one
    too), oldest first, with the versions the H200 runs recorded."""
    async with compare(holdout_server, tmp_path, ("g-race-nccl-1w-r0", "g-race-nccl-1w-r1")) as (
        pilot,
        screen,
    ):
        await wait_for(pilot, lambda: len(screen.history) == 9, what="the history")
        rendered = _plain(screen.query_one("#configs", Static).content)
        assert "History of g-race-nccl-1w (spec g-race) on H200: 9 run(s)" in rendered
        assert "torch 2.11.0+cu130" in rendered and "backend nccl 2.28.9" in rendered
        assert rendered.index("r-170f99a78b07") < rendered.index("r-9505b10a8244")  # r0 first, r8 last
