"""How much of the machine a training step uses, where that means something.

A run's ranks count their model FLOPs per step once (``model_flops_per_step``: torch's FLOP
counter over the first step: matrix products and convolutions). Over the run's step time that is
the achieved rate per rank, set against the machine's measured GEMM peak: the run's own pre-flight
probe where it ran one, else its machine's reference row (``gemm_tflops``). For small models the
ratio is no headline: a ResNet-20 step on a GPU is bound by its kernel launches, well under 2% of
the GEMM rate even at its one-graph floor; there the step time against the one-graph floor (the
reference table's ``step_floor_ms``, where it was measured) says more, and both are shown.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from mlbench_worker import wire

from mlbench_tui.formatting import format_number, format_step
from mlbench_tui.results.model import FlopFigures, RunResult
from mlbench_tui.results.reference_figures import GEMM, STEP_FLOOR
from mlbench_tui.results.time_to_accuracy import MetricPoint
from mlbench_tui.spec.reference_table import ReferenceRow

SMALL_MODEL = 0.02
"""Below this share of the GEMM peak a step is bound by something else (launches, the host)."""


def model_flops(metrics: Iterable[MetricPoint]) -> float | None:
    """One rank's model FLOPs per step (the lowest rank that counted them)."""
    counted = sorted((p.rank, p.value) for p in metrics if p.name == wire.MODEL_FLOPS and p.value > 0)
    return counted[0][1] if counted else None


def flop_figures(
    result: RunResult, flops: float | None, machine: str | None, rows: Sequence[ReferenceRow]
) -> FlopFigures | None:
    """The run's achieved rate against its GEMM peak and its step against the one-graph floor
    (None without a step time, or with neither a FLOP count nor a floor)."""
    step_s = result.step_time_s
    if step_s is None or step_s <= 0:
        return None
    floor = _row(rows, machine, result, STEP_FLOOR)
    figures = FlopFigures(flops_per_step=flops)
    if flops is not None:
        figures.achieved_tflops = flops / step_s / 1e12
        probe = result.preflight.gemm_tflops if result.preflight is not None else None
        row = _row(rows, machine, result, GEMM, any_task=True)
        if probe is not None:
            figures.peak_tflops, figures.peak_source = probe, "this run's pre-flight GEMM probe"
        elif row is not None:
            figures.peak_tflops, figures.peak_source = row.value, f"{row.machine} reference ({row.source})"
        if figures.peak_tflops:
            figures.of_peak = figures.achieved_tflops / figures.peak_tflops
            figures.small_model = figures.of_peak < SMALL_MODEL
    if floor is not None:
        figures.floor_ms = floor.value
        figures.of_floor = floor.value / (step_s * 1000)
    if flops is None and floor is None:
        return None
    return figures


def _row(
    rows: Sequence[ReferenceRow],
    machine: str | None,
    result: RunResult,
    figure: str,
    *,
    any_task: bool = False,
) -> ReferenceRow | None:
    """The machine's row of ``figure`` in the run's precision (and task and batch, unless
    ``any_task``: a GEMM rate belongs to the machine)."""
    for row in rows:
        if row.machine != machine or row.figure != figure or row.precision != (result.precision or "fp32"):
            continue
        if any_task or (row.task == result.task and row.batch == result.batch_size):
            return row
    return None


def flops_text(figures: FlopFigures) -> str:
    """``1.95 GFLOP/step per rank, 0.210 TFLOP/s achieved, 0.4% of the 52.1 TFLOP/s GEMM peak
    (this run's pre-flight GEMM probe; a small model: the ratio to the one-graph floor says more);
    one-graph floor 2.16 ms, 0.23x of it``"""
    parts = []
    if figures.flops_per_step is not None:
        parts.append(f"{format_number(figures.flops_per_step / 1e9)} GFLOP/step per rank")
    if figures.achieved_tflops is not None:
        parts.append(f"{format_number(figures.achieved_tflops)} TFLOP/s achieved")
    if figures.of_peak is not None and figures.peak_tflops is not None:
        peak = format_number(figures.peak_tflops)
        why = "; a small model: launches bound its step, not the GEMM rate" if figures.small_model else ""
        parts.append(f"{figures.of_peak:.1%} of the {peak} TFLOP/s GEMM peak ({figures.peak_source}{why})")
    if figures.floor_ms is not None and figures.of_floor is not None:
        floor = format_step(figures.floor_ms / 1000)
        parts.append(f"one-graph floor {floor}: this step runs at {figures.of_floor:.2f}x its speed")
    return ", ".join(parts)
