"""The run screen on a finished run of 1,024 ranks (the session's scale store): the Ranks tab
shows the spread, a strip of every rank and the worst ranks first, with search by rank set; the
step-time chart draws percentile bands across ranks and one rank on demand; the logs filter by a
rank set whose lines come from the server."""

from __future__ import annotations

import contextlib
import sqlite3
from typing import Any

import pytest
from textual.widgets import DataTable, Input

from benchmarks.scale_store import ScaleStore
from mlbench_tui.ranksets import parse_ranks
from mlbench_tui.results.ranks import STEP_TIME
from mlbench_tui.server.serve import EmbeddedServer
from mlbench_tui.tui.screens.run_detail import RunDetailScreen
from mlbench_tui.tui.widgets.log_view import LogView
from mlbench_tui.tui.widgets.metric_chart import MetricChart
from mlbench_tui.tui.widgets.rank_strip import RankStrip
from mlbench_tui.tui.widgets.rank_table import TABLE_ROWS, RankTable
from tests.tui.test_pilot import make_app, wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def _opened(pilot: Any, app: Any, run_id: str) -> RunDetailScreen:
    """The run screen once every rank's figures and the step-time bands arrived."""
    screen = RunDetailScreen(run_id)
    app.push_screen(screen)
    await wait_for(
        pilot,
        lambda: (
            screen.run is not None
            and sum(v.step_time is not None for v in screen.ranks.values()) == 1024
            and "p50" in screen.charts.charts[STEP_TIME].series
        ),
        what="ranks' figures and bands",
    )
    return screen


def _table_ranks(table: RankTable) -> list[int]:
    grid: DataTable[Any] = table.query_one(DataTable)
    return [int(str(grid.get_row_at(i)[0])) for i in range(grid.row_count)]


async def test_ranks_tab_shows_the_worst_of_1024_ranks_first_and_finds_a_rank_set(
    scale_store: ScaleStore, scale_server: EmbeddedServer
) -> None:
    app = make_app(scale_server)
    async with app.run_test(size=(160, 50)) as pilot:
        screen = await _opened(pilot, app, scale_store.run_id)
        await pilot.press("2")
        table = screen.query_one(RankTable)
        shown = _table_ranks(table)
        assert len(shown) == TABLE_ROWS  # the worst, not 1,024 rows
        stragglers = list(scale_store.stragglers)
        assert shown[: len(stragglers)] == stragglers  # slowest first
        assert table.stragglers == set(stragglers)
        busy = [screen.ranks[r].busy or 0.0 for r in shown]
        assert busy == sorted(busy, reverse=True)
        summary = str(table.query_one("#rank-summary").render())
        assert "1024 ranks: 1024 succeeded" in summary and "p90" in summary
        strip = table.query_one(RankStrip)
        assert len(strip.cells) == 1024 and strip.size.height == 8  # 8 rows of 128 ranks
        assert {strip.cells[r].style for r in stragglers} == {"red"}
        # k: search a rank set
        await pilot.press("k")
        search = table.query_one("#rank-search", Input)
        assert search.display and search.has_focus
        await pilot.press(*"0-3,512", "enter")
        assert sorted(_table_ranks(table)) == [0, 1, 2, 3, 512]
        assert not search.display
        await pilot.press("k", *"7-", "enter")  # a bad set: said, the table kept
        assert search.display and sorted(_table_ranks(table)) == [0, 1, 2, 3, 512]
        await pilot.press("ctrl+a", "ctrl+k", "enter")  # empty: the worst again
        assert _table_ranks(table) == shown


def _last_windows(store: ScaleStore) -> dict[int, float]:
    """Each rank's last reported step time (its latest window), read from the store file."""
    with contextlib.closing(sqlite3.connect(f"file:{store.path}?mode=ro", uri=True)) as db:
        rows = db.execute(
            "SELECT m.rank, m.value FROM metrics m JOIN series s ON s.id = m.series "
            "WHERE s.run_id = ? AND s.name = ? ORDER BY m.step",
            (store.run_id, STEP_TIME),
        ).fetchall()
    return {rank: value for rank, value in rows}


async def test_step_time_is_charted_as_bands_across_ranks_and_one_rank_on_demand(
    scale_store: ScaleStore, scale_server: EmbeddedServer
) -> None:
    app = make_app(scale_server)
    async with app.run_test(size=(160, 50)) as pilot:
        screen = await _opened(pilot, app, scale_store.run_id)
        await pilot.press("3")
        chart = screen.query_one(f"#chart-{STEP_TIME}", MetricChart)
        assert set(chart.series) == {"p50", "p90", "max"}  # three lines, not one per rank
        p50, p90, top = (chart.series[k].last for k in ("p50", "p90", "max"))
        assert p50 is not None and p90 is not None and top is not None
        assert p50[0] == p90[0] == top[0] and p50[1] <= p90[1] <= top[1]
        assert {v.step for v in screen.ranks.values()} == {p50[0]}  # every rank ended on that step
        # the bands are the ranks' latest report windows (in ms: the median, the slowest); the
        # rank table shows each finished rank's median over its timed steps instead
        latest = sorted(_last_windows(scale_store).values())
        assert (p50[1], top[1]) == (latest[511] * 1e3, latest[-1] * 1e3)
        worst = scale_store.stragglers[0]
        # enter on the worst rank's row charts its step time beside the bands
        await pilot.press("2")
        await pilot.press("enter")  # the table's first row: the worst rank
        await wait_for(pilot, lambda: f"r{worst}" in chart.series, what="the chosen rank's series")
        assert screen.query_one("#tabs").active == "charts"  # type: ignore[attr-defined]
        assert set(chart.series) == {"p50", "p90", "max", f"r{worst}"}
        assert len(chart.series[f"r{worst}"]) > 1  # its history, from the server
        other = scale_store.stragglers[1]
        screen.chart_rank(other)  # another rank replaces it
        await wait_for(pilot, lambda: f"r{other}" in chart.series, what="the other rank's series")
        assert set(chart.series) == {"p50", "p90", "max", f"r{other}"}


async def test_logs_filter_by_a_rank_range_reads_the_set_s_lines_from_the_server(
    scale_store: ScaleStore, scale_server: EmbeddedServer
) -> None:
    app = make_app(scale_server)
    async with app.run_test(size=(160, 50)) as pilot:
        screen = await _opened(pilot, app, scale_store.run_id)
        logs = screen.query_one(LogView)
        await wait_for(pilot, lambda: logs.entries, what="logs")
        # the view opened on the run's latest lines: rank 0's first lines are too old for it
        assert not any("[rank 0] preparing" in e.text for e in logs.entries)
        await pilot.press("R")
        assert screen.query_one("#log-ranks", Input).has_focus
        await pilot.press(*"0-7,512", "enter")
        assert logs.ranks == parse_ranks("0-7,512")
        await wait_for(pilot, lambda: logs.tail is not None, what="the set's lines from the server")
        visible = logs.visible_entries()
        assert {e.rank for e in visible} == {*range(8), 512}
        assert any("[rank 0] preparing" in e.text for e in visible)  # from the run's start
        assert "0-7,512" in str(logs.query_one("#log-status").render())
        await pilot.press("R", *"8-", "enter")  # a bad set: said, the filter kept
        assert logs.ranks == parse_ranks("0-7,512")
        await pilot.press("ctrl+a", "ctrl+k", "enter")  # empty: every rank again
        assert logs.ranks is None and logs.tail is None
