"""A run's RunResult: computed from its plan, metrics and events; stored results of any age load."""

from __future__ import annotations

import json

import pytest
from support.results import GOAL, OLD_STORED, plan, series

from mlbench_tui.lifecycle import RunState
from mlbench_tui.plan import ImplementationPlan
from mlbench_tui.results.model import RunResult
from mlbench_tui.results.summary import needed_metrics, settle_state, summarize_run
from mlbench_tui.results.table import render_results, results_rows
from mlbench_tui.results.time_to_accuracy import EventRecord, MetricPoint, allreduce_summary


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
    assert row["REACHED"] == "yes" and row["TIME TO ACC"] == "16.0 s" and "Prec@1 71" in row["RESULT"]
    assert "qs-gloo-2w" in render_results([result])


def test_graph_capture_is_reported_apart_from_time_to_accuracy() -> None:
    stop = {"status": "success", "reason": "goal reached", "graph_capture_s": 4.5, "train_time_s": 16.0}
    events = [EventRecord("run_start", {}, t=100.0), EventRecord("run_stop", stop, t=150.0)]
    graphed = plan(implementation=ImplementationPlan(cuda_graphs=True))
    result = summarize_run(graphed, RunState.SUCCEEDED, series([50.0, 71.0]), events)
    assert result.implementation == ImplementationPlan(cuda_graphs=True, host_allocator="tuned")
    assert result.graph_capture_s == 4.5 and result.time_to_accuracy_s == 16.0
    eager = summarize_run(plan(), RunState.SUCCEEDED, series([71.0]), events[:1])
    assert eager.implementation == ImplementationPlan(cuda_graphs=False) and eager.graph_capture_s is None


def test_allreduce_run_shows_its_peak_bandwidth() -> None:
    points = [
        MetricPoint("allreduce_fp32_busbw", 1.5, step=1000),
        MetricPoint("allreduce_fp32_latency_p50", 5e-4, step=1),
    ]
    result = summarize_run(plan(goal=None, task="0a"), RunState.SUCCEEDED, points, [])
    assert result.reached is None and result.allreduce is not None
    assert "fp32 peak 1.50 GB/s" in render_results([result])
    # where the per-size tables follow (mlbench results), the row names what they hold instead
    table = render_results([result], sweep_tables=True)
    assert "fp32 1 size (tables below)" in table and "peak" not in table and "GB/s" not in table


def test_one_rank_allreduce_has_latency_only_with_a_note() -> None:
    # what a one-rank sweep reported before it stopped reporting bandwidth: must not be shown
    points = [
        MetricPoint("allreduce_fp32_latency_p50", 2e-5, step=1),
        MetricPoint("allreduce_fp32_latency_p50", 3e-5, step=10**8),
        MetricPoint("allreduce_fp32_busbw", 9021.0, step=10**8),
    ]
    result = summarize_run(plan(goal=None, task="0a", workers=1), RunState.SUCCEEDED, points, [])
    assert result.allreduce is not None
    (entry,) = result.allreduce.values()
    assert entry.peak_busbw_gbps is None and entry.min_size_latency_p50_s == 2e-5
    assert entry.latency_only is True and entry.note is not None and "moves no data" in entry.note
    table = render_results([result])
    assert (
        "fp32 latency 20.0 us (1 rank: no bandwidth)" in table
        and "9021" not in table
        and "9.02e+03" not in table
    )
    assert "fp32 2 sizes, latency only (tables below)" in render_results([result], sweep_tables=True)
    sweep = EventRecord("allreduce_sweep", {"latency_only": True, "world_size": 1})
    by_word = allreduce_summary(points[:2], [sweep])  # the worker's word suffices
    assert by_word is not None and by_word["fp32"].latency_only


def test_a_bandwidth_above_the_devices_ceiling_is_flagged() -> None:
    sweep = EventRecord(
        "allreduce_sweep",
        {
            "latency_only": False,
            "busbw_ceiling_gbps": 3352.3,
            "ceiling_basis": "the GPU's peak memory bandwidth",
        },
    )
    points = [
        MetricPoint("allreduce_fp32_latency_p50", 1e-5, step=1),
        MetricPoint("allreduce_fp32_busbw", 400.0, step=10**6),
        MetricPoint("allreduce_fp32_busbw", 9021.0, step=10**8),
        MetricPoint("allreduce_fp16_latency_p50", 1e-5, step=1),
        MetricPoint("allreduce_fp16_busbw", 380.0, step=10**8),
    ]
    result = summarize_run(plan(goal=None, task="0a", workers=2), RunState.SUCCEEDED, points, [sweep])
    assert result.allreduce is not None
    fp32, fp16 = result.allreduce["fp32"], result.allreduce["fp16"]
    assert fp32.above_ceiling == 1 and fp32.busbw_ceiling_gbps == 3352.3
    assert fp32.note is not None
    assert "1 size(s) above the 3,352 GB/s ceiling (the GPU's peak memory bandwidth)" in fp32.note
    assert fp16.above_ceiling == 0 and fp16.note is None
    table = render_results([result])
    assert "fp32 peak 9021 GB/s (! above the 3,352 GB/s ceiling)" in table  # never 9.02e+03
    assert "fp16 peak 380 GB/s" in table
    flagged = render_results([result], sweep_tables=True)
    assert "fp16 1 size, fp32 1 size, ! 1 above the 3,352 GB/s ceiling (tables below)" in flagged


def test_a_result_stored_by_an_older_version_loads_with_its_figures() -> None:
    old = RunResult.model_validate_json(json.dumps(OLD_STORED))
    assert old.state is RunState.SUCCEEDED and old.goal is not None and old.goal.target == 70.0
    assert old.time_split is not None and old.time_split.communication == 3.0
    assert (old.speedup, old.one_worker_time_s, old.run_id) == (1.8, 28.8, "r-000000000001")
    assert RunResult.model_validate_json(old.model_dump_json()) == old  # round trip
    assert results_rows([old])[0]["SPEEDUP"] == "1.80x"
    # its ranks ran before the host allocator was tuned
    assert old.implementation == ImplementationPlan(cuda_graphs=False, host_allocator="system")
    graphed = RunResult.model_validate({**OLD_STORED, "implementation": {"cuda_graphs": True}})
    assert graphed.implementation == ImplementationPlan(cuda_graphs=True, host_allocator="system")
    # older and newer shapes: missing keys take their defaults, unknown ones are ignored
    sparse = RunResult.model_validate({"name": "x", "state": "failed", "gpu_energy_j": 12.5})
    assert sparse.name == "x" and sparse.state is RunState.FAILED and sparse.reached is None
    assert sparse.workers == 1 and sparse.framework == "pytorch" and sparse.fingerprint == {}
    assert "gpu_energy_j" not in sparse.model_dump()


def test_settle_state_trusts_what_the_ranks_reported() -> None:
    stop_failed = [EventRecord("run_stop", {"status": "failed", "reason": "loss diverged"})]
    assert settle_state(RunState.SUCCEEDED, None, stop_failed, 1) == (RunState.FAILED, "loss diverged")
    crashed = [
        EventRecord("rank_failed", {"rank": 1, "exception": "InjectedFault: boom"}, rank=1),
        EventRecord("run_stop", {"status": "failed", "reason": "rank 1 failed"}),
    ]
    assert settle_state(RunState.FAILED, "exit code 1", crashed, 2) == (
        RunState.FAILED,
        "rank 1 failed: InjectedFault: boom",
    )
    ok = [EventRecord("run_stop", {"status": "success", "reason": "goal reached"})]
    assert settle_state(RunState.SUCCEEDED, None, ok, 1) == (RunState.SUCCEEDED, None)
    assert settle_state(RunState.CANCELLED, "cancelled by user", crashed, 2) == (
        RunState.CANCELLED,
        "cancelled by user",
    )
    # every rank says how it stopped: one rank's failure fails a run whose processes exited 0
    late_failure = [
        EventRecord("run_stop", {"status": "success", "reason": "goal", "exit_code": 0}, rank=0),
        EventRecord("run_stop", {"status": "failed", "reason": "rank 1 failed: OOM", "exit_code": 1}, rank=1),
    ]
    assert settle_state(RunState.SUCCEEDED, None, late_failure, 2) == (RunState.FAILED, "rank 1 failed: OOM")


@pytest.mark.parametrize("seen", [RunState.CANCELLED, RunState.FAILED, RunState.UNKNOWN])
def test_a_run_whose_ranks_all_stopped_normally_succeeded_whatever_its_launcher_became(
    seen: RunState,
) -> None:
    """``apply`` stopped (or the launcher killed) after every rank reported its stop: the work
    was done, so the run succeeded; one rank short of that keeps what the executor saw."""
    done = _stops({"status": "success", "exit_code": 0}, {"status": "success", "exit_code": 0})
    assert settle_state(seen, "cancelled", done, 2) == (RunState.SUCCEEDED, None)
    short = done[:1]
    state, message = settle_state(seen, "cancelled", short, 2)
    assert state is (RunState.FAILED if seen is RunState.UNKNOWN else seen)
    assert message is not None


LOST = "exit status unknown"


def _stops(*payloads: dict[str, object]) -> list[EventRecord]:
    return [EventRecord("run_stop", dict(p), rank=rank) for rank, p in enumerate(payloads)]


@pytest.mark.parametrize(
    ("stops", "settled"),
    [
        # every rank stopped normally: a success, also when stopped by max_time (exit status 0)
        (_stops({"status": "success", "exit_code": 0}, {"status": "success", "exit_code": 0}), "succeeded"),
        (_stops({"status": "aborted", "exit_code": 0}, {"status": "aborted", "exit_code": 0}), "succeeded"),
        # workers without exit_code: only a success counts
        (_stops({"status": "success"}, {"status": "success"}), "succeeded"),
        (_stops({"status": "success"}, {"status": "aborted", "reason": "rank 1 interrupted"}), "failed"),
        (_stops({"status": "success", "exit_code": 0}, {"status": "aborted", "exit_code": 130}), "failed"),
        (_stops({"status": "success", "exit_code": 0}), "failed"),  # rank 1 never said
        ([], "failed"),
    ],
)
def test_a_run_whose_exit_status_was_lost_ends_as_every_rank_said(
    stops: list[EventRecord], settled: str
) -> None:
    state, message = settle_state(RunState.UNKNOWN, LOST, stops, 2)
    assert state == settled
    assert (message is None) == (settled == "succeeded")


def test_a_lost_exit_status_names_the_ranks_that_never_said_how_they_stopped() -> None:
    stops = _stops({"status": "success", "exit_code": 0})
    assert settle_state(RunState.UNKNOWN, LOST, stops, 3) == (
        RunState.FAILED,
        f"{LOST}; rank(s) 1, 2 of 3 never reported how they stopped",
    )
    failed = _stops({"status": "success", "exit_code": 0}, {"status": "failed", "reason": "rank 1 failed: x"})
    assert settle_state(RunState.UNKNOWN, LOST, failed, 2) == (RunState.FAILED, "rank 1 failed: x")


def test_the_result_reads_rank_zeros_stop() -> None:
    events = [
        EventRecord("run_start", {}, t=100.0),
        EventRecord("run_stop", {"status": "success", "reason": "goal", "graph_capture_s": 1.5}, t=150.0),
        EventRecord(
            "run_stop", {"status": "success", "reason": "goal", "graph_capture_s": 1.7}, rank=1, t=151.0
        ),
    ]
    result = summarize_run(plan(), RunState.SUCCEEDED, [], events)
    assert result.graph_capture_s == 1.5 and result.wall_time_s == 51.0


def test_a_result_reads_only_the_metrics_it_needs() -> None:
    names = ["train_loss", "step_time", "val_global_Prec@1", "val_loss", "time_train", "time_compute"]
    names += ["allreduce_fp32_busbw", "lr"]
    assert needed_metrics(names, plan().goal) == [
        "step_time",  # its median is the run's step time, compared with the machine's reference
        "val_global_Prec@1",
        "val_loss",
        "time_train",
        "time_compute",
        "allreduce_fp32_busbw",
    ]


def test_telemetry_figures_in_the_result_the_table_and_the_status_lines() -> None:
    from mlbench_worker import sysmetrics as sm

    from mlbench_tui.results.table import rank_figures_text, telemetry_lines

    events = [
        EventRecord("run_start", {}, t=100.0),
        EventRecord("goal_reached", {"value": 71.0, "train_time_s": 16.0, "val_time_s": 3.0}, t=120.0),
        EventRecord("run_stop", {"status": "success", "reason": "goal reached"}, t=121.0),
    ]
    metrics = series([50.0, 71.0])
    for rank in (0, 1):
        for t in range(95, 125):
            metrics += [
                MetricPoint(sm.GPU_ENERGY_J, 9e5 + 360.0 * t, rank=rank, t=float(t)),  # 360 W
                MetricPoint(sm.GPU_UTIL, 80.0 + 10 * rank, rank=rank, t=float(t)),
                MetricPoint(sm.GPU_READINGS, 20.0, rank=rank, t=float(t)),
                MetricPoint(sm.RSS_MIB, 1000.0 + 800 * rank, rank=rank, t=float(t)),
                MetricPoint(sm.GPU_MEM_PEAK_MIB, 12288.0, rank=rank, t=float(t)),
            ]
    metrics.append(MetricPoint(sm.MEM_LIMIT_MIB, 4096.0, rank=1, t=95.0))
    assert set(needed_metrics({p.name for p in metrics}, GOAL)) >= {sm.GPU_ENERGY_J, sm.RSS_MIB, sm.GPU_UTIL}
    result = summarize_run(plan(price_per_kwh=0.5), RunState.SUCCEEDED, metrics, events)
    hw = result.telemetry
    assert hw is not None and RunResult.model_validate_json(result.model_dump_json()) == result
    assert hw.energy_to_accuracy_j == pytest.approx(2 * 360.0 * 20) and hw.energy_source == "counter"
    assert hw.energy_cost == pytest.approx(2 * 360.0 * 20 / 3.6e6 * 0.5)
    assert (hw.peak_rss_mib, hw.peak_gpu_mem_mib, hw.mean_gpu_util) == (1800.0, 12288.0, 85.0)
    row = results_rows([result])[0]
    assert (row["PEAK MEM"], row["GPU MEM"], row["GPU UTIL"]) == ("1.76 GiB", "12.0 GiB", "85%")
    assert (row["ENERGY TO ACC"], row["ENERGY COST"]) == ("14.4 kJ", "0.00200 USD")
    lines = dict(telemetry_lines(hw))
    assert lines["gpu util"] == "85% mean over ranks while the run was timed"  # the table's figure
    assert lines["memory"] == "peak 1.76 GiB resident (rank 1 of 2, limit 4.00 GiB)"
    assert (
        lines["energy"] == "14.4 kJ to accuracy (all GPUs, NVML energy counter), 0.00200 USD at 0.500 USD/kWh"
    )
    assert rank_figures_text(hw.ranks[1]) == "rss 1.76 GiB/4.00 GiB  gpu mem 12.0 GiB  util 90%  7.56 kJ"
    in_euros = summarize_run(plan(price_per_kwh=0.5, currency="EUR"), RunState.SUCCEEDED, metrics, events)
    assert in_euros.currency == "EUR" and results_rows([in_euros])[0]["ENERGY COST"] == "0.00200 EUR"
    assert dict(telemetry_lines(hw, "EUR"))["energy"].endswith("0.00200 EUR at 0.500 EUR/kWh")
    plain = summarize_run(plan(), RunState.SUCCEEDED, series([50.0, 71.0]), events)
    assert plain.telemetry is None and results_rows([plain])[0]["ENERGY TO ACC"] == "-"
    # a table of runs without telemetry leaves its columns out; one GPU run among them brings them back
    header = render_results([plain]).splitlines()[0]
    assert "TIME TO ACC" in header and "MEM" not in header and "GPU" not in header and "ENERGY" not in header
    mixed = render_results([plain, result]).splitlines()
    assert "ENERGY TO ACC" in mixed[0] and "14.4 kJ" in mixed[2]
