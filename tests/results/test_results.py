"""Results are pure functions over reported metrics and events: time to accuracy, scores, export."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from mlbench_tui.results.export import LogRecord, metrics_csv, write_export
from mlbench_tui.results.report import render_results, results_rows, summarize_run
from mlbench_tui.results.scoring import cost_to_target, olympic_mean, score_configs
from mlbench_tui.results.time_to_accuracy import (
    EventRecord,
    MetricPoint,
    allreduce_summary,
    goal_outcome,
    time_split,
)

GOAL = {"kind": "light", "metric": "val_global_Prec@1", "target": 70.0, "direction": "max"}


def _series(values: list[float], *, rank: int = 0) -> list[MetricPoint]:
    points = []
    for epoch, value in enumerate(values, start=1):
        t = 100.0 + 10 * epoch
        points.append(MetricPoint("val_global_Prec@1", value, rank=rank, step=epoch * 50, epoch=epoch, t=t))
        points.append(MetricPoint("time_train", 8.0 * epoch, rank=rank, epoch=epoch, t=t))
        points.append(MetricPoint("time_validation", 1.5 * epoch, rank=rank, epoch=epoch, t=t))
    return points


def _plan(**extra: object) -> dict[str, object]:
    plan: dict[str, object] = {
        "name": "qs-gloo-2w",
        "spec_name": "qs",
        "spec_hash": "abc",
        "task": "1a",
        "task_name": "resnet20-cifar10",
        "backend": "gloo",
        "workers": 2,
        "goal": GOAL,
        "seed": 1,
        "hyperparameters": {"batch_size": 32, "lr": 0.04},
        "target": {"kind": "local"},
    }
    plan.update(extra)
    return plan


def test_time_to_accuracy_uses_train_time_at_first_epoch_meeting_the_goal() -> None:
    outcome = goal_outcome(GOAL, _series([40.0, 65.0, 71.0, 75.0]), [])
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
    outcome = goal_outcome(GOAL, _series([40.0, 72.0]), [event])
    assert outcome is not None
    assert (outcome.epochs, outcome.steps, outcome.train_time_s, outcome.val_time_s) == (2, 99, 17.5, 2.0)


def test_min_direction_goal_and_not_reached() -> None:
    goal = {"metric": "val_global_Perplexity", "target": 90.0, "direction": "min"}
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
    assert split["compute"] == 7.0 and split["communication"] == 3.0 and split["preprocess"] == 1.0
    assert split["communication_fraction"] == pytest.approx(3.0 / 11.0)
    assert time_split([]) is None


def test_olympic_mean_drops_fastest_and_slowest() -> None:
    assert olympic_mean([10.0, 100.0, 20.0, 30.0, 1.0]) == pytest.approx(20.0)
    assert olympic_mean([3.0, 5.0]) == 4.0
    with pytest.raises(ValueError):
        olympic_mean([])


def test_speedup_and_efficiency_versus_one_worker_and_repeats() -> None:
    rows = [
        {"spec_name": "s", "backend": "gloo", "workers": 1, "reached": True, "time_to_accuracy_s": t}
        for t in (100.0, 90.0, 300.0)
    ] + [
        {"spec_name": "s", "backend": "gloo", "workers": 2, "reached": True, "time_to_accuracy_s": 60.0},
        {"spec_name": "s", "backend": "gloo", "workers": 2, "reached": False, "time_to_accuracy_s": None},
    ]
    scores = {s.workers: s for s in score_configs(rows)}
    assert scores[1].time_to_accuracy_s == 100.0  # 90 and 300 dropped
    assert scores[2].runs == 2 and scores[2].reached == 1
    assert scores[2].speedup == pytest.approx(100.0 / 60.0)
    assert scores[2].efficiency == pytest.approx(100.0 / 60.0 / 2)
    assert scores[1].speedup == pytest.approx(1.0)


def test_frameworks_of_one_spec_are_scored_apart_and_named_in_the_table() -> None:
    rows = [
        {
            "name": f"s-{tag}-gloo-{w}w",
            "spec_name": "s",
            "framework": fw,
            "backend": "gloo",
            "workers": w,
            "state": "succeeded",
            "reached": True,
            "time_to_accuracy_s": t,
        }
        for tag, fw, w, t in (
            ("pt", "pytorch", 1, 100.0),
            ("pt", "pytorch", 2, 50.0),
            ("tf", "tensorflow", 1, 300.0),
            ("tf", "tensorflow", 2, 200.0),
        )
    ]
    scores = {(s.framework, s.workers): s for s in score_configs(rows)}
    assert scores["pytorch", 2].speedup == pytest.approx(2.0)  # against PyTorch's own 1-worker run
    assert scores["tensorflow", 2].speedup == pytest.approx(1.5)
    table = render_results(rows)
    assert table.splitlines()[0].split()[:2] == ["RUN", "FRAMEWORK"]
    assert "s-tf-gloo-2w  tensorflow" in table
    # one framework: no FRAMEWORK column
    assert "FRAMEWORK" not in render_results(rows[:2])


def test_cost_to_target() -> None:
    assert cost_to_target(1800.0, 2.0) == pytest.approx(1.0)
    assert cost_to_target(1800.0, None) is None


def test_summary_table_and_fingerprint_from_environment_event() -> None:
    events = [
        EventRecord("run_start", {}, t=100.0),
        EventRecord("environment", {"torch": "9.9", "cpu_model": "TestCPU", "threads": 1}, t=100.5),
        EventRecord("run_stop", {"status": "success", "reason": "goal reached"}, t=150.0),
    ]
    summary = summarize_run(
        _plan(price_per_hour=3.6),
        "succeeded",
        _series([50.0, 71.0]),
        events,
        host={"python": "3.11", "torch": "host"},
    )
    assert summary["reached"] is True and summary["time_to_accuracy_s"] == 16.0
    assert summary["wall_time_s"] == 50.0
    assert summary["fingerprint"] == {"python": "3.11", "torch": "9.9", "cpu_model": "TestCPU", "threads": 1}
    assert summary["cost_to_target"] == pytest.approx((16.0 + 3.0) / 3600 * 3.6)
    json.dumps(summary)  # stored as JSON
    row = results_rows([summary])[0]
    assert row["REACHED"] == "yes" and row["TIME TO ACC"] == "16.0s" and "Prec@1 71" in row["RESULT"]
    assert "qs-gloo-2w" in render_results([summary])


def test_allreduce_summary_peak_bus_bandwidth() -> None:
    points = [
        MetricPoint("allreduce_fp32_busbw", 0.1, step=1),
        MetricPoint("allreduce_fp32_busbw", 1.5, step=1000),
        MetricPoint("allreduce_fp32_latency_p50", 5e-4, step=1),
        MetricPoint("allreduce_fp32_latency_p50", 9e-4, step=1000),
        MetricPoint("allreduce_fp32_busbw", 99.0, step=5, rank=1),
    ]
    summary = allreduce_summary(points)
    assert summary == {
        "fp32": {"sizes": 2, "peak_busbw_gbps": 1.5, "peak_busbw_size": 1000, "min_size_latency_p50_s": 5e-4}
    }
    table = render_results([summarize_run(_plan(goal=None, task="0a"), "succeeded", points, [])])
    assert "fp32 peak 1.5 GB/s" in table


def test_one_rank_allreduce_has_latency_only_with_a_note() -> None:
    # what a one-rank sweep reported before it stopped reporting bandwidth: must not be shown
    points = [
        MetricPoint("allreduce_fp32_latency_p50", 2e-5, step=1),
        MetricPoint("allreduce_fp32_latency_p50", 3e-5, step=10**8),
        MetricPoint("allreduce_fp32_busbw", 9021.0, step=10**8),
    ]
    summary = summarize_run(_plan(goal=None, task="0a", workers=1), "succeeded", points, [])
    (entry,) = summary["allreduce"].values()
    assert "peak_busbw_gbps" not in entry and entry["min_size_latency_p50_s"] == 2e-5
    assert entry["latency_only"] is True and "moves no data" in entry["note"]
    table = render_results([summary])
    assert (
        "fp32 latency 20 us (1 rank: no bandwidth)" in table
        and "9021" not in table
        and "9.02e+03" not in table
    )
    sweep = EventRecord("allreduce_sweep", {"latency_only": True, "world_size": 1})
    assert allreduce_summary(points[:2], [sweep])["fp32"]["latency_only"]  # the worker's word suffices


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
    summary = summarize_run(_plan(goal=None, task="0a", workers=2), "succeeded", points, [sweep])
    fp32, fp16 = summary["allreduce"]["fp32"], summary["allreduce"]["fp16"]
    assert fp32["above_ceiling"] == 1 and fp32["busbw_ceiling_gbps"] == 3352.3
    assert "1 size(s) above the 3,352 GB/s ceiling (the GPU's peak memory bandwidth)" in fp32["note"]
    assert "above_ceiling" not in fp16 and "note" not in fp16
    table = render_results([summary])
    assert "fp32 peak 9.02e+03 GB/s (! above the 3,352 GB/s ceiling)" in table
    assert "fp16 peak 380 GB/s" in table


def test_export_zip_has_everything(tmp_path: Path) -> None:
    metrics = _series([50.0, 71.0])
    events = [
        EventRecord("run_start", {}, t=100.0),
        EventRecord("epoch_end", {"epoch": 1}, t=110.0),
        EventRecord("run_stop", {"status": "success", "reason": "goal"}, t=150.0),
    ]
    summary = summarize_run(_plan(), "succeeded", metrics, events)
    run = {
        "id": "r-000000000001",
        "name": "qs-gloo-2w",
        "spec_text": "apiVersion: mlbench/v1\n",
        "plan": _plan(),
        "state": "succeeded",
        "backend": "gloo",
        "workers": 2,
    }
    out = write_export(
        tmp_path / "run.zip",
        run,
        summary,
        metrics,
        events,
        [LogRecord(0, "hello"), LogRecord(1, "Traceback", "stderr")],
        mllog=[":::MLLOG {}", ":::MLLOG {}"],
    )
    with zipfile.ZipFile(out) as archive:
        names = set(archive.namelist())
        assert {
            "spec.yaml",
            "plan.json",
            "metrics.csv",
            "metrics.json",
            "events.json",
            "official_result.json",
            "mllog.txt",
            "mllog_rules/common.yaml",
            "mllog_rules/closed_resnet20-cifar10.yaml",
            "logs/rank-0.log",
            "logs/rank-1.log",
        } <= names
        official = json.loads(archive.read("official_result.json"))
        assert official["time_to_accuracy_s"] == 16.0 and official["reached"] is True
        assert archive.read("mllog.txt").decode() == ":::MLLOG {}\n:::MLLOG {}\n"
        assert archive.read("logs/rank-1.log").decode() == "[stderr] Traceback\n"
    assert metrics_csv(metrics).splitlines()[0] == "rank,name,step,epoch,t,value"
    without = write_export(tmp_path / "bare.zip", run, summary, metrics, events, [])
    with zipfile.ZipFile(without) as archive:  # no MLPerf log (mlperf-logging missing): no ruleset either
        assert not any(n.startswith("mllog") for n in archive.namelist())
