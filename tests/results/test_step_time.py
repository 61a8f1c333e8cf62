"""One step-time definition: the median over timed steps after the declared warm-up with p10, p90
and p99; each rank's median and busy time (never above its step); runs that reported only report
windows read from the windows after the warm-up; a recorded H200 store read with today's rules."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from mlbench_worker import wire

from mlbench_tui.results.quantiles import quantile, relative_spread, weighted_quantile
from mlbench_tui.results.ranks import RankFigures, settle_ranks
from mlbench_tui.results.step_time import step_time_figures, step_time_text
from mlbench_tui.results.time_to_accuracy import MetricPoint
from mlbench_tui.server.serve import EmbeddedServer

STORES = Path(__file__).resolve().parents[1] / "fixtures" / "stores" / "h200-2026-11-27"


def timed(rank: int, step: int, seconds: float, comm: float) -> list[MetricPoint]:
    return [
        MetricPoint(wire.TIMED_STEP, seconds, rank=rank, step=step),
        MetricPoint(wire.TIMED_STEP_COMM, comm, rank=rank, step=step),
    ]


def test_quantiles_interpolate_and_weights_stand_for_repeated_values() -> None:
    assert quantile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert quantile([1.0, 2.0, 3.0, 4.0, 5.0], 0.1) == pytest.approx(1.4)
    assert weighted_quantile([(1.0, 3), (5.0, 1)], 0.5) == quantile([1.0, 1.0, 1.0, 5.0], 0.5)
    assert weighted_quantile([(2.0, 2), (1.0, 2)], 0.9) == quantile([1.0, 1.0, 2.0, 2.0], 0.9)
    assert relative_spread([1.0]) is None and relative_spread([2.0, 2.0]) == 0.0


def test_the_step_time_is_the_median_of_timed_steps_after_the_warm_up() -> None:
    points = [MetricPoint(wire.STEP_TIME, 0.5, rank=0, step=10)]  # a window: ignored when steps exist
    for step in range(1, 101):
        points += timed(0, step, 0.010 + step * 1e-5, 0.002)
        points += timed(1, step, 0.011 + step * 1e-5, 0.004)
    figures = step_time_figures(points, warmup_steps=20)  # steps 1-20 left out even if reported
    assert figures is not None and figures.basis == "steps"
    assert figures.steps == 160 and figures.warmup_steps == 20
    assert figures.median_s == pytest.approx((0.0110 + 0.01121) / 2)  # between the two ranks
    assert figures.p10_s < figures.median_s < figures.p90_s <= figures.p99_s
    (r0, r1) = figures.ranks
    assert (r0.rank, r0.steps, r1.steps) == (0, 80, 80)
    assert r0.busy_s == pytest.approx(r0.median_s - 0.002) and r1.busy_s == pytest.approx(r1.median_s - 0.004)
    text = step_time_text(figures)
    assert text.startswith("11.1 ms median of 160 timed steps after a 20-step warm-up (p10 ")
    assert text.endswith(" ms)") and "windows" not in text


def test_busy_time_never_exceeds_the_step() -> None:
    # a rank whose all-reduce was clocked slightly negative against its step still has busy <= step
    figures = step_time_figures([*timed(0, 5, 0.010, 0.0), *timed(0, 6, 0.010, 0.0)], warmup_steps=0)
    assert figures is not None
    rank = RankFigures(0, step_time=0.5, compute=100.0, comm=0.0, totals_step=2)
    settle_ranks({0: rank}, figures)
    assert rank.final and rank.step_time == pytest.approx(0.010) and rank.busy == pytest.approx(0.010)
    live = RankFigures(1, step_time=0.009, compute=30.0, comm=10.0, data=0.0, totals_step=1000)
    assert not live.final and live.busy == pytest.approx(0.009 * 0.75)  # the step less its comm share


def test_report_windows_after_the_warm_up_stand_for_their_steps() -> None:
    windows = [(10, 0.084), (20, 0.0095), (30, 0.0099), (32, 0.0110), (40, 0.0099), (64, 0.0091)]
    points = [MetricPoint(wire.STEP_TIME, v, rank=0, step=s) for s, v in windows]
    figures = step_time_figures(points, warmup_steps=20)
    assert figures is not None and figures.basis == "windows" and figures.windows == 4
    assert figures.steps == 44  # 21-30, 31-32, 33-40, 41-64
    assert figures.median_s == pytest.approx(0.0091)  # the 24-step window holds the median
    assert "44 steps in 4 report windows after a 20-step warm-up" in step_time_text(figures)
    assert step_time_figures(points[:1], warmup_steps=20) is None  # every window was warm-up


def test_a_recorded_h200_store_reads_with_today_s_definition(tmp_path: Path) -> None:
    """The suite's runs (recorded before per-step timing) get their step time from the report
    windows after the warm-up: the 84 ms first window of 1a is no longer mixed in."""
    shutil.copytree(STORES / "suite", tmp_path / "suite")
    # its stored results were computed by other rules: a server reads it (migrated, brought up to date)
    db = tmp_path / "suite" / "mlbench.db"
    with EmbeddedServer(db, record=False) as server, server.info.client() as reader:
        runs = {r.name: r for r in reader.list_runs()}
        result = reader.get_run(runs["gpu-1a-fp32-nccl-1w"].id).result
        assert result is not None and result.step_time is not None
        assert result.step_time.basis == "windows" and result.step_time.warmup_steps == 20
        assert result.step_time_s == pytest.approx(0.00974, abs=1e-5)
        assert result.batch_size == 128 and len(result.config_digest) == 12
        sweep = reader.get_run(runs["gpu-0a-fp32-nccl-1w"].id).result
        assert sweep is not None and sweep.sweep is not None
        assert (sweep.sweep.min_size, sweep.sweep.max_size, sweep.sweep.repetitions) == (1, 10_000_000, 20)
