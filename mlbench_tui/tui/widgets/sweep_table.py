"""The compare screen's all-reduce table: latency p50 and bus bandwidth per message size and dtype,
one column per compared 0a run, from each run's stored sweep (``results.allreduce.run_curves``).

A one-rank run has latency only (its all-reduce moves no data), so its bandwidth reads ``—``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.table import Table

from mlbench_tui.formatting import format_latency, format_number
from mlbench_tui.results.allreduce import SizePoint, run_curves
from mlbench_tui.results.time_to_accuracy import MetricPoint
from mlbench_tui.store.api_models import RunInfo

TITLE = "All-reduce per message size: latency p50 · bus bandwidth"


def size_cell(point: SizePoint | None) -> str:
    """``30.4 us · 1.52 GB/s``; ``—`` for a figure the run did not measure."""
    if point is None:
        return "—"
    latency = format_latency(point.latency_p50_s, unknown="—")
    busbw = "—" if point.busbw_gbps is None else f"{format_number(point.busbw_gbps)} GB/s"
    return f"{latency} · {busbw}"


def sweep_table(
    runs: Sequence[RunInfo], sweeps: Mapping[str, Mapping[str, Sequence[MetricPoint]]]
) -> Table | None:
    """One row per (dtype, size) any compared sweep measured, one column per sweep run; None
    when no compared run has a sweep."""
    curves = {
        run.id: run_curves(p for points in sweeps[run.id].values() for p in points)
        for run in runs
        if sweeps.get(run.id)
    }
    shown = [run for run in runs if curves.get(run.id)]
    if not shown:
        return None
    by_run = {
        run.id: {(dtype, p.size): p for dtype, points in curves[run.id].items() for p in points}
        for run in shown
    }
    keys = sorted({key for points in by_run.values() for key in points})
    table = Table(title=TITLE, title_justify="left", expand=False)
    table.add_column("dtype")
    table.add_column("size (elements)", justify="right")
    for run in shown:
        table.add_column(f"{run.name} ({run.workers}w)", justify="right")
    for dtype, size in keys:
        table.add_row(dtype, f"{size:,}", *(size_cell(by_run[run.id].get((dtype, size))) for run in shown))
    return table
