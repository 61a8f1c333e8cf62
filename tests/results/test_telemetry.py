"""Energy, peaks and utilisation from recorded telemetry series: counter increments, resets and
wraps, the power-integration fallback, the window from run_start to the goal."""

from __future__ import annotations

import pytest
from mlbench_worker import sysmetrics as sm

from mlbench_tui.results.telemetry import (
    JOULES_PER_KWH,
    counter_energy,
    gpu_util_text,
    mean_in,
    power_energy,
    rank_energy,
    run_figures,
    util_in,
)
from mlbench_tui.results.time_to_accuracy import EventRecord, MetricPoint


def test_counter_energy_is_the_rise_within_the_window() -> None:
    counter = [(0.0, 1000.0), (1.0, 1100.0), (2.0, 1300.0), (3.0, 1300.0), (4.0, 1700.0)]
    assert counter_energy(counter, 0.0, 4.0) == pytest.approx(700.0)
    assert counter_energy(counter, 1.0, 2.0) == pytest.approx(200.0)
    # edges fall inside intervals: their share of the interval's rise
    assert counter_energy(counter, 0.5, 3.5) == pytest.approx(50 + 200 + 0 + 200)
    # a window wider than the samples counts what was measured
    assert counter_energy(counter, -10.0, 10.0) == pytest.approx(700.0)
    assert counter_energy(counter, 5.0, 9.0) is None  # after the last sample: nothing measured
    assert counter_energy(counter[:1], 0.0, 4.0) is None


def test_a_counter_reset_is_filled_from_the_power_draw() -> None:
    # the counter restarts from zero between t=2 and t=3 (a driver reload), then rises again
    counter = [(0.0, 5000.0), (1.0, 5100.0), (2.0, 5200.0), (3.0, 40.0), (4.0, 140.0)]
    power = [(t, 100.0) for t in (0.0, 1.0, 2.0, 3.0, 4.0)]
    assert counter_energy(counter, 0.0, 4.0, power) == pytest.approx(100 + 100 + 100 + 100)
    # without power samples the reset interval counts nothing rather than a negative jump
    assert counter_energy(counter, 0.0, 4.0) == pytest.approx(300.0)


def test_a_wrapped_counter_never_gives_negative_energy() -> None:
    top = 2.0**32 / 1000  # a 32-bit millijoule counter, for instance
    counter = [(0.0, top - 150.0), (1.0, top - 50.0), (2.0, 30.0), (3.0, 130.0)]
    power = [(0.0, 100.0), (3.0, 100.0)]
    assert counter_energy(counter, 0.0, 3.0, power) == pytest.approx(300.0)


def test_power_integration_is_trapezoidal_and_clipped() -> None:
    power = [(0.0, 100.0), (2.0, 300.0), (4.0, 300.0)]
    assert power_energy(power, 0.0, 4.0) == pytest.approx(400 + 600)
    assert power_energy(power, 1.0, 3.0) == pytest.approx((200 + 300) / 2 * 1 + 300)
    assert power_energy(power, -5.0, 1.0) == pytest.approx((100 + 200) / 2)
    assert power_energy(power, 5.0, 6.0) is None and power_energy(power[:1], 0.0, 4.0) is None


def test_rank_energy_prefers_the_counter_and_falls_back_to_power() -> None:
    counter = [(0.0, 0.0), (10.0, 2000.0)]
    power = [(0.0, 100.0), (10.0, 100.0)]  # would say 1000 J: the counter is the measurement
    assert rank_energy(counter, power, 0.0, 10.0) == (pytest.approx(2000.0), "counter")
    assert rank_energy([], power, 0.0, 10.0) == (pytest.approx(1000.0), "power")
    assert rank_energy([], [], 0.0, 10.0) is None


def test_mean_in_a_window() -> None:
    util = [(0.0, 0.0), (1.0, 80.0), (2.0, 90.0), (3.0, 0.0)]
    assert mean_in(util, 1.0, 2.0) == pytest.approx(85.0)
    assert mean_in(util, None, None) == pytest.approx(42.5)
    assert mean_in(util, 5.0, None) is None


def _points(rank: int, name: str, samples: list[tuple[float, float]]) -> list[MetricPoint]:
    return [MetricPoint(name, v, rank=rank, t=t) for t, v in samples]


def test_run_figures_from_two_gpu_ranks() -> None:
    events = [
        EventRecord("run_start", {}, 0, 10.0),
        EventRecord("goal_reached", {"value": 80.0}, 0, 20.0),
        EventRecord("run_stop", {"status": "success"}, 0, 21.0),
    ]
    metrics: list[MetricPoint] = []
    for rank, watts in ((0, 200.0), (1, 100.0)):
        seconds = [float(t) for t in range(0, 25)]
        metrics += _points(rank, sm.GPU_ENERGY_J, [(t, 1e6 + watts * t) for t in seconds])
        metrics += _points(rank, sm.GPU_POWER_W, [(t, watts) for t in seconds])
        # idle before run_start and after run_stop: not "while training"
        metrics += _points(
            rank, sm.GPU_UTIL, [(t, 90.0 - 40 * rank if 10 <= t <= 21 else 0.0) for t in seconds]
        )
        metrics += _points(rank, sm.GPU_READINGS, [(t, 20.0) for t in seconds])  # polled every 50 ms
        metrics += _points(rank, sm.GPU_MEM_PEAK_MIB, [(t, 1000.0 * (1 + rank) + t) for t in seconds])
        metrics += _points(rank, sm.RSS_MIB, [(t, 500.0 + 10 * rank + (t == 12) * 300) for t in seconds])
    metrics += _points(1, sm.MEM_LIMIT_MIB, [(0.0, 4096.0)])
    metrics.append(MetricPoint("train_loss", 1.0, rank=0, step=3, t=12.0))  # not telemetry
    figures = run_figures(metrics, events, price_per_kwh=0.30)
    assert figures is not None
    r0, r1 = figures.ranks
    assert (r0.rank, r1.rank) == (0, 1)
    assert r0.energy_to_accuracy_j == pytest.approx(2000.0) and r1.energy_to_accuracy_j == pytest.approx(
        1000.0
    )
    assert r0.energy_j == pytest.approx(2200.0) and r0.energy_source == "counter"
    assert figures.energy_to_accuracy_j == pytest.approx(3000.0)
    assert figures.energy_to_accuracy_kwh == pytest.approx(3000.0 / JOULES_PER_KWH)
    assert figures.energy_cost == pytest.approx(3000.0 / 3.6e6 * 0.30) and figures.price_per_kwh == 0.30
    unpriced = run_figures(metrics, events)
    assert unpriced is not None and unpriced.energy_cost is None
    assert (r0.mean_gpu_util, r1.mean_gpu_util, figures.mean_gpu_util) == (90.0, 50.0, 70.0)
    assert (r0.gpu_util_readings, figures.gpu_util_readings) == (11 * 20, 11 * 20)
    assert gpu_util_text(figures) == "70%" and gpu_util_text(r1) == "50%"
    assert (r0.peak_rss_mib, r1.peak_rss_mib, figures.peak_rss_mib) == (800.0, 810.0, 810.0)
    assert (r0.mem_limit_mib, r1.mem_limit_mib) == (None, 4096.0)
    assert (r0.peak_gpu_mem_mib, figures.peak_gpu_mem_mib) == (1024.0, 2024.0)


def test_run_figures_without_a_goal_or_a_counter() -> None:
    events = [EventRecord("run_start", {}, 0, 0.0), EventRecord("run_stop", {"status": "success"}, 0, 10.0)]
    metrics = _points(0, sm.GPU_POWER_W, [(float(t), 50.0) for t in range(11)])
    metrics += _points(0, sm.GPU_MEM_USED_MIB, [(0.0, 700.0), (5.0, 900.0)])  # no framework peak
    figures = run_figures(metrics, events, price_per_kwh=1.0)
    assert figures is not None and figures.energy_to_accuracy_j is None and figures.energy_cost is None
    assert figures.energy_j == pytest.approx(500.0) and figures.energy_source == "power"
    assert figures.peak_gpu_mem_mib == 900.0


def test_a_cpu_run_has_memory_but_no_energy() -> None:
    events = [EventRecord("run_start", {}, 0, 0.0), EventRecord("run_stop", {}, 0, 3.0)]
    figures = run_figures(_points(0, sm.RSS_MIB, [(1.0, 300.0), (2.0, 310.0)]), events)
    assert figures is not None and figures.peak_rss_mib == 310.0
    assert figures.energy_j is None and figures.mean_gpu_util is None and figures.energy_source is None


def test_no_telemetry_no_figures() -> None:
    assert run_figures([MetricPoint("train_loss", 1.0, t=1.0)], []) is None


def test_utilisation_weighs_each_value_by_its_readings_and_counts_only_the_timed_window() -> None:
    # aggregates at the end of their periods: (t, mean) with (t, readings); the first period
    # ended at run_start (t=10, its readings were before the run) and the last at run_stop (t=12)
    util = [(9.0, 0.0), (10.0, 0.0), (11.0, 60.0), (11.5, 90.0), (12.0, 30.0), (13.0, 0.0)]
    readings = [(9.0, 20.0), (10.0, 20.0), (11.0, 20.0), (11.5, 10.0), (12.0, 10.0), (13.0, 20.0)]
    mean, n = util_in(util, readings, 10.0, 12.0)
    assert n == 40 and mean == pytest.approx((60 * 20 + 90 * 10 + 30 * 10) / 40)
    # values sent without a count (workers from before the poller) weigh one reading each
    assert util_in(util, [], 10.0, 12.0) == (pytest.approx(60.0), 3)


def test_a_short_timed_window_says_what_its_utilisation_would_rest_on() -> None:
    events = [
        EventRecord("run_start", {}, 0, 100.0),
        EventRecord("run_stop", {"status": "success"}, 0, 101.3),
    ]
    one = _points(0, sm.GPU_UTIL, [(99.0, 0.0), (101.0, 51.0), (102.0, 0.0)])  # 1 s sampling, 1 inside
    figures = run_figures(one, events)
    assert figures is not None and figures.mean_gpu_util is None
    assert gpu_util_text(figures) == "n/a: 1 reading in 1.3 s" == gpu_util_text(figures.ranks[0])
    # polled: 26 readings inside, still under MLPerf's 60
    polled = one[:1] + _points(0, sm.GPU_UTIL, [(101.3, 51.0)]) + _points(0, sm.GPU_READINGS, [(101.3, 26.0)])
    figures = run_figures(polled, events)
    assert figures is not None and gpu_util_text(figures) == "n/a: 26 readings in 1.3 s"
    # 60 readings make a figure
    enough = _points(0, sm.GPU_UTIL, [(100.6, 40.0), (101.3, 60.0)])
    enough += _points(0, sm.GPU_READINGS, [(100.6, 30.0), (101.3, 30.0)])
    figures = run_figures(enough, events)
    assert figures is not None and figures.mean_gpu_util == pytest.approx(50.0)
    assert gpu_util_text(figures) == "50%" and figures.gpu_util_readings == 60
