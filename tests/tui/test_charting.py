"""The chart pipeline: min/max pyramid downsampling and braille rasterisation."""

from __future__ import annotations

import itertools
import math

from mlbench_tui.tui.widgets.braille import BRAILLE_BASE, draw_chart, format_value
from mlbench_tui.tui.widgets.series import LEAF, MinMaxSeries


def _series(n: int, spike_at: int | None = None) -> MinMaxSeries:
    s = MinMaxSeries("loss")
    for i in range(n):
        s.append(float(i), 100.0 if i == spike_at else math.sin(i / 500.0))
    return s


def test_buckets_bounded_and_cover_every_point() -> None:
    s = _series(100_003)
    for width in (10, 80, 400):
        buckets = s.buckets(width)
        # at most the requested count plus a short tail from the finer levels
        assert len(buckets) <= width + 2 * 20 + LEAF
        assert buckets[0].x0 == 0.0
        assert buckets[-1].x1 == 100_002.0
        # contiguous in x: nothing lost, nothing repeated
        for a, b in itertools.pairwise(buckets):
            assert b.x0 > a.x1


def test_spike_survives_any_downsampling() -> None:
    s = _series(50_000, spike_at=31_337)
    for width in (20, 100, 1000):
        assert max(b.ymax for b in s.buckets(width)) == 100.0


def test_non_finite_values_are_dropped() -> None:
    s = MinMaxSeries("ppl", [(0, 5.0), (1, math.nan), (2, math.inf), (3, 4.0)])
    assert len(s) == 2
    assert (s.ymin, s.ymax) == (4.0, 5.0)


def test_few_points_come_back_raw() -> None:
    s = MinMaxSeries("v", [(0, 1.0), (10, 2.0), (20, 3.0)])
    assert [(b.x0, b.ymin) for b in s.buckets(100)] == [(0, 1.0), (10, 2.0), (20, 3.0)]


def _text(rows: list[list[tuple[str, str]]]) -> list[str]:
    return ["".join(t for t, _ in row) for row in rows]


def test_draw_chart_fills_exactly_the_size() -> None:
    rows = draw_chart([_series(5000)], 60, 15, goal=0.5, x_label="step")
    assert len(rows) == 15
    assert all(len(line) == 60 for line in _text(rows))


def test_goal_line_is_drawn_and_labelled() -> None:
    s = MinMaxSeries("acc", [(i, float(i)) for i in range(100)])
    rows = draw_chart([s], 60, 12, goal=80.0)
    goal_rows = [row for row in rows if any(style == "goal" for _, style in row)]
    assert any("80" in "".join(t for t, _ in row) for row in goal_rows[1:])  # y label of the goal row
    assert "goal 80" in _text(rows)[0]  # legend


def test_line_is_connected_between_sparse_points() -> None:
    # two points far apart must be joined: every plot column between them has dots
    s = MinMaxSeries("v", [(0, 0.0), (100, 10.0)])
    rows = draw_chart([s], 40, 10)
    plot = [line[9:] for line in _text(rows)[1:-1]]  # drop y labels + axis
    for col in range(len(plot[0])):
        assert any(line[col] != " " and ord(line[col]) >= BRAILLE_BASE for line in plot), col


def test_empty_chart_says_it_waits() -> None:
    assert any("waiting for data" in line for line in _text(draw_chart([MinMaxSeries("x")], 50, 8)))


def test_format_value_fits() -> None:
    for v in (0.000123456, 123456789.0, -42.5, 80.0, 2.565e-05, -3.1e-7, 1e12):
        assert len(format_value(v, 7)) <= 7 and "e" not in format_value(v, 7)
    assert [format_value(v) for v in (80.0, 0.0421, 0.0004526, 2.565e-05, 123456789.0, 0.0)] == [
        "80", "0.0421", "0.00045", "25.7µ", "123M", "0",
    ]  # fmt: skip
