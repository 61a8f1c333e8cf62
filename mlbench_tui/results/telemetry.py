"""Peak memory, GPU utilisation and energy of a run, from its ranks' ``sys/`` telemetry series.

Pure functions over recorded samples (``(t, value)`` in time order), so they are tested on
hand-written series and give the same figures for a stored run and an export. Energy comes from
the GPU's energy counter (NVML's total energy, in joules); an interval in which the counter went
down (a driver reload reset it, or it wrapped) is filled from the integrated power draw, and a
rank without a counter (older boards) integrates its power samples instead. Energy to accuracy
runs from ``run_start`` to ``goal_reached`` (validation included: the GPUs draw power during it).

GPU utilisation is the mean of the NVML readings taken while the run was timed: each ``sys/gpu_util``
value is the mean of the ``sys/gpu_readings`` readings behind it (a worker that sent no count
took one reading per value). Below ``MIN_READINGS`` readings (MLPerf's minimum for power) the
figure is not given; its note says what it would rest on ("n/a: 1 reading in 1.3 s").
``gpu_util_text`` is the one text every view (status, results, the TUI, the report) shows.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from itertools import pairwise
from typing import Literal

from mlbench_worker import sysmetrics as sm
from mlbench_worker import wire

from mlbench_tui.results import events as ev
from mlbench_tui.results.events import EventRecord
from mlbench_tui.results.model import RankTelemetryFigures, TelemetryFigures
from mlbench_tui.results.time_to_accuracy import MetricPoint

JOULES_PER_KWH = 3.6e6
MIN_READINGS = 60  # MLPerf's power rules: at least 60 readings per run
Samples = Sequence[tuple[float, float]]
EnergySource = Literal["counter", "power"]

# The series a result reads (the rest are for charts and the live view).
RESULT_SERIES = (
    sm.RSS_MIB, sm.MEM_LIMIT_MIB, sm.GPU_MEM_PEAK_MIB, sm.GPU_MEM_USED_MIB, sm.GPU_UTIL, sm.GPU_ENERGY_J,
    sm.GPU_POWER_W, sm.GPU_READINGS,
)  # fmt: skip


def _value_at(samples: Samples, t: float) -> float:
    """Linear interpolation of ``samples`` at ``t`` (clamped to the first and last sample)."""
    if t <= samples[0][0]:
        return samples[0][1]
    for (t0, v0), (t1, v1) in pairwise(samples):
        if t <= t1:
            return v0 if t1 == t0 else v0 + (v1 - v0) * (t - t0) / (t1 - t0)
    return samples[-1][1]


def power_energy(power: Samples, start: float, end: float) -> float | None:
    """Joules from integrating power draw (watts) over ``[start, end]`` (trapezoids; the window is
    clipped to the samples); None without two samples in reach."""
    if len(power) < 2 or end <= start:
        return None
    lo, hi = max(start, power[0][0]), min(end, power[-1][0])
    if hi <= lo:
        return None
    points = [
        (lo, _value_at(power, lo)),
        *((t, w) for t, w in power if lo < t < hi),
        (hi, _value_at(power, hi)),
    ]
    return sum((t1 - t0) * (w0 + w1) / 2 for (t0, w0), (t1, w1) in pairwise(points))


def counter_energy(counter: Samples, start: float, end: float, power: Samples = ()) -> float | None:
    """Joules an energy counter rose by over ``[start, end]``: the sum of its increments between
    samples, the intervals at the window's edges in proportion; an interval where the counter
    went down (reset or wrap) counts the power integrated over it (nothing without power
    samples). None without two samples in reach."""
    if len(counter) < 2 or end <= start:
        return None
    total = 0.0
    covered = False
    for (t0, v0), (t1, v1) in pairwise(counter):
        lo, hi = max(t0, start), min(t1, end)
        if hi <= lo or t1 <= t0:
            continue
        covered = True
        if v1 >= v0:
            total += (v1 - v0) * (hi - lo) / (t1 - t0)
        else:
            total += power_energy(power, lo, hi) or 0.0
    return total if covered else None


def rank_energy(
    counter: Samples, power: Samples, start: float, end: float
) -> tuple[float, EnergySource] | None:
    """A rank's GPU energy over ``[start, end]``: from its counter, else from its power draw."""
    joules = counter_energy(counter, start, end, power)
    if joules is not None:
        return joules, "counter"
    joules = power_energy(power, start, end)
    return (joules, "power") if joules is not None else None


def mean_in(samples: Samples, start: float | None, end: float | None) -> float | None:
    """Mean of the samples taken within ``[start, end]`` (all of them when a bound is None)."""
    values = [v for t, v in samples if (start is None or t >= start) and (end is None or t <= end)]
    return sum(values) / len(values) if values else None


def util_in(
    util: Samples, readings: Samples, start: float | None, end: float | None
) -> tuple[float | None, int]:
    """Mean GPU utilisation over the readings taken within ``(start, end]``, and how many there
    were: each value weighs as many readings as were sent with it (one when none were), and a
    value counts when the period it ends fell in the window."""
    counts = dict(readings)
    total = n = 0.0
    for t, value in util:
        if (start is None or t > start) and (end is None or t <= end):
            k = counts.get(t, 1.0)
            total += value * k
            n += k
    return (total / n if n else None), int(n)


def util_note(readings: int, seconds: float | None) -> str:
    """Why a utilisation figure is not given: what it would rest on."""
    what = f"{readings} reading{'' if readings == 1 else 's'}"
    return f"n/a: {what}" + ("" if seconds is None else f" in {seconds:.1f} s")


def gpu_util_text(figures: TelemetryFigures | RankTelemetryFigures) -> str | None:
    """The GPU utilisation as every view shows it: ``51%``, or the note saying why not; None
    when the run has no GPU utilisation series."""
    if figures.mean_gpu_util is not None:
        return f"{figures.mean_gpu_util:.0f}%"
    return figures.gpu_util_note


def _event_time(
    events: Sequence[EventRecord], kind: type[wire.Payload], *, last: bool = False
) -> float | None:
    times = ev.times(events, kind)
    return (max(times) if last else min(times)) if times else None


def _peak(samples: Samples) -> float | None:
    return max((v for _, v in samples), default=None)


def _total(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def run_figures(
    metrics: Iterable[MetricPoint], events: Iterable[EventRecord], price_per_kwh: float | None = None
) -> TelemetryFigures | None:
    """The telemetry figures of a run, with the energy to accuracy's cost at ``price_per_kwh``;
    None when it reported no telemetry (``telemetry: off``, or a worker from before it existed)."""
    series: dict[int, dict[str, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    for p in metrics:
        if p.t is not None and p.name in RESULT_SERIES:
            series[p.rank][p.name].append((p.t, p.value))
    if not series:
        return None
    events = list(events)
    start, stop = _event_time(events, wire.RunStart), _event_time(events, wire.RunStop, last=True)
    goal = _event_time(events, wire.GoalReached)
    ranks = [_rank_figures(rank, series[rank], start, stop, goal) for rank in sorted(series)]
    utils = [r.mean_gpu_util for r in ranks if r.mean_gpu_util is not None]
    counted = [r for r in ranks if r.gpu_util_readings is not None]
    fewest = min(counted, key=lambda r: r.gpu_util_readings or 0, default=None)
    sources = {r.energy_source for r in ranks if r.energy_source is not None}
    to_goal = _total(r.energy_to_accuracy_j for r in ranks)
    kwh = None if to_goal is None else to_goal / JOULES_PER_KWH
    return TelemetryFigures(
        peak_rss_mib=max((r.peak_rss_mib for r in ranks if r.peak_rss_mib is not None), default=None),
        peak_gpu_mem_mib=max(
            (r.peak_gpu_mem_mib for r in ranks if r.peak_gpu_mem_mib is not None), default=None
        ),
        mean_gpu_util=sum(utils) / len(utils) if utils else None,
        gpu_util_readings=None if fewest is None else fewest.gpu_util_readings,
        gpu_util_note=None if utils or fewest is None else fewest.gpu_util_note,
        energy_j=_total(r.energy_j for r in ranks),
        energy_to_accuracy_j=to_goal,
        energy_to_accuracy_kwh=kwh,
        energy_cost=None if kwh is None or price_per_kwh is None else kwh * price_per_kwh,
        price_per_kwh=price_per_kwh,
        energy_source="power" if "power" in sources else ("counter" if sources else None),
        ranks=ranks,
    )


def _rank_figures(
    rank: int,
    series: dict[str, list[tuple[float, float]]],
    start: float | None,
    stop: float | None,
    goal: float | None,
) -> RankTelemetryFigures:
    got = {name: sorted(samples) for name, samples in series.items()}
    counter, power = got.get(sm.GPU_ENERGY_J, []), got.get(sm.GPU_POWER_W, [])
    whole = rank_energy(counter, power, start, stop) if start is not None and stop is not None else None
    to_goal = rank_energy(counter, power, start, goal) if start is not None and goal is not None else None
    util, readings = got.get(sm.GPU_UTIL, []), 0
    mean_util: float | None = None
    if util:
        mean_util, readings = util_in(util, got.get(sm.GPU_READINGS, []), start, stop)
    enough = readings >= MIN_READINGS
    seconds = stop - start if start is not None and stop is not None else None
    return RankTelemetryFigures(
        rank=rank,
        peak_rss_mib=_peak(got.get(sm.RSS_MIB, [])),
        mem_limit_mib=_peak(got.get(sm.MEM_LIMIT_MIB, [])),
        peak_gpu_mem_mib=_peak(got.get(sm.GPU_MEM_PEAK_MIB) or got.get(sm.GPU_MEM_USED_MIB, [])),
        mean_gpu_util=mean_util if enough else None,
        gpu_util_readings=readings if util else None,
        gpu_util_note=None if enough or not util else util_note(readings, seconds),
        energy_j=whole[0] if whole else None,
        energy_to_accuracy_j=to_goal[0] if to_goal else None,
        energy_source=(to_goal or whole or (None, None))[1],
    )
