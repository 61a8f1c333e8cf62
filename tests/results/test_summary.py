"""A run's RunResult: computed from its plan, metrics and events; stored results of any age load."""

from __future__ import annotations

import json

import pytest
from support.results import OLD_STORED, plan, series

from mlbench_tui.lifecycle import RunState
from mlbench_tui.results.model import RunResult
from mlbench_tui.results.summary import needed_metrics, settle_state, summarize_run
from mlbench_tui.results.table import render_results, results_rows
from mlbench_tui.results.time_to_accuracy import EventRecord, MetricPoint


def test_summary_table_and_fingerprint_from_environment_event() -> None:
    events = [
        EventRecord("run_start", {}, t=100.0),
        EventRecord("environment", {"torch": "9.9", "cpu_model": "TestCPU", "threads": 1}, t=100.5),
        EventRecord("run_stop", {"status": "success", "reason": "goal reached"}, t=150.0),
    ]
    result = summarize_run(
        plan(price_per_hour=3.6),
        RunState.SUCCEEDED,
        series([50.0, 71.0]),
        events,
        host={"python": "3.11", "torch": "host"},
    )
    assert result.reached is True and result.time_to_accuracy_s == 16.0
    assert result.wall_time_s == 50.0 and result.stop_reason == "goal reached"
    assert result.fingerprint == {"python": "3.11", "torch": "9.9", "cpu_model": "TestCPU", "threads": 1}
    assert result.cost_to_target == pytest.approx((16.0 + 3.0) / 3600 * 3.6)
    assert RunResult.model_validate_json(result.model_dump_json()) == result  # stored as JSON
    row = results_rows([result])[0]
    assert row["REACHED"] == "yes" and row["TIME TO ACC"] == "16.0s" and "Prec@1 71" in row["RESULT"]
    assert "qs-gloo-2w" in render_results([result])


def test_allreduce_run_shows_its_peak_bandwidth() -> None:
    points = [
        MetricPoint("allreduce_fp32_busbw", 1.5, step=1000),
        MetricPoint("allreduce_fp32_latency_p50", 5e-4, step=1),
    ]
    result = summarize_run(plan(goal=None, task="0a"), RunState.SUCCEEDED, points, [])
    assert result.reached is None and result.allreduce is not None
    assert "fp32 peak 1.5 GB/s" in render_results([result])


def test_a_result_stored_by_an_older_version_loads_with_its_figures() -> None:
    old = RunResult.model_validate_json(json.dumps(OLD_STORED))
    assert old.state is RunState.SUCCEEDED and old.goal is not None and old.goal.target == 70.0
    assert old.time_split is not None and old.time_split.communication == 3.0
    assert (old.speedup, old.one_worker_time_s, old.run_id) == (1.8, 28.8, "r-000000000001")
    assert RunResult.model_validate_json(old.model_dump_json()) == old  # round trip
    assert results_rows([old])[0]["SPEEDUP"] == "1.80x"
    # older and newer shapes: missing keys take their defaults, unknown ones are ignored
    sparse = RunResult.model_validate({"name": "x", "state": "failed", "gpu_energy_j": 12.5})
    assert sparse.name == "x" and sparse.state is RunState.FAILED and sparse.reached is None
    assert sparse.workers == 1 and sparse.framework == "pytorch" and sparse.fingerprint == {}
    assert "gpu_energy_j" not in sparse.model_dump()


def test_settle_state_trusts_what_the_ranks_reported() -> None:
    stop_failed = [EventRecord("run_stop", {"status": "failed", "reason": "loss diverged"})]
    assert settle_state(RunState.SUCCEEDED, None, stop_failed) == (RunState.FAILED, "loss diverged")
    crashed = [
        EventRecord("rank_failed", {"rank": 1, "exception": "InjectedFault: boom"}, rank=1),
        EventRecord("run_stop", {"status": "failed", "reason": "rank 1 failed"}),
    ]
    assert settle_state(RunState.FAILED, "exit code 1", crashed) == (
        RunState.FAILED,
        "rank 1 failed: InjectedFault: boom",
    )
    ok = [EventRecord("run_stop", {"status": "success", "reason": "goal reached"})]
    assert settle_state(RunState.SUCCEEDED, None, ok) == (RunState.SUCCEEDED, None)
    assert settle_state(RunState.CANCELLED, "cancelled by user", crashed) == (
        RunState.CANCELLED,
        "cancelled by user",
    )


def test_a_result_reads_only_the_metrics_it_needs() -> None:
    names = ["train_loss", "step_time", "val_global_Prec@1", "val_loss", "time_train", "time_compute"]
    names += ["allreduce_fp32_busbw", "lr"]
    assert needed_metrics(names, plan().goal) == [
        "val_global_Prec@1",
        "val_loss",
        "time_train",
        "time_compute",
        "allreduce_fp32_busbw",
    ]
