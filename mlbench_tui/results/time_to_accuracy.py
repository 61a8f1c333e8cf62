"""Time to accuracy and the compute/communication split of one run, from its metrics and events.

Pure functions over the records a run reported (no store, no I/O), so they are unit-tested on
hand-written series and give the same answer for a local run, a Kubernetes run, or an export.
Training time until the goal excludes validation (MLBench's rule); validation time is kept
separately.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from mlbench_worker import wire

from mlbench_tui.plan import GoalPlan
from mlbench_tui.results import events as ev
from mlbench_tui.results.events import EventRecord
from mlbench_tui.results.goal import meets
from mlbench_tui.results.model import AllreduceFigures, TimeSplit
from mlbench_tui.results.quantiles import relative_spread

TRACKER_TOTALS = wire.TRACKER_TOTALS


@dataclass(frozen=True)
class MetricPoint:
    """One reported metric value (accuracies are in percent)."""

    name: str
    value: float
    rank: int = 0
    step: int | None = None
    epoch: float | None = None
    t: float | None = None


@dataclass(frozen=True)
class GoalOutcome:
    """Whether and when a run reached its goal."""

    metric: str
    target: float
    direction: str
    reached: bool
    best_value: float | None
    last_value: float | None
    epochs: float | None = None
    steps: int | None = None
    train_time_s: float | None = None
    val_time_s: float | None = None


def _ordered(points: Iterable[MetricPoint]) -> list[MetricPoint]:
    return sorted(
        points,
        key=lambda p: (
            p.t if p.t is not None else math.inf,
            p.epoch if p.epoch is not None else math.inf,
            p.step if p.step is not None else -1,
        ),
    )


def _series(metrics: Iterable[MetricPoint], name: str) -> list[MetricPoint]:
    """One value per step of a metric: rank 0's if present (global metrics are equal on all
    ranks), otherwise the lowest rank that reported it."""
    chosen = [p for p in metrics if p.name == name]
    if not chosen:
        return []
    lowest = min(p.rank for p in chosen)
    return _ordered(p for p in chosen if p.rank == lowest)


def _last_at_or_before(points: list[MetricPoint], epoch: float | None) -> float | None:
    """The last value reported at or before ``epoch`` (the last value overall when None)."""
    value = None
    for point in points:
        if epoch is not None and point.epoch is not None and point.epoch > epoch + 1e-9:
            break
        value = point.value
    return value


def goal_outcome(
    goal: GoalPlan | None,
    metrics: Iterable[MetricPoint],
    events: Iterable[EventRecord],
) -> GoalOutcome | None:
    """Evaluate a run against its goal; None for runs without a goal (task 0a)."""
    if goal is None:
        return None
    metrics = list(metrics)
    events = list(events)
    metric, target, direction = goal.metric, goal.target, goal.direction
    series = _series(metrics, metric)
    values = [p.value for p in series if not math.isnan(p.value)]
    best = (max(values) if direction == "max" else min(values)) if values else None
    last = values[-1] if values else None
    reached_event = ev.first(events, wire.GoalReached)
    train_series = _series(metrics, wire.TIME_TRAIN)
    val_series = _series(metrics, wire.TIME_VALIDATION)
    if reached_event is not None:  # the worker's own record of when the goal was reached
        p = reached_event.payload
        epochs = float(p.epoch) if p.epoch is not None else None
        steps, train_s, val_s = p.step, p.train_time_s, p.val_time_s
        if best is None:
            best = p.value
    else:  # no event (an older worker, or a lost one): the first value that meets the target
        first = next((p for p in series if meets(p.value, target, direction)), None)
        if first is None:
            return GoalOutcome(metric, target, direction, False, best, last)
        epochs, steps = first.epoch, first.step
        end = _epoch_end(events, epochs)
        train_s = end.train_time_s if end is not None else None
        val_s = end.val_time_s if end is not None else None
    return GoalOutcome(
        metric=metric,
        target=target,
        direction=direction,
        reached=True,
        best_value=best,
        last_value=last,
        epochs=epochs,
        steps=steps,
        train_time_s=train_s or _last_at_or_before(train_series, epochs),
        val_time_s=val_s or _last_at_or_before(val_series, epochs),
    )


def _epoch_end(events: list[EventRecord], epoch: float | None) -> wire.EpochEnd | None:
    """Rank 0's ``epoch_end`` of ``epoch`` (its cumulative train and validation times)."""
    if epoch is None:
        return None
    return next((e.payload for e in ev.of(events, wire.EpochEnd, rank=0) if e.payload.epoch == epoch), None)


def last_per_rank(metrics: Iterable[MetricPoint], name: str) -> dict[int, float]:
    """Each rank's final value of the cumulative metric ``name`` (reports in time order)."""
    return {point.rank: point.value for point in _ordered(p for p in metrics if p.name == name)}


def time_split(metrics: Iterable[MetricPoint]) -> TimeSplit | None:
    """Mean over ranks of each rank's final tracker totals, plus compute and communication
    fractions of their sum; None when the run reported no tracker totals."""
    metrics = list(metrics)
    finals = {name: last_per_rank(metrics, name) for name in TRACKER_TOTALS}
    if not any(finals.values()):
        return None
    split: dict[str, float] = {}
    for name, per_rank in finals.items():
        split[name.removeprefix("time_")] = sum(per_rank.values()) / len(per_rank) if per_rank else 0.0
    total = sum(split[key] for key in ("compute", "communication", "preprocess", "metrics"))
    split["compute_fraction"] = split["compute"] / total if total > 0 else 0.0
    split["communication_fraction"] = split["communication"] / total if total > 0 else 0.0
    return TimeSplit(**split)


def wall_time(events: Iterable[EventRecord]) -> float | None:
    """Seconds from the first ``run_start`` to the last ``run_stop`` (or ``goal_reached``)."""
    events = list(events)
    starts = ev.times(events, wire.RunStart)
    stops = ev.times(events, wire.RunStop, wire.GoalReached)
    if not starts or not stops:
        return None
    return max(0.0, max(stops) - min(starts))


LATENCY_ONLY_NOTE = "latency only: one rank's all-reduce moves no data, so it has no bandwidth"


def allreduce_summary(
    metrics: Iterable[MetricPoint], events: Iterable[EventRecord] = (), workers: int | None = None
) -> dict[str, AllreduceFigures] | None:
    """Task 0a: per dtype, the number of sizes, the p50 latency of the smallest size and the peak
    bus bandwidth (GB/s) with its size; None when the run reported no all-reduce metrics.

    A run of one rank (``workers`` 1, or the worker's ``allreduce_sweep`` event says so) has
    latency only (``latency_only``) and a ``note`` saying why. With the ceiling the worker
    reported for its device, ``above_ceiling`` counts the sizes whose bandwidth no link could
    carry (a timing artefact).
    """
    found = ev.first(events, wire.AllreduceSweep)
    sweep = found.payload if found is not None else wire.AllreduceSweep()
    latency_only = workers == 1 or sweep.latency_only
    ceiling = sweep.busbw_ceiling_gbps
    by_dtype: dict[str, dict[str, Any]] = {}
    iterations: dict[tuple[str, int], list[float]] = {}
    for point in metrics:
        if not point.name.startswith(wire.ALLREDUCE_PREFIX) or point.rank != 0:
            continue
        dtype, _, kind = point.name.removeprefix(wire.ALLREDUCE_PREFIX).partition("_")
        size = point.step if point.step is not None else 0
        if kind == wire.ALLREDUCE_ITERATION:
            iterations.setdefault((dtype, size), []).append(point.value)
            continue
        entry = by_dtype.setdefault(dtype, {"sizes": 0})
        if kind == "busbw" and not latency_only:
            if point.value > entry.get("peak_busbw_gbps", -1.0):
                entry["peak_busbw_gbps"] = point.value
                entry["peak_busbw_size"] = size
            if ceiling is not None and point.value > ceiling:
                entry["above_ceiling"] = entry.get("above_ceiling", 0) + 1
        elif kind == "latency_p50":
            entry["sizes"] += 1
            if size < entry.get("_min_size", math.inf):
                entry["_min_size"] = size
                entry["min_size_latency_p50_s"] = point.value
    for dtype, entry in by_dtype.items():
        smallest = entry.pop("_min_size", None)
        if smallest is not None:
            entry["min_size_spread"] = relative_spread(iterations.get((dtype, smallest), ()))
        if "peak_busbw_size" in entry:
            entry["peak_busbw_spread"] = relative_spread(
                iterations.get((dtype, entry["peak_busbw_size"]), ())
            )
        if latency_only:
            entry.update(latency_only=True, note=LATENCY_ONLY_NOTE)
        elif ceiling is not None:
            entry["busbw_ceiling_gbps"] = float(ceiling)
            if entry.get("above_ceiling"):
                entry["note"] = (
                    f"{entry['above_ceiling']} size(s) above the {ceiling:,.0f} GB/s ceiling "
                    f"({sweep.ceiling_basis or 'the device'}): timing, not transfer"
                )
    return {dtype: AllreduceFigures(**entry) for dtype, entry in by_dtype.items()} or None
