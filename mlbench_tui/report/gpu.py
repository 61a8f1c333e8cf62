"""GPU figures of a run from its ``sys/`` telemetry: utilisation, memory and power against time
since training started, and a power/energy figure with the energy to the goal marked.

Telemetry is sampled on a clock, not per step, so these panels plot against time: seconds since
the run's ``run_start`` (negative while the ranks start up), with training's start and the goal
drawn as vertical lines. Energy comes from the GPU's energy counter where there is one, else from
the integrated power draw, the same way ``results.telemetry`` computes a result's energy.
"""

from __future__ import annotations

from collections.abc import Sequence

from mlbench_worker import sysmetrics as sm

from mlbench_tui.formatting import format_energy
from mlbench_tui.report.figure import (
    GOAL_COLOUR,
    REFERENCE_COLOUR,
    SPARE_COLOURS,
    Figure,
    LineStyle,
    Mark,
    Panel,
    RefLine,
    Series,
)
from mlbench_tui.report.inputs import RunRecord
from mlbench_tui.results.telemetry import rank_energy
from mlbench_tui.results.time_to_accuracy import MetricPoint

MIB_PER_GIB = 1024.0
MAX_RANKS = 8  # more ranks than this: the first eight are drawn and the figure says so
TIME_LABEL = "time since training started (s)"
SAMPLE_LABEL = "time since the first GPU sample (s)"  # a run that never started training
GPU_SERIES = (sm.GPU_UTIL, sm.GPU_MEM_USED_MIB, sm.GPU_MEM_PEAK_MIB, sm.GPU_POWER_W, sm.GPU_ENERGY_J)
ENERGY_CAPTION = (
    "Power draw of each rank's GPU against time since training started (negative: the ranks "
    "starting up), and the energy the GPUs used from training's start. Energy is read from the "
    "GPU's energy counter (NVML) where it has one, else integrated from the power samples. Energy "
    "to the goal runs from training's start to the goal being reached, validation included, summed "
    "over ranks."
)


def has_gpu_telemetry(record: RunRecord) -> bool:
    """Whether the run recorded any GPU telemetry series."""
    return any(record.metrics.get(name) for name in GPU_SERIES)


def _zero(record: RunRecord) -> float | None:
    """Training's start (unix seconds), else the first telemetry sample's time."""
    if record.clock.start is not None:
        return record.clock.start
    times = [p.t for name in GPU_SERIES for p in record.metrics.get(name, ()) if p.t is not None]
    return min(times, default=None)


def _samples(points: Sequence[MetricPoint]) -> list[tuple[float, float]]:
    return sorted((p.t, p.value) for p in points if p.t is not None)


def _ranks(record: RunRecord, name: str) -> list[int]:
    return record.ranks(name)[:MAX_RANKS]


def _label(words: str, rank: int, ranks: int) -> str:
    return words if ranks == 1 else f"{words}, rank {rank}"


def _time_label(record: RunRecord) -> str:
    return TIME_LABEL if record.clock.start is not None else SAMPLE_LABEL


def _moments(record: RunRecord, zero: float) -> tuple[RefLine, ...]:
    """Vertical lines where training started and where the goal was reached."""
    lines = (
        [RefLine("training starts", colour=REFERENCE_COLOUR, style=":", x=0.0)] if record.clock.start else []
    )
    if record.clock.goal is not None:
        lines.append(RefLine("goal reached", colour=GOAL_COLOUR, style=":", x=record.clock.goal - zero))
    return tuple(lines)


def _time_series(
    record: RunRecord, name: str, words: str, zero: float, scale: float = 1.0, style: LineStyle = "-"
) -> list[Series]:
    ranks = _ranks(record, name)
    series = []
    for i, rank in enumerate(ranks):
        samples = _samples(record.points(name, rank))
        if len(samples) >= 2:  # one sample has no course over time to draw
            series.append(
                Series(
                    _label(words, rank, len(ranks)),
                    tuple(t - zero for t, _ in samples),
                    tuple(v * scale for _, v in samples),
                    SPARE_COLOURS[i % len(SPARE_COLOURS)],
                    style,
                    marker="." if len(samples) < 30 else None,
                )
            )
    return series


def gpu_panels(record: RunRecord) -> list[Panel]:
    """Utilisation (%), memory (GiB) and power (W) against time; a panel without samples is
    left out here (the run figure's notes say which)."""
    zero = _zero(record)
    if zero is None:
        return []
    moments, label = _moments(record, zero), _time_label(record)
    util = _time_series(record, sm.GPU_UTIL, "GPU busy", zero)
    used = _time_series(record, sm.GPU_MEM_USED_MIB, "in use (all processes)", zero, 1 / MIB_PER_GIB)
    peak = _time_series(record, sm.GPU_MEM_PEAK_MIB, "peak allocated (PyTorch)", zero, 1 / MIB_PER_GIB, "--")
    power = _time_series(record, sm.GPU_POWER_W, "power draw", zero)
    totals = sorted({p.value for p in record.metrics.get(sm.GPU_MEM_TOTAL_MIB, ())})
    corner = f"GPU total: {totals[-1] / MIB_PER_GIB:,.1f} GiB" if totals else ""
    panels = [
        Panel("GPU utilisation", label, "utilisation (%)", series=tuple(util), refs=moments,
              y_from_zero=True),
        Panel("GPU memory", label, "memory (GiB)", series=(*used, *peak), refs=moments,
              y_from_zero=True, corner=corner),
        Panel("GPU power", label, "power (W)", series=tuple(power), refs=moments, y_from_zero=True),
    ]  # fmt: skip
    return [p for p in panels if not p.empty]


def few_samples_note(record: RunRecord) -> str | None:
    """Why a run that sampled its GPU has no GPU panels: fewer than two samples of each series."""
    sampled = any(record.metrics.get(name) for name in GPU_SERIES)
    if sampled and not gpu_panels(record):
        return f"{record.result.name}: GPU panels are left out: fewer than two GPU samples were taken"
    return None


def energy_unit(joules: float) -> tuple[str, float]:
    """The unit that keeps ``joules`` readable on an axis, and the factor from joules to it."""
    if joules >= 3.6e6:
        return "kWh", 1 / 3.6e6
    if joules >= 1e4:
        return "kJ", 1e-3
    return "J", 1.0


def _cumulative(record: RunRecord, zero: float) -> list[tuple[float, float]]:
    """(time, joules since training started) summed over ranks, at each sample after the start and
    at the goal: each rank's counter, else its integrated power."""
    ranks = sorted(set(record.ranks(sm.GPU_ENERGY_J)) | set(record.ranks(sm.GPU_POWER_W)))
    samples = {
        rank: (_samples(record.points(sm.GPU_ENERGY_J, rank)), _samples(record.points(sm.GPU_POWER_W, rank)))
        for rank in ranks
    }
    times = {t for counter, power in samples.values() for t, _ in (counter or power) if t > zero}
    if record.clock.goal is not None:
        times.add(record.clock.goal)
    out = []
    for t in sorted(times):
        got = [e[0] for counter, power in samples.values() if (e := rank_energy(counter, power, zero, t))]
        if got:
            out.append((t, sum(got)))
    return [(zero, 0.0), *out] if out else []


def energy_figure(record: RunRecord) -> Figure | None:
    """Power and energy against time for a run that sampled either; None when it sampled neither."""
    zero = _zero(record)
    curve = _cumulative(record, zero) if zero is not None else []
    if zero is None or len(curve) < 2:
        return None
    result = record.result
    unit, factor = energy_unit(max(j for _, j in curve))
    words = "energy used" if len(record.ranks(sm.GPU_POWER_W)) <= 1 else "energy used, all GPUs"
    energy = Series(
        words, tuple(t - zero for t, _ in curve), tuple(j * factor for _, j in curve), SPARE_COLOURS[0],
        marker=None,
    )  # fmt: skip
    marks, notes = [], []
    at_goal = next((j for t, j in curve if t == record.clock.goal), None)
    if at_goal is not None and record.clock.goal is not None:
        text = f"energy to the goal: {format_energy(at_goal)}"
        marks.append(Mark(record.clock.goal - zero, at_goal * factor, text, GOAL_COLOUR, "*"))
        notes.append(f"{result.name}: {text} (training start to goal, all ranks)")
    elif result.goal is not None:
        notes.append(f"{result.name}: no energy to the goal (the goal was not reached)")
    if len(record.ranks(sm.GPU_POWER_W)) > MAX_RANKS:
        notes.append(f"the first {MAX_RANKS} of {len(record.ranks(sm.GPU_POWER_W))} ranks' power is drawn")
    power = _time_series(record, sm.GPU_POWER_W, "power draw", zero)
    moments = _moments(record, zero)
    panels = (
        Panel("Power draw", _time_label(record), "power (W)", series=tuple(power), refs=moments,
              y_from_zero=True, note="fewer than two power samples were taken"),
        Panel("Energy since training started", _time_label(record), f"energy ({unit})", series=(energy,),
              marks=tuple(marks), refs=moments, y_from_zero=True),
    )  # fmt: skip
    return Figure(
        f"energy-{result.name}",
        f"{result.name}: GPU power and energy",
        ENERGY_CAPTION,
        panels,
        "Power and energy",
        tuple(notes),
    )


def energy_figures(records: Sequence[RunRecord]) -> list[Figure]:
    """One power/energy figure per run that sampled its GPUs' power or energy."""
    return [f for r in records if (f := energy_figure(r)) is not None]
