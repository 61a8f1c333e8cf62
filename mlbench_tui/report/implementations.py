"""Implementation as a comparison axis: for a task run more than one way (eager or CUDA graphs,
fp32 or bf16), time to accuracy and step time side by side for each way it ran.

A category is one implementation at one backend and worker count. Its time to accuracy is the
olympic mean over its runs that reached the goal, with the CUDA-graph capture stacked on top (the
seconds a graph run pays before its first step, apart from the time to accuracy): end to end,
that is what a graph run costs. Its step time is the median of every recorded step of those runs.
Each bar carries its value and its ratio to the eager run of the same precision, backend and
workers; a category whose runs all failed gets no bar, only a mark in every panel saying so (a run
that never trained has no step time worth comparing).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from mlbench_tui.formatting import format_duration, format_step
from mlbench_tui.report.figure import GOAL_COLOUR, BarStack, Figure, Mark, Panel
from mlbench_tui.report.inputs import RunRecord
from mlbench_tui.report.scaling import outcome, outcome_line
from mlbench_tui.results.scoring import olympic_mean

CAPTION = (
    "Each bar is one way the task ran (eager or CUDA graphs, and its precision) at one backend and "
    "worker count. Time to accuracy is the olympic mean over its runs that reached the goal "
    "(validation excluded), with the CUDA-graph capture stacked on top (hatched): end to end, "
    "what a graph run costs. Step time is the median over every recorded training step of those "
    "runs. Over each bar, its value and how many times faster it is than eager of the same "
    "precision, backend and workers (below 1x: slower). A way whose runs all failed has no bar, "
    "only a cross saying so in every panel."
)
TIME_COLOUR, CAPTURE_COLOUR, STEP_COLOUR = "#4C72B0", "#8172B3", "#55A868"


def implementation(record: RunRecord) -> str:
    """How the run executed steps, in words: ``eager fp32``, ``CUDA graphs bf16``."""
    mode = "CUDA graphs" if record.result.implementation.cuda_graphs else "eager"
    return f"{mode} {record.result.precision}"


def _category(record: RunRecord) -> str:
    r = record.result
    return f"{r.backend} {r.workers}w {implementation(record)}"


def _eager_of(record: RunRecord) -> str:
    r = record.result
    return f"{r.backend} {r.workers}w eager {r.precision}"


def _ratio(baseline: float | None, value: float | None) -> str:
    """``1.21x`` faster than the baseline (the bar is the baseline: no ratio)."""
    if baseline is None or value is None or value <= 0 or baseline == value:
        return ""
    return f" ({baseline / value:.2f}x)"


def implementation_figure(task: str, records: Sequence[RunRecord]) -> Figure:
    """Time to accuracy (capture stacked) and step time per implementation for one task's runs."""
    groups: dict[str, list[RunRecord]] = {}
    for record in sorted(records, key=lambda r: (r.result.backend, r.result.workers, implementation(r))):
        groups.setdefault(_category(record), []).append(record)
    categories = tuple(groups)
    trained, capture, steps, totals, notes, marks = [], [], [], {}, [], []
    for i, (category, members) in enumerate(groups.items()):
        reached = [m for m in members if outcome(m.result) is None]
        times = [m.result.time_to_accuracy_s for m in reached if m.result.time_to_accuracy_s is not None]
        captures = [m.result.graph_capture_s or 0.0 for m in reached]
        tta = olympic_mean(times) if times else None
        cap = olympic_mean(captures) if times and any(captures) else 0.0
        trained.append(tta or 0.0)
        capture.append(cap)
        values = [m.result.step_time_s * 1000 for m in reached if m.result.step_time_s is not None]
        steps.append(statistics.median(values) if values else 0.0)
        totals[category] = ((tta + cap) if tta is not None else None, steps[-1] / 1000 if values else None)
        if not reached:
            why = outcome_line(members[0].result) or "no run reached the goal"
            notes.append(f"{category}: no run reached the goal ({why}); no bar is drawn")
            marks.append(Mark(float(i), 0.0, members[0].result.state.value, GOAL_COLOUR))
    time_labels, step_labels = [], []
    for category, members in groups.items():
        total, step = totals[category]
        base_total, base_step = totals.get(_eager_of(members[0]), (None, None))
        time_labels.append("" if total is None else format_duration(total) + _ratio(base_total, total))
        step_labels.append("" if step is None else format_step(step) + _ratio(base_step, step))
    task_name = records[0].result.task_name or task
    stacks = [BarStack("time to accuracy", tuple(trained), TIME_COLOUR)]
    if any(capture):
        stacks.append(BarStack("CUDA graph capture", tuple(capture), CAPTURE_COLOUR, "//"))
    panels = (
        Panel(
            "Time to accuracy, end to end",
            "implementation",
            "seconds",
            categories=categories,
            stacks=tuple(stacks),
            marks=tuple(marks),
            labels=tuple(time_labels),
            y_from_zero=True,
        ),
        Panel(
            "Step time",
            "implementation",
            "milliseconds per step (median)",
            categories=categories,
            stacks=(BarStack("step time", tuple(steps), STEP_COLOUR),) if any(steps) else (),
            marks=tuple(marks),
            labels=tuple(step_labels),
            y_from_zero=True,
            note="no step time was recorded",
        ),
    )
    return Figure(
        f"implementations-{task}",
        f"Task {task} ({task_name}): time to accuracy and step time by implementation",
        CAPTION,
        panels,
        "Implementations",
        tuple(notes),
    )


def implementation_figures(records: Sequence[RunRecord]) -> list[Figure]:
    """One figure per task that ran in more than one implementation."""
    by_task: dict[str, list[RunRecord]] = {}
    for record in records:
        by_task.setdefault(record.result.task, []).append(record)
    return [
        implementation_figure(task, members)
        for task, members in sorted(by_task.items())
        if len({implementation(m) for m in members}) > 1
    ]
