"""Progress towards a run's goal, its ETA, and straggler detection: pure functions over numbers.

Kept apart from the widgets so the rules (what counts as progress for a 'min' metric such as
perplexity, when an ETA is meaningful, which rank is a straggler) are testable on their own.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

STRAGGLER_FACTOR = 1.25  # a rank is a straggler when its step time exceeds the median by 25%


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


def is_better(direction: str, a: float, b: float) -> bool:
    """True when ``a`` is better than ``b`` for a metric maximised or minimised."""
    return a < b if direction == "min" else a > b


def reached(direction: str, value: float, target: float) -> bool:
    return value <= target if direction == "min" else value >= target


def goal_status(
    goal: Mapping[str, object] | None, points: Sequence[tuple[float, float]]
) -> GoalStatus | None:
    """Progress of ``points`` ((wall time, value) in order) towards ``goal`` ({metric, target, direction}).

    For a maximised metric (accuracy, BLEU) progress runs from 0 to the target; for a minimised one
    (perplexity) from the first value seen down to the target. The ETA extrapolates the rate of
    improvement over the last few points and is None while the metric is not improving.
    """
    if not goal or "target" not in goal:
        return None
    target = float(goal["target"])  # type: ignore[arg-type]
    direction = str(goal.get("direction", "max"))
    metric = str(goal.get("metric", ""))
    values = [(t, v) for t, v in points if math.isfinite(v)]
    if not values:
        return GoalStatus(metric, target, direction, None, None, 0.0, False, None)
    latest = values[-1][1]
    best = values[0][1]
    for _, v in values:
        if is_better(direction, v, best):
            best = v
    if direction == "min":
        start = values[0][1]
        span = start - target
        fraction = 1.0 if span <= 0 else (start - best) / span
    else:
        fraction = best / target if target > 0 else (1.0 if best >= target else 0.0)
    done = reached(direction, best, target)
    fraction = 1.0 if done else min(max(fraction, 0.0), 0.999)
    return GoalStatus(
        metric, target, direction, best, latest, fraction, done, None if done else _eta(values, target)
    )


def _eta(values: Sequence[tuple[float, float]], target: float) -> float | None:
    window = values[-4:]
    if len(window) < 2:
        return None
    (t0, v0), (t1, v1) = window[0], window[-1]
    if t1 <= t0:
        return None
    rate = (v1 - v0) / (t1 - t0)
    remaining = target - v1
    if rate == 0 or (remaining > 0) != (rate > 0):
        return None
    return remaining / rate


def find_stragglers(step_times: Mapping[int, float], factor: float = STRAGGLER_FACTOR) -> set[int]:
    """Ranks whose step time is more than ``factor`` times the median of all ranks (needs 2+ ranks)."""
    times = {r: t for r, t in step_times.items() if math.isfinite(t) and t > 0}
    if len(times) < 2:
        return set()
    median = statistics.median(times.values())
    return {r for r, t in times.items() if t > median * factor}


def goal_label(goal: Mapping[str, object] | None) -> str:
    """``val_global_Prec@1 ≥ 80`` (``≤`` for a minimised metric); ``—`` without a goal."""
    if not goal:
        return "—"
    op = "≤" if goal.get("direction") == "min" else "≥"
    return f"{goal.get('metric', '?')} {op} {goal.get('target', '?')}"


def format_duration(seconds: float | None) -> str:
    """``42s``, ``3m07s``, ``1h02m``, ``2d03h``; an em dash when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "—"
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"
