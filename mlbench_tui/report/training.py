"""The ranks of a multi-rank run: step time per rank with the stragglers marked (the rank the
others waited for), and each rank's GPU utilisation; the rule that names stragglers.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from mlbench_worker import wire

from mlbench_tui.report.figure import GOAL_COLOUR, SPARE_COLOURS, Figure, Panel, Series
from mlbench_tui.report.gpu import rank_util_panel
from mlbench_tui.report.inputs import RunRecord
from mlbench_tui.results.ranks import (
    RANK_METRICS,
    STRAGGLER_FACTOR,
    RankFigures,
    against_others,
    settle_ranks,
)
from mlbench_tui.results.table import step_line
from mlbench_tui.results.time_to_accuracy import MetricPoint

MAX_RANK_LINES = 8  # above this, the ranks' median and min-max band, plus the stragglers
RANKS_CAPTION = (
    "Step time is per rank (one training step, data loading to optimizer step); a rank whose busy "
    "time per step (its step less its communication) is more than 25% above the other ranks' "
    "median held the others up and is marked as a straggler. Above eight ranks, their median and "
    "min-max band are drawn, with the stragglers on top. GPU utilisation is each rank's, against "
    "time since training started."
)


def stragglers(record: RunRecord) -> dict[int, float]:
    """The ranks that held the others up (``results.ranks``' rule on each rank's busy time per
    step): rank -> how much busier than the other ranks' median (0.25 = 25%)."""
    ranks: dict[int, RankFigures] = {}
    for rank in record.ranks(wire.STEP_TIME):
        figures = ranks[rank] = RankFigures(rank)
        for name in RANK_METRICS:
            points = record.points(name, rank)
            if points:
                figures.take(name, points[-1].value, points[-1].step)
    settle_ranks(ranks, record.result.step_time)  # each rank's median step and busy time once finished
    busy = {rank: f.busy for rank, f in ranks.items() if f.busy is not None}
    ratios = against_others(busy)
    return {rank: ratio - 1 for rank, ratio in sorted(ratios.items()) if ratio > STRAGGLER_FACTOR}


def _xy(points: Sequence[MetricPoint], scale: float = 1.0) -> tuple[tuple[float, ...], tuple[float, ...]]:
    kept = [p for p in points if p.step is not None]
    return tuple(float(p.step or 0) for p in kept), tuple(p.value * scale for p in kept)


def step_time_panel(record: RunRecord) -> tuple[Panel, list[str]]:
    """Step time per rank (ms), stragglers drawn thicker and named."""
    ranks = record.ranks(wire.STEP_TIME)
    by_rank = {rank: record.points(wire.STEP_TIME, rank) for rank in ranks}
    slow = stragglers(record)
    series = []
    if len(ranks) <= MAX_RANK_LINES:
        shown = ranks
    else:  # many ranks: median and band across ranks, then the stragglers on top
        shown = list(slow)
        steps = sorted({p.step for points in by_rank.values() for p in points if p.step is not None})
        at = {rank: {p.step: p.value for p in points} for rank, points in by_rank.items()}
        per_step = [[at[r][s] * 1000 for r in ranks if s in at[r]] for s in steps]
        series.append(
            Series(
                f"median of {len(ranks)} ranks",
                tuple(float(s) for s in steps),
                tuple(statistics.median(v) for v in per_step),
                "#333333",
                marker=None,
                low=tuple(min(v) for v in per_step),
                high=tuple(max(v) for v in per_step),
            )
        )
    for i, rank in enumerate(shown):
        x, y = _xy(by_rank[rank], 1000.0)
        excess = slow.get(rank)
        label = f"rank {rank}" + (f" (straggler, +{excess:.0%})" if excess is not None else "")
        series.append(
            Series(
                label,
                x,
                y,
                SPARE_COLOURS[i % len(SPARE_COLOURS)] if excess is None else GOAL_COLOUR,
                marker=None,
                width=2.4 if excess is not None else 1.0,
            )
        )
    name = record.result.name
    notes = [f"{name}: rank {r} held the others up, busy time +{e:.0%}" for r, e in slow.items()]
    step = step_line(record.result)
    if step is not None:
        notes.insert(0, f"{name}: step time {step}")
    return Panel(
        "Step time per rank",
        "step",
        "ms per step (each report window's mean)",
        series=tuple(series),
        y_from_zero=True,
        note="no step time recorded",
    ), notes


def ranks_figure(record: RunRecord) -> Figure:
    """A multi-rank run's ranks: step time per rank (stragglers marked) and, when it sampled its
    GPUs, each rank's utilisation."""
    steps, notes = step_time_panel(record)
    util = rank_util_panel(record)
    result = record.result
    return Figure(
        f"ranks-{result.name}",
        f"{result.name}: its {result.workers} ranks ({result.backend})",
        RANKS_CAPTION,
        (steps, *([util] if util is not None else [])),
        "Ranks",
        tuple(notes),
    )


def ranks_figures(records: Sequence[RunRecord]) -> list[Figure]:
    """One ranks figure per run that had more than one rank, by spec, backend, workers, repeat."""
    several = [r for r in records if len(r.ranks(wire.STEP_TIME)) > 1 or r.result.workers > 1]
    ordered = sorted(
        several,
        key=lambda r: (r.result.spec_name, r.result.framework, r.result.backend, r.result.workers,
                       r.result.repeat, r.result.name),
    )  # fmt: skip
    return [ranks_figure(record) for record in ordered]
