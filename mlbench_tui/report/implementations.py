"""Implementation as a comparison axis: for a task run more than one way (eager or CUDA graphs,
fp32 or bf16), time to accuracy and step time side by side for each way it ran.

A category is one implementation at one backend and worker count; its time to accuracy is the
mean over its runs that reached the goal, its step time the median of every recorded step, so
the steps that stamp the phase split and the first, compiling, steps weigh as little as they do.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from mlbench_tui.report.figure import GOAL_COLOUR, BarStack, Figure, Mark, Panel
from mlbench_tui.report.inputs import RunRecord
from mlbench_tui.report.scaling import outcome, outcome_line

CAPTION = (
    "Each bar is one way the task ran (eager or CUDA graphs, and its precision) at one backend and "
    "worker count. Time to accuracy is the mean over its runs that reached the goal (validation "
    "excluded); step time is the median over every recorded training step of every rank."
)
TIME_COLOUR, STEP_COLOUR = "#4C72B0", "#55A868"


def implementation(record: RunRecord) -> str:
    """How the run executed steps, in words: ``eager fp32``, ``CUDA graphs bf16``."""
    mode = "CUDA graphs" if record.result.implementation.cuda_graphs else "eager"
    return f"{mode} {record.result.precision}"


def _category(record: RunRecord) -> str:
    r = record.result
    return f"{r.backend} {r.workers}w {implementation(record)}"


def implementation_figure(task: str, records: Sequence[RunRecord]) -> Figure:
    """Time to accuracy and step time per implementation for one task's runs."""
    groups: dict[str, list[RunRecord]] = {}
    for record in sorted(records, key=lambda r: (r.result.backend, r.result.workers, implementation(r))):
        groups.setdefault(_category(record), []).append(record)
    categories = tuple(groups)
    times, steps, notes, marks = [], [], [], []
    for i, (category, members) in enumerate(groups.items()):
        reached = [m.result.time_to_accuracy_s for m in members if outcome(m.result) is None]
        times.append(statistics.fmean(t for t in reached if t is not None) if reached else 0.0)
        if not reached:
            notes.append(f"{category}: no run reached the goal ({outcome_line(members[0].result)})")
            marks.append(Mark(float(i), 0.0, members[0].result.state.value, GOAL_COLOUR))
        values = [m.result.step_time_s * 1000 for m in members if m.result.step_time_s is not None]
        steps.append(statistics.median(values) if values else 0.0)  # each run's median after warm-up
    task_name = records[0].result.task_name or task
    panels = (
        Panel("Time to accuracy", "implementation", "seconds", categories=categories,
              stacks=(BarStack("time to accuracy", tuple(times), TIME_COLOUR),), marks=tuple(marks),
              y_from_zero=True),
        Panel("Step time", "implementation", "milliseconds per step (median)", categories=categories,
              stacks=(BarStack("step time", tuple(steps), STEP_COLOUR),) if any(steps) else (),
              y_from_zero=True, note="no step time was recorded"),
    )  # fmt: skip
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
