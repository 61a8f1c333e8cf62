"""MLPerf power logs from a run's GPU power samples, read back by MLCommons' own parser and
integrated by its result summarizer to the energy our results report."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlbench_worker import sysmetrics as sm

from mlbench_tui.results.power_log import power_logs
from mlbench_tui.results.telemetry import power_energy
from mlbench_tui.results.time_to_accuracy import EventRecord, MetricPoint

pytest.importorskip("mlperf_logging")

EVENTS = [EventRecord("run_start", {}, 0, 100.0), EventRecord("run_stop", {"status": "success"}, 0, 110.0)]


def _power(rank: int, watts: list[tuple[float, float]]) -> list[MetricPoint]:
    return [MetricPoint(sm.GPU_POWER_W, w, rank=rank, t=t) for t, w in watts]


def test_one_log_per_gpu_rank_with_mlperfs_keys_in_the_timed_window(tmp_path: Path) -> None:
    from mlperf_logging.compliance_checker.mlp_parser import parse_file

    samples = [(98.0, 40.0)] + [(100.0 + i, 200.0) for i in range(11)] + [(112.0, 40.0)]
    metrics = _power(0, samples) + _power(1, samples) + [MetricPoint(sm.RSS_MIB, 300.0, rank=2, t=105.0)]
    logs = power_logs(metrics, EVENTS)
    assert list(logs) == ["power/node_0.txt", "power/node_1.txt"]  # rank 2 reported no GPU power
    path = tmp_path / "node_1.txt"
    path.write_text("\n".join(logs["power/node_1.txt"]) + "\n")
    lines, errors = parse_file(str(path), "6.1.0")
    assert not errors
    keys = [line.key for line in lines]
    assert keys[:2] == ["power_measurement_start", "conversion_eff"] and keys[-1] == "power_measurement_stop"
    readings = [line for line in lines if line.key == "power_reading"]
    assert len(readings) == 11 and {r.value["value"] for r in readings} == {200.0}
    assert {r.value["metadata"]["host"] for r in readings} == {"node_1"}


def test_mlcommons_summarizer_integrates_the_energy_we_report(tmp_path: Path) -> None:
    from mlperf_logging.compliance_checker.mlp_parser import parse_file
    from mlperf_logging.result_summarizer.result_summarizer import _compute_power_node

    samples = [(100.0 + i, 150.0 if i < 5 else 300.0) for i in range(11)]
    (lines,) = power_logs(_power(0, samples), EVENTS).values()
    path = tmp_path / "node_0.txt"
    path.write_text("\n".join(lines) + "\n")
    parsed, _ = parse_file(str(path), "6.1.0")
    duration_ms = 10_000
    theirs = _compute_power_node(parsed, duration_ms)  # joules: sum of reading x interval
    ours = power_energy(samples, 100.0, 110.0)
    assert ours is not None
    # MLPerf integrates rectangles (each reading over the interval before it), we trapezoids:
    # one step of 150 W between the two
    assert theirs == pytest.approx(5 * 150 + 5 * 300 + 150) and ours == pytest.approx(theirs - 150 / 2)


def test_no_timed_run_or_no_power_means_no_logs() -> None:
    assert power_logs(_power(0, [(100.0, 1.0), (101.0, 1.0)]), EVENTS[:1]) == {}
    assert power_logs([MetricPoint(sm.RSS_MIB, 1.0, t=105.0)], EVENTS) == {}
