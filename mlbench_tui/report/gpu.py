"""What the report's GPU panels read from a run's ``sys/`` telemetry: the zero of their time axis,
the energy used since training started, and the utilisation of each rank.

Telemetry is sampled on a clock, not per step, so these panels plot against time: seconds since
the run's ``run_start`` (negative while the ranks start up). Energy comes from the GPU's energy
counter where there is one, else from the integrated power draw, the same way
``results.telemetry`` computes a result's energy.
"""

from __future__ import annotations

from collections.abc import Sequence

from mlbench_worker import sysmetrics as sm

from mlbench_tui.report.figure import SPARE_COLOURS, Panel, Series
from mlbench_tui.report.inputs import RunRecord
from mlbench_tui.results.telemetry import rank_energy
from mlbench_tui.results.time_to_accuracy import MetricPoint

MIB_PER_GIB = 1024.0
MAX_RANKS = 8  # more ranks than this: the first eight are drawn and the figure says so
TIME_LABEL = "time since training started (s)"
SAMPLE_LABEL = "time since the first GPU sample (s)"  # a run that never started training
GPU_SERIES = (sm.GPU_UTIL, sm.GPU_MEM_USED_MIB, sm.GPU_MEM_PEAK_MIB, sm.GPU_POWER_W, sm.GPU_ENERGY_J)


def has_gpu_telemetry(record: RunRecord) -> bool:
    """Whether the run recorded any GPU telemetry series."""
    return any(record.metrics.get(name) for name in GPU_SERIES)


def gpu_zero(record: RunRecord) -> float | None:
    """Training's start (unix seconds), else the first telemetry sample's time."""
    if record.clock.start is not None:
        return record.clock.start
    times = [p.t for name in GPU_SERIES for p in record.metrics.get(name, ()) if p.t is not None]
    return min(times, default=None)


def time_label(records: Sequence[RunRecord]) -> str:
    """The time axis of GPU panels: since training started; a run that never started training
    but sampled its GPU is timed from its first sample (``untrained_note`` says which)."""
    drawn = [r for r in records if has_gpu_telemetry(r)]
    return SAMPLE_LABEL if drawn and all(r.clock.start is None for r in drawn) else TIME_LABEL


def untrained_note(record: RunRecord) -> str | None:
    """The note of a run whose GPU lines start at its first sample: it never started training."""
    if record.clock.start is None and has_gpu_telemetry(record):
        return f"{record.result.name} never started training: its GPU lines start at its first sample"
    return None


def _samples(points: Sequence[MetricPoint]) -> list[tuple[float, float]]:
    return sorted((p.t, p.value) for p in points if p.t is not None)


def energy_unit(joules: float) -> tuple[str, float]:
    """The unit that keeps ``joules`` readable on an axis, and the factor from joules to it."""
    if joules >= 3.6e6:
        return "kWh", 1 / 3.6e6
    if joules >= 1e4:
        return "kJ", 1e-3
    return "J", 1.0


def cumulative_energy(record: RunRecord, zero: float) -> list[tuple[float, float]]:
    """(time, joules since ``zero``) summed over ranks, at each sample after it and at the goal:
    each rank's counter, else its integrated power."""
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


def rank_util_panel(record: RunRecord) -> Panel | None:
    """Each rank's GPU utilisation against time (the first ``MAX_RANKS``); None without samples."""
    zero = gpu_zero(record)
    if zero is None:
        return None
    series = []
    ranks = record.ranks(sm.GPU_UTIL)
    for i, rank in enumerate(ranks[:MAX_RANKS]):
        samples = _samples(record.points(sm.GPU_UTIL, rank))
        if len(samples) >= 2:
            series.append(
                Series(
                    f"rank {rank}",
                    tuple(t - zero for t, _ in samples),
                    tuple(v for _, v in samples),
                    SPARE_COLOURS[i % len(SPARE_COLOURS)],
                    marker=None,
                )
            )
    if not series:
        return None
    title = "GPU utilisation per rank" + (
        f" (first {MAX_RANKS} of {len(ranks)})" if len(ranks) > MAX_RANKS else ""
    )
    return Panel(title, time_label([record]), "utilisation (%)", series=tuple(series), y_from_zero=True)
