"""Per-run figures of a time-to-accuracy run: the goal metric against training time with the
goal line, the loss, step time per rank with stragglers marked, and GPU telemetry when recorded.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from mlbench_worker import wire

from mlbench_tui.formatting import format_duration
from mlbench_tui.report.anchors import published_for
from mlbench_tui.report.figure import (
    GOAL_COLOUR,
    SPARE_COLOURS,
    Figure,
    LineStyle,
    Mark,
    Panel,
    RefLine,
    Series,
    backend_colour,
)
from mlbench_tui.report.gpu import few_samples_note, gpu_panels
from mlbench_tui.report.inputs import RunRecord
from mlbench_tui.report.scaling import outcome_line
from mlbench_tui.results.ranks import (
    RANK_METRICS,
    STRAGGLER_FACTOR,
    RankFigures,
    against_others,
    settle_ranks,
)
from mlbench_tui.results.table import step_line
from mlbench_tui.results.telemetry import gpu_util_text
from mlbench_tui.results.time_to_accuracy import MetricPoint

MAX_RANK_LINES = 8  # above this, the ranks' median and min-max band, plus the stragglers
RUN_CAPTION = (
    "Training time excludes validation. The goal metric is the global (all-reduced) validation "
    "value after each evaluation; the dashed line is the goal. Step time is per rank (one training "
    "step, data loading to optimizer step); a rank whose busy time per step (its step less its "
    "communication) is more than 25% above the other ranks' median held the others up and is "
    "marked as a straggler. GPU panels (when the run sampled its GPUs) plot against time since "
    "training started: utilisation, memory in use on the GPU and the peak PyTorch allocated, and "
    "power draw."
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


def goal_panel(record: RunRecord, colour: str) -> Panel:
    result, goal = record.result, record.result.goal
    assert goal is not None
    values = record.lowest_rank(goal.metric)
    train = {p.step: p.value for p in record.lowest_rank(wire.TIME_TRAIN)}
    points = [(train[p.step], p.value) for p in values if p.step in train]
    x_label = "training time (s)"
    if not points and values:  # no training clock: fall back to epochs
        points = [(p.epoch or 0.0, p.value) for p in values]
        x_label = "epoch"
    metric = goal.metric.removeprefix("val_global_")
    op = ">=" if goal.direction == "max" else "<="
    marks = []
    if result.reached and result.time_to_accuracy_s is not None and x_label.startswith("training"):
        reached_at = next((y for x, y in points if x >= result.time_to_accuracy_s - 1e-6), goal.target)
        marks.append(
            Mark(
                result.time_to_accuracy_s,
                reached_at,
                f"reached in {format_duration(result.time_to_accuracy_s)}",
                GOAL_COLOUR,
                "*",
            )
        )
    series = (
        (Series(metric, tuple(x for x, _ in points), tuple(y for _, y in points), colour),) if points else ()
    )
    return Panel(
        f"Validation {metric}",
        x_label,
        f"{metric} (%)" if "Prec" in metric else metric,  # accuracy in percent; perplexity, BLEU bare
        series=series,
        marks=tuple(marks),
        refs=(RefLine(f"goal {op} {goal.target:g}", goal.target, GOAL_COLOUR),),
        note="no evaluation recorded",
    )


def loss_panel(record: RunRecord, colour: str) -> Panel:
    series = []
    lines: tuple[tuple[str, str, LineStyle], ...] = (
        (wire.TRAIN_LOSS, "train", "-"),
        (wire.VAL_GLOBAL_LOSS, "validation", "--"),
    )
    for name, label, style in lines:
        x, y = _xy(record.lowest_rank(name))
        if x:
            series.append(Series(label, x, y, colour, style, marker=None if label == "train" else "o"))
    refs = tuple(RefLine(p.label, p.value) for p in published_for(record.result.task, "loss"))
    return Panel(
        "Loss", "step", "loss", series=tuple(series), refs=refs if series else (), note="no loss recorded"
    )


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


def run_figure(record: RunRecord, colours: dict[str, str]) -> Figure:
    result = record.result
    colour = backend_colour(result.backend, colours)
    steps, notes = step_time_panel(record)
    why = outcome_line(result)
    if why is not None:
        notes.insert(0, f"{result.name}: {why}")
    if (few := few_samples_note(record)) is not None:
        notes.append(few)
    util = gpu_util_text(result.telemetry) if result.telemetry is not None else None
    if util is not None:
        notes.append(f"{result.name}: GPU utilisation {util} (mean over ranks while the run was timed)")
    panels = (goal_panel(record, colour), loss_panel(record, colour), steps, *gpu_panels(record))
    head = f"{result.name} ({result.backend}, {result.workers} worker{'s' if result.workers != 1 else ''}"
    state = (
        ""
        if why is None
        else f", {result.state.value}" + ("" if result.reached is not False else ", goal missed")
    )
    return Figure(f"run-{result.name}", head + state + ")", RUN_CAPTION, panels, "Runs", tuple(notes))


def run_figures(records: Sequence[RunRecord], colours: dict[str, str]) -> list[Figure]:
    """One figure per time-to-accuracy run, by spec, framework, backend, workers and repeat."""
    ordered = sorted(
        records,
        key=lambda r: (
            r.result.spec_name,
            r.result.framework,
            r.result.backend,
            r.result.workers,
            r.result.repeat,
            r.result.name,
        ),
    )
    return [run_figure(record, colours) for record in ordered]
