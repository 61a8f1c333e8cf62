"""Time to accuracy and the time split are pure functions over reported metrics and events."""

from __future__ import annotations

import pytest
from support.results import GOAL, series

from mlbench_tui.plan import GoalPlan
from mlbench_tui.results.time_to_accuracy import (
    EventRecord,
    MetricPoint,
    allreduce_summary,
    goal_outcome,
    time_split,
)


def test_time_to_accuracy_uses_train_time_at_first_epoch_meeting_the_goal() -> None:
    outcome = goal_outcome(GOAL, series([40.0, 65.0, 71.0, 75.0]), [])
    assert outcome is not None and outcome.reached
    assert outcome.epochs == 3 and outcome.steps == 150
    assert outcome.train_time_s == pytest.approx(24.0)  # validation excluded
    assert outcome.val_time_s == pytest.approx(4.5)
    assert outcome.best_value == 75.0


def test_goal_reached_event_is_authoritative() -> None:
    event = EventRecord(
        "goal_reached",
        {
            "metric": "val_global_Prec@1",
            "value": 72.0,
            "target": 70,
            "epoch": 2,
            "step": 99,
            "train_time_s": 17.5,
            "val_time_s": 2.0,
        },
        t=130.0,
    )
    outcome = goal_outcome(GOAL, series([40.0, 72.0]), [event])
    assert outcome is not None
    assert (outcome.epochs, outcome.steps, outcome.train_time_s, outcome.val_time_s) == (2, 99, 17.5, 2.0)


def test_min_direction_goal_and_not_reached() -> None:
    goal = GoalPlan(kind="custom", metric="val_global_Perplexity", target=90.0, direction="min")
    points = [
        MetricPoint("val_global_Perplexity", v, epoch=i, t=float(i))
        for i, v in enumerate([300.0, 120.0, 95.0])
    ]
    outcome = goal_outcome(goal, points, [])
    assert outcome is not None and not outcome.reached and outcome.best_value == 95.0
    assert goal_outcome(None, points, []) is None


def test_time_split_means_final_totals_over_ranks() -> None:
    points = [
        MetricPoint("time_compute", 1.0, rank=0, t=1),
        MetricPoint("time_compute", 6.0, rank=0, t=2),
        MetricPoint("time_compute", 8.0, rank=1, t=2),
        MetricPoint("time_communication", 2.0, rank=0, t=2),
        MetricPoint("time_communication", 4.0, rank=1, t=2),
        MetricPoint("time_preprocess", 1.0, rank=0, t=2),
    ]
    split = time_split(points)
    assert split is not None
    assert split.compute == 7.0 and split.communication == 3.0 and split.preprocess == 1.0
    assert split.communication_fraction == pytest.approx(3.0 / 11.0)
    assert time_split([]) is None


def test_allreduce_summary_peak_bus_bandwidth() -> None:
    points = [
        MetricPoint("allreduce_fp32_busbw", 0.1, step=1),
        MetricPoint("allreduce_fp32_busbw", 1.5, step=1000),
        MetricPoint("allreduce_fp32_latency_p50", 5e-4, step=1),
        MetricPoint("allreduce_fp32_latency_p50", 9e-4, step=1000),
        MetricPoint("allreduce_fp32_busbw", 99.0, step=5, rank=1),
    ]
    summary = allreduce_summary(points)
    assert summary is not None
    assert {dtype: figures.model_dump() for dtype, figures in summary.items()} == {
        "fp32": {
            "sizes": 2,
            "peak_busbw_gbps": 1.5,
            "peak_busbw_size": 1000,
            "min_size_latency_p50_s": 5e-4,
            "latency_only": False,
            "busbw_ceiling_gbps": None,
            "above_ceiling": 0,
            "note": None,
            "min_size_spread": None,  # no per-repetition latencies reported
            "peak_busbw_spread": None,
        }
    }


def test_allreduce_summary_spread_comes_from_the_repetitions_at_the_size_it_is_read_at() -> None:
    latencies = [10e-6, 11e-6, 12e-6, 13e-6, 30e-6]  # the smallest size's five timed repetitions
    points = [
        MetricPoint("allreduce_fp32_latency_p50", 12e-6, step=1),
        MetricPoint("allreduce_fp32_latency_p50", 1e-3, step=1000),
        MetricPoint("allreduce_fp32_busbw", 1.0, step=1000),
        *(MetricPoint("allreduce_fp32_iteration_s", v, step=1) for v in latencies),
        *(MetricPoint("allreduce_fp32_iteration_s", v, step=1000) for v in (1e-3, 1e-3)),
    ]
    summary = allreduce_summary(points, workers=2)
    assert summary is not None
    fp32 = summary["fp32"]
    assert fp32.sizes == 2  # the repetitions are not sizes
    # p10 10.4 us, p90 23.2 us around the median 12 us: half the range over the median
    assert fp32.min_size_spread == pytest.approx((23.2e-6 - 10.4e-6) / 2 / 12e-6)
    assert fp32.peak_busbw_spread == 0.0
