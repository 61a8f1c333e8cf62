"""The time-to-accuracy table: the runs of specs that ran one worker count, one row per
configuration, where a scaling figure would draw a single point.

Each row says which goal its time is on (light or full) beside the published baseline of its task,
and says so when the two are not on the same goal.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from mlbench_worker import wire

from mlbench_tui.formatting import format_duration, format_step
from mlbench_tui.report.anchors import anchors_for
from mlbench_tui.report.inputs import RunRecord
from mlbench_tui.report.scaling import by_spec, goal_words, scales
from mlbench_tui.results.scoring import config_key, score_configs

CAPTION = (
    "Specs that ran one worker count, one row per configuration (a scaling figure would have one "
    "point). Time to accuracy is the olympic mean of the runs that reached the goal (validation "
    "excluded); capture is CUDA-graph capture before training, apart from it; step time is the "
    "median over every recorded step. MLBench's published baselines are on the task's full goal: a "
    "row on another goal says its time is not comparable with them."
)


@dataclass(frozen=True)
class TimeRow:
    """One configuration of a one-worker-count spec, as the table shows it."""

    spec: str
    task: str
    goal: str
    configuration: str
    runs: str
    time_to_accuracy: str
    capture: str
    step: str
    communication: str
    baseline: str
    reached: bool
    left_out: str = ""  # the runs left out of its time, and why


def _baseline(task: str, goal_metric: str, goal_target: float) -> str:
    anchors = anchors_for(task)
    if not anchors:
        return "-"
    best = min(anchors, key=lambda a: a.time_to_accuracy_s)
    text = f"{best.source} {best.hardware}: {format_duration(best.time_to_accuracy_s)}"
    text += f" to {best.metric.removeprefix('val_global_')} {best.target:g}"
    if (best.metric, best.target) != (goal_metric, goal_target):
        text += " (another goal: not comparable)"
    return text


def time_rows(records: Sequence[RunRecord]) -> list[TimeRow]:
    """A row per configuration of every spec among ``records`` (runs with a goal) that ran one
    worker count, by spec."""
    rows = []
    for spec, members in by_spec(records).items():
        if scales(members):
            continue
        results = [m.result for m in members]
        for score in score_configs(results):
            mine = [
                m
                for m in members
                if config_key(m.result)
                == (
                    score.spec_name,
                    score.framework,
                    score.backend,
                    score.workers,
                    score.variant,
                    score.network,
                )
            ]
            first = mine[0].result
            goal = first.goal
            if goal is None:
                continue
            reached = [m for m in mine if m.result.reached and m.result.time_to_accuracy_s is not None]
            captures = [m.result.graph_capture_s for m in reached if m.result.graph_capture_s]
            steps = [p.value for m in reached for p in m.points(wire.STEP_TIME)]
            comm = [m.result.time_split.communication_fraction for m in reached if m.result.time_split]
            tta = format_duration(score.time_to_accuracy_s)
            if score.reached > 1 and score.min_s is not None and score.max_s is not None:
                tta += f" ({format_duration(score.min_s)} to {format_duration(score.max_s)})"
            framework = "" if first.framework == "pytorch" else f"{first.framework} "
            rows.append(
                TimeRow(
                    spec=spec,
                    task=f"{first.task} {first.task_name}".strip(),
                    goal=goal_words(goal),
                    configuration=f"{framework}{first.backend} {first.workers}w {first.variant}",
                    runs=f"{score.reached} of {score.runs}",
                    time_to_accuracy=tta if score.reached else "not reached",
                    capture=format_duration(statistics.fmean(captures)) if captures else "-",
                    step=format_step(statistics.median(steps)) if steps else "-",
                    communication=f"{100 * statistics.fmean(comm):.0f}%" if comm else "-",
                    baseline=_baseline(first.task, goal.metric, goal.target),
                    reached=score.reached > 0,
                    left_out=", ".join(f"{o.name} ({o.reason})" for o in score.left_out),
                )
            )
    return rows
