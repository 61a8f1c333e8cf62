"""``mlbench export``'s archive: everything to check a result without the store."""

from __future__ import annotations

import json
import zipfile
from datetime import UTC, datetime
from pathlib import Path

import pytest
from mlbench_worker import sysmetrics as sm
from support.results import plan, series

from mlbench_tui.lifecycle import RunState
from mlbench_tui.results.power_log import power_logs
from mlbench_tui.results.summary import summarize_run
from mlbench_tui.results.time_to_accuracy import EventRecord, MetricPoint
from mlbench_tui.runs.export import LogRecord, metrics_csv, write_export
from mlbench_tui.store.api_models import RunDetail


def test_export_zip_has_everything(tmp_path: Path) -> None:
    metrics = series([50.0, 71.0])
    events = [
        EventRecord("run_start", {}, t=100.0),
        EventRecord("epoch_end", {"epoch": 1}, t=110.0),
        EventRecord("run_stop", {"status": "success", "reason": "goal"}, t=150.0),
    ]
    the_plan = plan()
    run = RunDetail(
        id="r-000000000001",
        name="qs-gloo-2w",
        spec_name="qs",
        spec_hash="abc",
        task="1a",
        backend="gloo",
        workers=2,
        repeat=0,
        goal=the_plan.goal,
        state=RunState.SUCCEEDED,
        target_kind="local",
        created=datetime(2026, 1, 1, tzinfo=UTC),
        result=summarize_run(the_plan, RunState.SUCCEEDED, metrics, events),
        spec_text="apiVersion: mlbench/v1\n",
        plan=the_plan.model_dump(mode="json"),
    )
    out = write_export(
        tmp_path / "run.zip",
        run,
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
        assert official["run_id"] == "r-000000000001" and official["state"] == "succeeded"
        assert official["hyperparameters"] == {"batch_size": 32, "lr": 0.04}
        assert archive.read("mllog.txt").decode() == ":::MLLOG {}\n:::MLLOG {}\n"
        assert archive.read("logs/rank-1.log").decode() == "[stderr] Traceback\n"
        assert "spec_text" not in json.loads(archive.read("run.json"))
    assert metrics_csv(metrics).splitlines()[0] == "rank,name,step,epoch,t,value"
    without = write_export(tmp_path / "bare.zip", run, metrics, events, [])
    with zipfile.ZipFile(without) as archive:  # no MLPerf log (mlperf-logging missing): no ruleset either
        assert not any(n.startswith("mllog") for n in archive.namelist())


def test_export_publishes_the_hardware_figures_and_mlperf_power_logs(tmp_path: Path) -> None:
    pytest.importorskip("mlperf_logging")
    events = [
        EventRecord("run_start", {}, t=100.0),
        EventRecord("goal_reached", {"value": 71.0}, t=140.0),
        EventRecord("run_stop", {"status": "success", "reason": "goal"}, t=150.0),
    ]
    metrics = series([50.0, 71.0]) + [
        MetricPoint(name, value, rank=rank, t=float(t))
        for rank in (0, 1)
        for t in range(100, 151, 5)
        for name, value in ((sm.GPU_POWER_W, 250.0), (sm.RSS_MIB, 900.0))
    ]
    the_plan = plan(price_per_kwh=0.2)
    result = summarize_run(the_plan, RunState.SUCCEEDED, metrics, events)
    run = RunDetail(
        id="r-000000000002", name="qs-gloo-2w", spec_name="qs", spec_hash="abc", task="1a",
        backend="gloo", workers=2, repeat=0, goal=the_plan.goal, state=RunState.SUCCEEDED,
        target_kind="local", created=datetime(2026, 1, 1, tzinfo=UTC), result=result,
        plan=the_plan.model_dump(mode="json"),
    )  # fmt: skip
    power = power_logs(metrics, events)
    out = write_export(tmp_path / "run.zip", run, metrics, events, [], power=power)
    with zipfile.ZipFile(out) as archive:
        assert {"power/node_0.txt", "power/node_1.txt"} <= set(archive.namelist())
        assert "power_reading" in archive.read("power/node_1.txt").decode()
        telemetry = json.loads(archive.read("official_result.json"))["telemetry"]
    # no energy counter: 250 W integrated over run_start..goal on each of the two GPUs
    assert telemetry["energy_to_accuracy_j"] == pytest.approx(2 * 250.0 * 40)
    assert telemetry["energy_source"] == "power" and telemetry["peak_rss_mib"] == 900.0
    assert telemetry["energy_cost"] == pytest.approx(2 * 250.0 * 40 / 3.6e6 * 0.2)
    assert [r["rank"] for r in telemetry["ranks"]] == [0, 1]
