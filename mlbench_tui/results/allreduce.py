"""Task 0a across runs: per message size, latency and bus bandwidth by backend and world size.

Each 0a run reports, per dtype and message size (the metric's step, in elements), the p50 and
p99 latency of one all-reduce and its bus bandwidth (``allreduce_<dtype>_<figure>``). These pure
functions read those curves from a run's metrics and aggregate repeats of one configuration
(framework, backend, world size, dtype) size by size with the olympic mean, keeping the min and
max, so ``mlbench results`` (``sweep_tables``, ``sweep_json``) and the report show the same
numbers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from mlbench_worker import wire

from mlbench_tui.formatting import format_bandwidth, format_number, render_table, without_empty
from mlbench_tui.results.scoring import SPREAD_LIMIT, LeftOut, olympic_mean, variation
from mlbench_tui.results.time_to_accuracy import MetricPoint

PREFIX = wire.ALLREDUCE_PREFIX
FIGURES = ("latency_p50", "latency_p99", "busbw")
ITEM_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp64": 8}


@dataclass(frozen=True)
class SizePoint:
    """One message size of one run: latencies in seconds, bus bandwidth in GB/s."""

    size: int  # elements
    latency_p50_s: float | None = None
    latency_p99_s: float | None = None
    busbw_gbps: float | None = None


def run_curves(metrics: Iterable[MetricPoint]) -> dict[str, list[SizePoint]]:
    """Per dtype, the run's points by size (rank 0's: every rank times the same collective)."""
    table: dict[str, dict[int, dict[str, float]]] = {}
    for point in metrics:
        if point.rank != 0 or point.step is None or not point.name.startswith(PREFIX):
            continue
        dtype, _, figure = point.name.removeprefix(PREFIX).partition("_")
        if figure in FIGURES:
            table.setdefault(dtype, {}).setdefault(point.step, {})[figure] = point.value
    return {
        dtype: [
            SizePoint(
                size=size,
                latency_p50_s=row.get("latency_p50"),
                latency_p99_s=row.get("latency_p99"),
                busbw_gbps=row.get("busbw"),
            )
            for size, row in sorted(sizes.items())
        ]
        for dtype, sizes in sorted(table.items())
    }


@dataclass(frozen=True)
class Spread:
    """Olympic mean over repeats, with the smallest and largest value and the coefficient of
    variation (None below two repeats)."""

    mean: float
    low: float
    high: float
    cv: float | None = None


def spread(values: Sequence[float]) -> Spread | None:
    if not values:
        return None
    return Spread(olympic_mean(values), min(values), max(values), variation(values))


@dataclass(frozen=True)
class SizeFigures:
    """One message size of one configuration, over its repeats."""

    size: int
    bytes: int
    runs: int
    latency_p50_s: Spread | None
    latency_p99_s: Spread | None
    busbw_gbps: Spread | None


@dataclass(frozen=True)
class SweepCurve:
    """One configuration's curve: every size any of its repeats measured."""

    framework: str
    backend: str
    workers: int
    dtype: str
    runs: int
    points: tuple[SizeFigures, ...]
    left_out: tuple[LeftOut, ...] = ()
    network: str = ""

    @property
    def label(self) -> str:
        framework = "" if self.framework == "pytorch" else f"{self.framework} "
        network = f" {self.network}" if self.network else ""
        return f"{framework}{self.backend} {self.workers}w{network}"

    @property
    def best_busbw(self) -> SizeFigures | None:
        """The size with the highest mean bus bandwidth."""
        measured = [p for p in self.points if p.busbw_gbps is not None]
        return max(measured, key=lambda p: p.busbw_gbps.mean if p.busbw_gbps else 0.0) if measured else None


@dataclass(frozen=True)
class SweepRun:
    """What aggregation needs of one 0a run: its configuration and its curves, its name, and
    why it is left out of the aggregate (``scoring.left_out_reason``; None: it counts)."""

    framework: str
    backend: str
    workers: int
    curves: dict[str, list[SizePoint]]
    name: str = ""
    left_out: str | None = None
    network: str = ""  # the links (RunResult.network_label): curves on other links stay apart


def aggregate(runs: Iterable[SweepRun]) -> list[SweepCurve]:
    """One curve per (framework, backend, world size, network, dtype), repeats aggregated size by size
    over the runs that count (the others are named in the curve's ``left_out``); ordered by
    dtype, backend, framework, world size."""
    groups: dict[tuple[str, str, int, str, str], list[list[SizePoint]]] = {}
    skipped: dict[tuple[str, str, int, str], list[LeftOut]] = {}
    for run in runs:
        if run.left_out is not None:
            skipped.setdefault((run.framework, run.backend, run.workers, run.network), []).append(
                LeftOut(run.name, run.left_out)
            )
            continue
        for dtype, points in run.curves.items():
            groups.setdefault((run.framework, run.backend, run.workers, run.network, dtype), []).append(
                points
            )
    curves = []
    for (framework, backend, workers, network, dtype), repeats in groups.items():
        by_size: dict[int, list[SizePoint]] = {}
        for points in repeats:
            for point in points:
                by_size.setdefault(point.size, []).append(point)
        figures = tuple(
            SizeFigures(
                size=size,
                bytes=size * ITEM_BYTES.get(dtype, 4),
                runs=len(points),
                latency_p50_s=spread([p.latency_p50_s for p in points if p.latency_p50_s is not None]),
                latency_p99_s=spread([p.latency_p99_s for p in points if p.latency_p99_s is not None]),
                busbw_gbps=spread([p.busbw_gbps for p in points if p.busbw_gbps is not None]),
            )
            for size, points in sorted(by_size.items())
        )
        left_out = tuple(skipped.get((framework, backend, workers, network), ()))
        curves.append(
            SweepCurve(framework, backend, workers, dtype, len(repeats), figures, left_out, network)
        )
    curves.sort(key=lambda c: (c.dtype, c.backend, c.framework, c.network, c.workers))
    return curves


def _figure(value: Spread | None, scale: float = 1.0) -> str:
    return "-" if value is None else format_number(value.mean * scale)


def _cv(value: Spread | None) -> str:
    if value is None or value.cv is None:
        return "-"
    return f"{100 * value.cv:.1f}%" + (" !" if value.cv > SPREAD_LIMIT else "")


def _rests_on(curves: Sequence[SweepCurve]) -> str:
    """What a table's figures are: one run's, or the olympic mean over each configuration's runs."""
    if all(c.runs == 1 for c in curves):
        labels = ", ".join(c.label for c in curves)
        return f"one run of {labels}" if len(curves) == 1 else f"one run each of {labels}"
    counts = ", ".join(f"{c.label} x{c.runs}" for c in curves)
    return f"olympic mean of {counts}"


def sweep_tables(curves: Sequence[SweepCurve]) -> str:
    """One table per dtype: a row per message size, per configuration its p50 latency (us) and
    bus bandwidth (GB/s), olympic means over its repeats, with the latency's coefficient of
    variation when it ran more than once; what each rests on, the runs left out and why, and the
    sizes whose repeats vary too much to compare."""
    parts = []
    for dtype in sorted({c.dtype for c in curves}):
        mine = [c for c in curves if c.dtype == dtype]
        sizes = sorted({p.size for c in mine for p in c.points})
        at = [{p.size: p for p in c.points} for c in mine]
        rows = []
        for size in sizes:
            row = {"SIZE": str(size), "BYTES": str(size * ITEM_BYTES.get(dtype, 4))}
            for curve, points in zip(mine, at, strict=True):
                point = points.get(size)
                row[f"{curve.label} P50 us"] = _figure(point.latency_p50_s if point else None, 1e6)
                if curve.runs > 1:
                    row[f"{curve.label} CV"] = _cv(point.latency_p50_s if point else None)
                row[f"{curve.label} BUSBW"] = format_bandwidth(
                    point.busbw_gbps.mean if point and point.busbw_gbps else None
                )
            rows.append(row)
        title = f"all-reduce {dtype}: p50 latency and bus bandwidth per message size ({_rests_on(mine)})"
        notes = [
            f"left out of {c.label}: " + ", ".join(f"{lo.name} ({lo.reason})" for lo in c.left_out)
            for c in mine
            if c.left_out
        ]
        wide = [
            f"{c.label} at {n} of {len(c.points)} sizes"
            for c in mine
            if (n := sum(1 for p in c.points if p.latency_p50_s and (p.latency_p50_s.cv or 0) > SPREAD_LIMIT))
        ]
        if wide:
            notes.append(
                f"! latency spread too wide to compare (CV above {100 * SPREAD_LIMIT:.0f}%): "
                + ", ".join(wide)
            )
        parts.append("\n".join([title, render_table(without_empty(rows, ("SIZE", "BYTES"))), *notes]))
    return "\n\n".join(parts)


def sweep_json(curves: Sequence[SweepCurve]) -> list[dict[str, Any]]:
    """The curves as JSON-ready dicts (every figure with its min and max over repeats)."""
    return [asdict(curve) for curve in curves]
