"""Figures bounded by physics: each figure of a run checked against what the machine can do.

A bus bandwidth above the link's ceiling, images per second above the device's whole-step
CUDA-graph ceiling (the reference table's floor step time), GPU energy below what the lowest
power the run itself read draws over the run, utilisation outside 0-100%, or phases that add up
to more than the training time: each is a ``Suspect`` with the reason, kept with the result and
shown wherever the figure is; a run with one is never exported as MLPerf's closed division.
Pure functions over a result and its metrics.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from mlbench_worker import sysmetrics as sm
from mlbench_worker import wire

from mlbench_tui.formatting import format_duration
from mlbench_tui.results.model import RunResult, Suspect
from mlbench_tui.results.reference import ReferenceRow, machine_class, table
from mlbench_tui.results.time_to_accuracy import MetricPoint, last_per_rank

FLOOR = "step_floor_ms"
"""Reference rows of the whole training step in one CUDA graph: the device's fastest step."""
PHASE_SLACK = 1.05
"""The tracker times a random sample of micro-steps and scales its totals: 5% of slack."""
ENERGY_SLACK = 0.8
"""NVML's power readings are averages over their own windows, not instants: 20% of slack."""
NVLS_GPUS = ("H100", "H200")
"""GPUs whose NVSwitch systems reduce in the switch (NVLink SHARP) by default for NCCL."""


def suspects(
    result: RunResult, metrics: Iterable[MetricPoint], rows: Sequence[ReferenceRow] | None = None
) -> list[Suspect]:
    """Every figure of ``result`` (with its ``metrics``) that fails a bound."""
    metrics = list(metrics)
    found = [*_busbw(result), *_utilisation(result), *_phases(result, metrics)]
    found += _images_per_second(result, table() if rows is None else rows)
    found += _energy(result, metrics)
    return found


def nvls_note(result: RunResult) -> str | None:
    """What a multi-rank NCCL bus bandwidth on an NVSwitch GPU is: with NVLink SHARP the
    reduction happens in the switch, and nccl-tests' docs say busbw then no longer reflects a
    real bandwidth."""
    if result.backend != "nccl" or result.workers < 2 or machine_class(result) not in NVLS_GPUS:
        return None
    return "NCCL may reduce in the NVLink switch (NVLS, SHARP): busbw then is not a link's bandwidth"


def _busbw(result: RunResult) -> list[Suspect]:
    return [
        Suspect(
            figure=f"bus bandwidth ({dtype})",
            reason=(
                f"{figures.above_ceiling} size(s) above the {figures.busbw_ceiling_gbps:,.0f} GB/s "
                "ceiling of the device's links: timing, not transfer"
            ),
        )
        for dtype, figures in (result.allreduce or {}).items()
        if figures.above_ceiling and figures.busbw_ceiling_gbps is not None
    ]


def _utilisation(result: RunResult) -> list[Suspect]:
    if result.telemetry is None:
        return []
    values = [("run", result.telemetry.mean_gpu_util)]
    values += [(f"rank {r.rank}", r.mean_gpu_util) for r in result.telemetry.ranks]
    return [
        Suspect(figure=f"GPU utilisation ({who})", reason=f"{value:.1f}% is outside 0-100%")
        for who, value in values
        if value is not None and not 0.0 <= value <= 100.0
    ]


def _phases(result: RunResult, metrics: list[MetricPoint]) -> list[Suspect]:
    split = result.time_split
    train = last_per_rank(metrics, wire.TIME_TRAIN)
    if split is None or not train:
        return []
    phases = split.compute + split.communication + split.preprocess + split.metrics
    wall = sum(train.values()) / len(train)
    if wall <= 0 or phases <= wall * PHASE_SLACK:
        return []
    return [
        Suspect(
            figure="time split",
            reason=(
                f"the phases add up to {format_duration(phases)}, more than the {format_duration(wall)} "
                "of training they split"
            ),
        )
    ]


def _images_per_second(result: RunResult, rows: Sequence[ReferenceRow]) -> list[Suspect]:
    machine = machine_class(result)
    if result.step_time_s is None or result.batch_size is None or result.step_time_s <= 0:
        return []
    floors = [
        r
        for r in rows
        if r.figure == FLOOR
        and r.machine == machine
        and r.task == result.task
        and r.batch == result.batch_size
    ]
    if not floors:
        return []
    floor = min(floors, key=lambda r: r.value)
    ceiling = floor.batch / (floor.value / 1000) if floor.batch else None
    rate = result.batch_size / result.step_time_s
    if ceiling is None or rate <= ceiling:
        return []
    return [
        Suspect(
            figure="images/s",
            reason=(
                f"{rate:,.0f} per rank, above the {ceiling:,.0f} of the whole step in one CUDA graph on "
                f"a {machine} ({floor.value:g} ms, {floor.precision}, {floor.source} {floor.measured})"
            ),
        )
    ]


def _energy(result: RunResult, metrics: list[MetricPoint]) -> list[Suspect]:
    """GPU energy below the rank's own lowest power reading held over the span of its readings
    (the energy covers at least that span)."""
    telemetry = result.telemetry
    if telemetry is None:
        return []
    readings: dict[int, list[tuple[float, float]]] = {}
    for point in metrics:
        if point.name == sm.GPU_POWER_W and point.t is not None and point.value >= 0:
            readings.setdefault(point.rank, []).append((point.t, point.value))
    found = []
    for rank in telemetry.ranks:
        samples = readings.get(rank.rank, [])
        if rank.energy_j is None or len(samples) < 2:
            continue
        span = max(t for t, _ in samples) - min(t for t, _ in samples)
        if result.wall_time_s is not None:
            span = min(span, result.wall_time_s)
        power = min(value for _, value in samples)
        if rank.energy_j < power * span * ENERGY_SLACK:
            found.append(
                Suspect(
                    figure=f"GPU energy (rank {rank.rank})",
                    reason=(
                        f"{rank.energy_j:,.0f} J is less than its lowest power reading ({power:.0f} W) "
                        f"over the {format_duration(span)} its readings span"
                    ),
                )
            )
    return found
