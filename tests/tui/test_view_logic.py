"""Pure view logic: goal progress and ETA, stragglers, run rows (filter/sort), compare figures, bars."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mlbench_tui.formatting import format_duration, format_elapsed
from mlbench_tui.plan import GoalPlan
from mlbench_tui.store.api_models import RunInfo
from mlbench_tui.tui.goal import goal_status
from mlbench_tui.tui.rows import compare_rows, run_row, sort_rows
from mlbench_tui.tui.widgets.bars import progress_bar, split_cells

ACC = GoalPlan(metric="val_global_Prec@1", target=80.0, direction="max", kind="full")
PPL = GoalPlan(metric="val_global_Perplexity", target=70.0, direction="min", kind="full")
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_goal_progress_for_a_maximised_metric() -> None:
    status = goal_status(ACC, [(0, 20.0), (10, 40.0), (20, 60.0)])
    assert status is not None
    assert status.best == 60.0 and status.fraction == pytest.approx(0.75)
    assert not status.reached
    assert status.eta_s == pytest.approx(10.0)  # +2 points/s, 20 points to go


def test_goal_progress_for_a_minimised_metric_starts_from_the_first_value() -> None:
    status = goal_status(PPL, [(0, 270.0), (10, 170.0)])
    assert status is not None
    assert status.fraction == pytest.approx(0.5)
    assert goal_status(PPL, [(0, 270.0), (10, 69.0)]).reached  # type: ignore[union-attr]


def test_no_eta_while_not_improving() -> None:
    status = goal_status(ACC, [(0, 50.0), (10, 49.0)])
    assert status is not None and status.eta_s is None


def test_no_goal_means_no_status() -> None:
    assert goal_status(None, [(0, 1.0)]) is None


def test_format_duration() -> None:
    assert [format_elapsed(s) for s in (5, 187, 3725, 2 * 86400 + 3 * 3600)] == [
        "5s",
        "3m07s",
        "1h02m",
        "2d03h",
    ]
    assert format_elapsed(None) == "—"
    assert [format_duration(s) for s in (0.0286, 0.425, 65)] == ["28.6 ms", "0.425 s", "1 m 05 s"]


def _run(
    name: str, workers: int, state: str = "succeeded", result: dict[str, Any] | None = None, **kw: Any
) -> RunInfo:
    return RunInfo(
        id=f"r-{abs(hash(name)) % 16**12:012x}",
        name=name,
        spec_name=kw.get("spec_name", "sweep"),
        spec_hash="h",
        task="1a",
        backend=kw.get("backend", "gloo"),
        workers=workers,
        repeat=0,
        goal=ACC,
        state=state,
        target_kind="local",
        created=kw.get("created", T0),
        result=None if result is None else {"state": state, **result},  # stored with the run's state
    )


def test_run_row_prefers_the_stored_result() -> None:
    row = run_row(_run("a", 2, result={"reached": True, "time_to_accuracy_s": 120.0, "best_value": 81.0}))
    assert row.progress == 1.0 and row.best == 81.0 and row.time_to_goal_s == 120.0


def test_run_row_of_a_running_run_uses_live_points() -> None:
    row = run_row(_run("a", 2, state="running"), [(0, 40.0), (10, 60.0)])
    assert row.progress == pytest.approx(0.75) and row.best == 60.0 and row.eta_s == pytest.approx(10.0)


def test_filter_and_sort_rows() -> None:
    rows = [
        run_row(_run("alpha-gloo-1w", 1, created=T0)),
        run_row(_run("beta-mpi-2w", 2, state="failed", backend="mpi", created=T0 + timedelta(seconds=5))),
        run_row(_run("gamma-gloo-4w", 4, state="running", created=T0 + timedelta(seconds=9))),
    ]
    assert [r.name for r in rows if r.matches("gloo", "all")] == ["alpha-gloo-1w", "gamma-gloo-4w"]
    assert [r.name for r in rows if r.matches("", "failed")] == ["beta-mpi-2w"]
    assert [r.name for r in rows if r.matches("GAMMA 4w", "all")] == ["gamma-gloo-4w"]
    assert [r.name for r in sort_rows(rows, "age")] == ["gamma-gloo-4w", "beta-mpi-2w", "alpha-gloo-1w"]
    assert [r.workers for r in sort_rows(rows, "workers", reverse=True)] == [4, 2, 1]


def test_compare_speedup_efficiency_comm_share_cost() -> None:
    runs = [
        _run(
            "s-1w",
            1,
            result={
                "reached": True,
                "time_to_accuracy_s": 400.0,
                "time_split": {"communication_fraction": 0.0},
            },
        ),
        _run(
            "s-4w",
            4,
            result={
                "reached": True,
                "time_to_accuracy_s": 160.0,
                "time_split": {"communication_fraction": 0.35},
                "cost_to_target": 1.25,
            },
        ),
        _run("s-8w", 8, result={"reached": False}),
    ]
    rows, baseline = compare_rows(runs)
    assert baseline == runs[0].id
    by = {r.name: r for r in rows}
    assert by["s-4w"].speedup == pytest.approx(2.5)
    assert by["s-4w"].efficiency == pytest.approx(0.625)
    assert by["s-4w"].comm_share == pytest.approx(0.35)
    assert by["s-4w"].cost == 1.25
    assert by["s-8w"].speedup is None and by["s-8w"].reached is False
    # an explicit 4-worker baseline: speedup counts in 1-worker units
    rows, baseline = compare_rows(runs, runs[1].id)
    assert baseline == runs[1].id
    assert {r.name: r.speedup for r in rows}["s-1w"] == pytest.approx(1.6)
    # a CUDA-graphs run beside an eager baseline: an implementation comparison, no speedup
    graphs = {"reached": True, "time_to_accuracy_s": 100.0, "implementation": {"cuda_graphs": True}}
    rows, _ = compare_rows([runs[0], _run("s-1w-graphs", 1, result=graphs)], runs[0].id)
    assert {r.name: r.speedup for r in rows} == {"s-1w": pytest.approx(1.0), "s-1w-graphs": None}


def test_bars() -> None:
    assert sum(split_cells([3.0, 1.0, 0.01, 0.0], 24)) == 24
    assert split_cells([3.0, 1.0, 0.01, 0.0], 24)[2] == 1  # a tiny part stays visible
    assert split_cells([0.0, 0.0], 10) == [0, 0]
    assert progress_bar(0.5, 10).plain.endswith(" 50%")
    assert progress_bar(1.0, 10).plain.startswith("█" * 10)
