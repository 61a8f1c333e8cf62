"""One figure per task with its runs overlaid, one line per run, as W&B and TensorBoard draw them:
the goal metric against training time, the loss, the step time and, where the runs sampled their
GPUs, utilisation, memory, power and the energy used since training started, with each run's
energy to the goal marked.

Training series are the run's global values (every rank reports the same validation metric);
step time is the median over the run's ranks at each step; GPU series are the run's first rank's
(the ranks figure of a multi-rank run draws every rank's); energy sums every rank's GPU.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from mlbench_worker import sysmetrics as sm
from mlbench_worker import wire

from mlbench_tui.formatting import format_duration, format_energy
from mlbench_tui.report.anchors import published_for
from mlbench_tui.report.figure import GOAL_COLOUR, Figure, LineStyle, Mark, Panel, RefLine, Series, run_colour
from mlbench_tui.report.gpu import (
    MIB_PER_GIB,
    cumulative_energy,
    energy_unit,
    gpu_zero,
    has_gpu_telemetry,
    time_label,
    untrained_note,
)
from mlbench_tui.report.inputs import RunRecord
from mlbench_tui.report.scaling import outcome_line
from mlbench_tui.report.training import stragglers
from mlbench_tui.results.telemetry import gpu_util_text
from mlbench_tui.results.time_to_accuracy import MetricPoint

CAPTION = (
    "The runs of one task overlaid, one colour per run. The goal metric is the global (all-reduced) "
    "validation value after each evaluation, against training time (validation excluded); a dashed "
    "horizontal line is a goal, a star where a run reached it, a cross where a failed run stopped. "
    "Loss is the training loss per step (solid) and the validation loss (dashed). Step time is one "
    "training step, data loading to optimizer step, the median over the run's ranks. GPU panels "
    "plot the run's first rank against time since its training started (negative: starting up): "
    "utilisation, memory in use on the GPU, power draw; energy is every rank's GPU from training's "
    "start (NVML's energy counter, else the integrated power), a star at the goal."
)


def _metric_label(metric: str) -> str:
    return metric.removeprefix("val_global_")


def _goal_panel(records: Sequence[RunRecord], names: dict[str, str]) -> Panel:
    goal = next(r.result.goal for r in records if r.result.goal is not None)
    metric = _metric_label(goal.metric)
    series, marks, refs = [], [], []
    for i, record in enumerate(records):
        result = record.result
        train = {p.step: p.value for p in record.lowest_rank(wire.TIME_TRAIN)}
        points = [(train[p.step], p.value) for p in record.lowest_rank(goal.metric) if p.step in train]
        if not points:
            continue
        colour = run_colour(i)
        x, y = tuple(t for t, _ in points), tuple(v for _, v in points)
        series.append(Series(names[record.run_id], x, y, colour, marker="." if len(points) < 40 else None))
        if result.reached and result.time_to_accuracy_s is not None:
            at = next((v for t, v in points if t >= result.time_to_accuracy_s - 1e-6), points[-1][1])
            marks.append(
                Mark(result.time_to_accuracy_s, at, format_duration(result.time_to_accuracy_s), colour, "*")
            )
        elif outcome_line(result) is not None:
            marks.append(Mark(x[-1], y[-1], result.state.value, colour, "x"))
    for target in sorted(
        {
            (r.result.goal.target, r.result.goal.kind, r.result.goal.direction)
            for r in records
            if r.result.goal is not None
        }
    ):
        value, kind, direction = target
        op = ">=" if direction == "max" else "<="
        refs.append(RefLine(f"goal {op} {value:g} ({kind})", value, GOAL_COLOUR))
    return Panel(
        f"Validation {metric}",
        "training time (s)",
        f"{metric} (%)" if "Prec" in metric else metric,
        series=tuple(series),
        marks=tuple(marks),
        refs=tuple(refs),
        note="no evaluation recorded",
    )


def _loss_panel(records: Sequence[RunRecord], names: dict[str, str]) -> Panel:
    series = []
    for i, record in enumerate(records):
        lines: tuple[tuple[str, LineStyle, str], ...] = (
            (wire.TRAIN_LOSS, "-", names[record.run_id]),
            (wire.VAL_GLOBAL_LOSS, "--", "_"),  # "_": no legend entry of its own
        )
        for metric, style, label in lines:
            kept = [p for p in record.lowest_rank(metric) if p.step is not None]
            if kept:
                x, y = tuple(float(p.step or 0) for p in kept), tuple(p.value for p in kept)
                series.append(Series(label, x, y, run_colour(i), style, marker=None if style == "-" else "o"))
    task = records[0].result.task
    refs = tuple(RefLine(p.label, p.value) for p in published_for(task, "loss")) if series else ()
    return Panel("Loss", "step", "loss", series=tuple(series), refs=refs, note="no loss was recorded")


def _median_by_step(points: Sequence[MetricPoint]) -> tuple[tuple[float, ...], tuple[float, ...]]:
    by_step: dict[int, list[float]] = {}
    for p in points:
        if p.step is not None:
            by_step.setdefault(p.step, []).append(p.value * 1000)
    steps = sorted(by_step)
    return tuple(float(s) for s in steps), tuple(statistics.median(by_step[s]) for s in steps)


def _step_panel(records: Sequence[RunRecord], names: dict[str, str]) -> Panel:
    series = []
    for i, record in enumerate(records):
        x, y = _median_by_step(record.points(wire.STEP_TIME))
        if x:
            series.append(Series(names[record.run_id], x, y, run_colour(i), marker=None))
    return Panel(
        "Step time",
        "step",
        "milliseconds per step",
        series=tuple(series),
        y_from_zero=True,
        note="no step time was recorded",
    )


def _gpu_series(record: RunRecord, name: str, label: str, colour: str, scale: float = 1.0) -> Series | None:
    zero = gpu_zero(record)
    ranks = record.ranks(name)
    if zero is None or not ranks:
        return None
    samples = sorted((p.t, p.value) for p in record.points(name, ranks[0]) if p.t is not None)
    if len(samples) < 2:  # one sample has no course over time to draw
        return None
    return Series(
        label,
        tuple(t - zero for t, _ in samples),
        tuple(v * scale for _, v in samples),
        colour,
        marker="." if len(samples) < 30 else None,
    )


def _gpu_panels(records: Sequence[RunRecord], names: dict[str, str]) -> list[Panel]:
    label = time_label(records)
    panels = []
    for title, metric, y_label, scale in (
        ("GPU utilisation", sm.GPU_UTIL, "utilisation (%)", 1.0),
        ("GPU memory", sm.GPU_MEM_USED_MIB, "memory in use (GiB)", 1 / MIB_PER_GIB),
        ("GPU power", sm.GPU_POWER_W, "power (W)", 1.0),
    ):
        drawn = [
            s
            for i, r in enumerate(records)
            if (s := _gpu_series(r, metric, names[r.run_id], run_colour(i), scale))
        ]
        corner = ""
        if metric == sm.GPU_MEM_USED_MIB:
            totals = sorted({p.value for r in records for p in r.metrics.get(sm.GPU_MEM_TOTAL_MIB, ())})
            corner = f"GPU total: {totals[-1] / MIB_PER_GIB:,.1f} GiB" if totals else ""
        panels.append(
            Panel(
                title,
                label,
                y_label,
                series=tuple(drawn),
                y_from_zero=True,
                corner=corner,
                note="fewer than two GPU samples were taken",
            )
        )
    return panels


def _energy_panel(records: Sequence[RunRecord], names: dict[str, str]) -> tuple[Panel, list[str]]:
    curves = {
        r.run_id: (zero, curve)
        for r in records
        if (zero := gpu_zero(r)) is not None and len(curve := cumulative_energy(r, zero)) >= 2
    }
    top = max((j for _, curve in curves.values() for _, j in curve), default=0.0)
    unit, factor = energy_unit(top)
    series, marks, notes = [], [], []
    for i, record in enumerate(records):
        if record.run_id not in curves:
            continue
        zero, curve = curves[record.run_id]
        colour = run_colour(i)
        series.append(
            Series(
                names[record.run_id],
                tuple(t - zero for t, _ in curve),
                tuple(j * factor for _, j in curve),
                colour,
                marker=None,
            )
        )
        goal = record.clock.goal
        at_goal = next((j for t, j in curve if t == goal), None)
        if goal is not None and at_goal is not None:
            marks.append(Mark(goal - zero, at_goal * factor, format_energy(at_goal), colour, "*"))
            notes.append(f"{record.result.name}: energy to the goal {format_energy(at_goal)} (all ranks)")
    panel = Panel(
        "Energy since training started",
        time_label(records),
        f"energy ({unit})",
        series=tuple(series),
        marks=tuple(marks),
        y_from_zero=True,
        note="fewer than two energy or power samples were taken",
    )
    return panel, notes


def short_names(records: Sequence[RunRecord]) -> dict[str, str]:
    """Each run's legend label: its name without the prefix every run of the figure shares."""
    names = [r.result.name for r in records]
    prefix = ""
    if len(names) > 1:
        first = names[0]
        while prefix != first and all(n.startswith(first[: len(prefix) + 1]) for n in names):
            prefix = first[: len(prefix) + 1]
        prefix = prefix[: prefix.rfind("-") + 1] if "-" in prefix else ""
    return {r.run_id: (r.result.name[len(prefix) :] or r.result.name) for r in records}


def _notes(records: Sequence[RunRecord]) -> list[str]:
    notes = []
    for record in records:
        result = record.result
        if (why := outcome_line(result)) is not None:
            notes.append(f"{result.name}: {why}")
        if (untrained := untrained_note(record)) is not None:
            notes.append(untrained)
        telemetry = result.telemetry
        util = gpu_util_text(telemetry) if telemetry is not None else None
        if telemetry is not None and util is not None:
            timed = (
                " (mean over ranks while the run was timed)" if telemetry.mean_gpu_util is not None else ""
            )
            notes.append(f"{result.name}: GPU utilisation {util}{timed}")
        slow = stragglers(record)
        if slow:
            ranks = ", ".join(f"rank {r} (+{e:.0%})" for r, e in slow.items())
            notes.append(f"{result.name}: {ranks} held the others up (its ranks figure below)")
    return notes


def task_figure(task: str, records: Sequence[RunRecord]) -> Figure:
    """The overlay figure of one task's runs (in the order given)."""
    names = short_names(records)
    panels = [_goal_panel(records, names), _loss_panel(records, names), _step_panel(records, names)]
    energy_notes: list[str] = []
    if any(has_gpu_telemetry(r) for r in records):  # CPU runs: no GPU panels to leave out
        energy, energy_notes = _energy_panel(records, names)
        panels += [*_gpu_panels(records, names), energy]
    first = records[0].result
    count = f"{len(records)} run{'s' if len(records) != 1 else ''}"
    return Figure(
        f"training-{task}",
        f"Task {task} ({first.task_name or task}): training, {count}",
        CAPTION,
        tuple(panels),
        "Training",
        tuple(_notes(records) + energy_notes),
    )


def task_figures(records: Sequence[RunRecord]) -> list[Figure]:
    """One overlay figure per task among ``records`` (runs with a goal), its runs by spec, way of
    running, backend, workers and repeat."""
    by_task: dict[str, list[RunRecord]] = {}
    for record in records:
        by_task.setdefault(record.result.task, []).append(record)
    figures = []
    for task, members in sorted(by_task.items()):
        members.sort(
            key=lambda r: (
                r.result.spec_name,
                r.result.variant,
                r.result.backend,
                r.result.workers,
                r.result.repeat,
                r.result.name,
            )
        )
        figures.append(task_figure(task, members))
    return figures
