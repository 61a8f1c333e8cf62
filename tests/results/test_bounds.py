"""Figures bounded by physics: each bound a figure can fail, the reason it is given, and a run
with a suspect figure kept out of the closed division."""

from __future__ import annotations

from mlbench_tui.lifecycle import RunState
from mlbench_tui.results.bounds import nvls_note, suspects
from mlbench_tui.results.model import (
    AllreduceFigures,
    RankTelemetryFigures,
    RunResult,
    TelemetryFigures,
    TimeSplit,
)
from mlbench_tui.results.time_to_accuracy import MetricPoint

H200 = {"gpu_model": "NVIDIA H200"}


def result(**fields: object) -> RunResult:
    base: dict[str, object] = {"name": "r", "task": "1a", "backend": "nccl", "state": RunState.SUCCEEDED}
    return RunResult.model_validate(base | fields)


def test_a_plain_run_has_nothing_suspect() -> None:
    ok = result(
        fingerprint=H200,
        batch_size=128,
        step_time_s=0.0098,
        time_split=TimeSplit(compute=8.0, communication=1.0, preprocess=0.5),
        telemetry=TelemetryFigures(mean_gpu_util=60.0, ranks=[RankTelemetryFigures(rank=0, energy_j=1500.0)]),
    )
    metrics = [
        MetricPoint("time_train", 10.0, 0, 100),
        *(MetricPoint("sys/gpu_power_w", 140.0, 0, None, None, t) for t in (0.0, 10.0)),
    ]
    assert suspects(ok, metrics) == []


def test_bus_bandwidth_above_the_link_ceiling() -> None:
    figures = AllreduceFigures(sizes=10, peak_busbw_gbps=9021.0, busbw_ceiling_gbps=3000.0, above_ceiling=4)
    (found,) = suspects(result(task="0a", allreduce={"fp32": figures}), [])
    assert found.figure == "bus bandwidth (fp32)"
    assert (
        found.reason == "4 size(s) above the 3,000 GB/s ceiling of the device's links: timing, not transfer"
    )


def test_images_per_second_above_the_whole_step_graph_ceiling() -> None:
    """The H200's whole step in one CUDA graph takes 2.16 ms at batch 128 (59,259 images/s): a
    run claiming 1.5 ms a step is not believable; one at 3 ms is."""
    (found,) = suspects(result(fingerprint=H200, batch_size=128, step_time_s=0.0015), [])
    assert found.figure == "images/s" and found.reason.startswith("85,333 per rank, above the 59,259")
    assert suspects(result(fingerprint=H200, batch_size=128, step_time_s=0.003), []) == []
    assert suspects(result(fingerprint=H200, batch_size=64, step_time_s=0.0015), []) == []  # no floor at 64


def test_energy_below_the_run_s_own_lowest_power_over_its_readings() -> None:
    telemetry = TelemetryFigures(ranks=[RankTelemetryFigures(rank=0, energy_j=50.0)])
    power = [MetricPoint("sys/gpu_power_w", 140.0, 0, None, None, t) for t in (0.0, 1.0, 2.0)]
    (found,) = suspects(result(telemetry=telemetry, wall_time_s=3.0), power)
    assert found.figure == "GPU energy (rank 0)"
    assert found.reason == (
        "50 J is less than its lowest power reading (140 W) over the 2.00 s its readings span"
    )
    enough = TelemetryFigures(ranks=[RankTelemetryFigures(rank=0, energy_j=290.0)])
    assert suspects(result(telemetry=enough, wall_time_s=3.0), power) == []


def test_utilisation_outside_0_to_100() -> None:
    telemetry = TelemetryFigures(
        mean_gpu_util=104.0, ranks=[RankTelemetryFigures(rank=1, mean_gpu_util=-1.0)]
    )
    found = suspects(result(telemetry=telemetry), [])
    assert [(s.figure, s.reason) for s in found] == [
        ("GPU utilisation (run)", "104.0% is outside 0-100%"),
        ("GPU utilisation (rank 1)", "-1.0% is outside 0-100%"),
    ]


def test_phases_that_add_up_to_more_than_the_training_they_split() -> None:
    split = TimeSplit(compute=9.0, communication=2.0, preprocess=1.0)
    train = [MetricPoint("time_train", 10.0, rank, 50) for rank in (0, 1)]
    (found,) = suspects(result(time_split=split), train)
    assert found.reason == "the phases add up to 12.0 s, more than the 10.0 s of training they split"
    assert suspects(result(time_split=TimeSplit(compute=9.0, communication=1.4)), train) == []  # within 5%


def test_multi_rank_nccl_bandwidth_on_nvswitch_gpus_is_labelled() -> None:
    assert nvls_note(result(task="0a", workers=8, fingerprint=H200)) is not None
    assert nvls_note(result(task="0a", workers=1, fingerprint=H200)) is None
    assert nvls_note(result(task="0a", workers=8, backend="gloo", fingerprint=H200)) is None
