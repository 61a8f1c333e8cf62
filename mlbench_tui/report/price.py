"""What scaling out costs: MLBench's price index (price increase / performance increase, per
worker count) and the cost per run beside MLBench's published costs.

The price of a configuration is its runs' cost to target where a price per hour was given, else
its worker-seconds to the goal (the price at any fixed price per worker); either way the index
is the same ratio, 1 when k workers buy k times the speed, above 1 when the speed costs more.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from mlbench_tui.report.anchors import published_for
from mlbench_tui.report.figure import (
    LINE_STYLES,
    REFERENCE_COLOUR,
    Mark,
    Panel,
    RefLine,
    Series,
    backend_colour,
)
from mlbench_tui.report.inputs import RunRecord
from mlbench_tui.results.model import RunResult


def _reached(records: Sequence[RunRecord]) -> list[RunResult]:
    return [r.result for r in records if r.result.reached and r.result.time_to_accuracy_s]


def _price(results: Sequence[RunResult], priced: bool) -> float:
    """Mean price of one configuration's runs: dollars to the goal, or worker-seconds."""
    if priced:
        return statistics.fmean(r.cost_to_target or 0.0 for r in results)
    return statistics.fmean(r.workers * (r.time_to_accuracy_s or 0.0) for r in results)


def price_index_panel(records: Sequence[RunRecord], colours: dict[str, str], why_not: str) -> Panel:
    """Price increase / performance increase against workers, one line per backend (and
    framework), where a 1-worker run and another worker count reached the goal; ``why_not`` says
    why there is none (the speedup's reason)."""
    reached = _reached(records)
    priced = bool(reached) and all(r.cost_to_target is not None for r in reached)
    frameworks = sorted({r.framework for r in reached})
    series = []
    for backend, framework in sorted({(r.backend, r.framework) for r in reached}):
        mine: dict[int, list[RunResult]] = {}
        for r in reached:
            if (r.backend, r.framework) == (backend, framework):
                mine.setdefault(r.workers, []).append(r)
        if 1 not in mine or len(mine) < 2:
            continue
        base_time = statistics.fmean(r.time_to_accuracy_s or 0.0 for r in mine[1])
        base_price = _price(mine[1], priced)
        points = []
        for workers, group in sorted(mine.items()):
            time = statistics.fmean(r.time_to_accuracy_s or 0.0 for r in group)
            points.append((workers, (_price(group, priced) / base_price) / (base_time / time)))
        label = f"{backend} ({framework})" if len(frameworks) > 1 else backend
        series.append(
            Series(
                label,
                tuple(float(w) for w, _ in points),
                tuple(v for _, v in points),
                backend_colour(backend, colours),
                LINE_STYLES[frameworks.index(framework) % len(LINE_STYLES)],
            )
        )
    basis = "cost to target" if priced else "worker-seconds to the goal"
    return Panel(
        "Price index",
        "workers",
        f"price increase / speedup ({basis})",
        series=tuple(series),
        refs=(RefLine("speed bought at its price", 1.0),) if series else (),
        x_integer=True,
        y_from_zero=True,
        note=why_not,
    )


def cost_panel(records: Sequence[RunRecord], colours: dict[str, str]) -> Panel:
    """Cost to the goal against workers (runs with a price per hour), in the runs' currency, with
    MLBench's published cost per run for the task as labelled points where that currency is USD."""
    reached = [r for r in _reached(records) if r.cost_to_target is not None]
    currencies = sorted({r.currency or "USD" for r in reached}) or ["USD"]
    series = []
    for backend in sorted({r.backend for r in reached}):
        by_workers: dict[int, list[float]] = {}
        for r in reached:
            if r.backend == backend:
                by_workers.setdefault(r.workers, []).append(r.cost_to_target or 0.0)
        ordered = sorted(by_workers.items())
        series.append(
            Series(
                backend,
                tuple(float(w) for w, _ in ordered),
                tuple(statistics.fmean(v) for _, v in ordered),
                backend_colour(backend, colours),
            )
        )
    task = records[0].result.task if records else ""
    published = published_for(task, "cost") if currencies == ["USD"] else ()  # MLBench's are in USD
    marks = tuple(Mark(float(p.workers), p.value, p.label, REFERENCE_COLOUR, "D") for p in published)
    return Panel(
        "Cost per run",
        "workers",
        f"cost to the goal ({', '.join(currencies)})",
        series=tuple(series),
        marks=marks,
        x_integer=True,
        y_from_zero=True,
        note="no run had a price per hour",
        corner="" if series else "no run had a price per hour: MLBench's cost alone",
    )
