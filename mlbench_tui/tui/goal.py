"""Progress towards a run's goal and idle-GPU detection: pure functions over numbers.

Kept apart from the widgets so the rules (what counts as progress for a 'min' metric such as
perplexity, which GPU idles beside busy ones) are testable on their own (the straggler rule is
``results.ranks``', shared with the CLI and the report); when a value meets the goal
and the ETA are ``results.goal``'s, shared with the CLI.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mlbench_tui.plan import GoalPlan
from mlbench_tui.results.goal import better, eta_s, meets
from mlbench_tui.results.ranks import STRAGGLER_FACTOR


@dataclass(frozen=True)
class GoalStatus:
    """Where a run stands against its goal (``fraction`` in 0..1)."""

    metric: str
    target: float
    direction: str
    best: float | None
    latest: float | None
    fraction: float
    reached: bool
    eta_s: float | None


def goal_status(goal: GoalPlan | None, points: Sequence[tuple[float, float]]) -> GoalStatus | None:
    """Progress of ``points`` ((wall time, value) in order) towards ``goal``.

    For a maximised metric (accuracy, BLEU) progress runs from 0 to the target; for a minimised one
    (perplexity) from the first value seen down to the target.
    """
    if goal is None:
        return None
    target, direction = goal.target, goal.direction
    values = [(t, v) for t, v in points if math.isfinite(v)]
    if not values:
        return GoalStatus(goal.metric, target, direction, None, None, 0.0, False, None)
    latest = values[-1][1]
    best = values[0][1]
    for _, v in values:
        if better(v, best, direction):
            best = v
    if direction == "min":
        start = values[0][1]
        span = start - target
        fraction = 1.0 if span <= 0 else (start - best) / span
    else:
        fraction = best / target if target > 0 else (1.0 if best >= target else 0.0)
    done = meets(best, target, direction)
    fraction = 1.0 if done else min(max(fraction, 0.0), 0.999)
    eta = None if done else eta_s(values, target, direction)
    return GoalStatus(goal.metric, target, direction, best, latest, fraction, done, eta)


def find_underused(utilisation: Mapping[int, float], factor: float = STRAGGLER_FACTOR) -> set[int]:
    """The straggler rule applied to hardware: ranks whose GPU utilisation is below the median of
    all ranks divided by ``factor`` (needs 2+ ranks; a rank at 0% beside busy ones is one)."""
    values = {r: u for r, u in utilisation.items() if math.isfinite(u)}
    if len(values) < 2:
        return set()
    median = statistics.median(values.values())
    return {r for r, u in values.items() if u * factor < median}


def goal_label(goal: GoalPlan | None) -> str:
    """``val_global_Prec@1 ≥ 80`` (``≤`` for a minimised metric); ``—`` without a goal."""
    if goal is None:
        return "—"
    op = "≤" if goal.direction == "min" else "≥"
    return f"{goal.metric} {op} {goal.target}"
