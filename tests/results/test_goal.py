"""One goal predicate and one ETA for every view (CLI progress, TUI, time to accuracy)."""

from __future__ import annotations

import math

import pytest

from mlbench_tui.results.goal import better, eta_s, meets


def test_meets_for_maximised_and_minimised_metrics() -> None:
    assert meets(80.0, 80.0, "max") and meets(81.0, 80.0, "max") and not meets(79.9, 80.0, "max")
    assert meets(70.0, 70.0, "min") and meets(69.0, 70.0, "min") and not meets(70.1, 70.0, "min")
    assert not meets(math.nan, 80.0, "max") and not meets(math.nan, 70.0, "min")
    assert better(2.0, 1.0, "max") and better(1.0, 2.0, "min") and not better(1.0, 1.0, "max")


def test_eta_extrapolates_the_recent_trend() -> None:
    rising = [(0.0, 20.0), (10.0, 40.0), (20.0, 60.0)]
    assert eta_s(rising, 80.0, "max") == pytest.approx(10.0)  # +2 per second, 20 to go
    falling = [(0.0, 300.0), (10.0, 200.0)]
    assert eta_s(falling, 70.0, "min") == pytest.approx(13.0)  # -10 per second, 130 to go
    # only the last ``window`` points count
    bent = [(0.0, 0.0), (10.0, 10.0), (20.0, 50.0)]
    assert eta_s(bent, 90.0, "max", window=2) == pytest.approx(10.0)


def test_no_eta_without_a_trend_towards_the_target() -> None:
    assert eta_s([(0.0, 50.0)], 80.0, "max") is None  # one point
    assert eta_s([(0.0, 50.0), (10.0, 49.0)], 80.0, "max") is None  # getting worse
    assert eta_s([(0.0, 50.0), (10.0, 50.0)], 80.0, "max") is None  # flat
    assert eta_s([(0.0, 50.0), (10.0, 85.0)], 80.0, "max") == 0.0  # already there
    assert eta_s([(5.0, 50.0), (5.0, 60.0)], 80.0, "max") is None  # no time passed
