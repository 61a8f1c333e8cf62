"""The goal rules every view shares: when a value meets a target, which of two values is better,
and when a metric moving as it does will reach its target (the ETA).

``direction`` is ``"max"`` (accuracy, BLEU: reach at least ``target``) or ``"min"`` (perplexity:
reach at most ``target``). Pure functions over numbers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

ETA_WINDOW = 4  # points the ETA extrapolates over: the trend of the last few validations


def meets(value: float, target: float, direction: str) -> bool:
    """True when ``value`` satisfies the goal (``max``: at least target; ``min``: at most)."""
    if math.isnan(value):
        return False
    return value <= target if direction == "min" else value >= target


def better(value: float, than: float, direction: str) -> bool:
    """True when ``value`` is better than ``than`` for a metric maximised or minimised."""
    return value < than if direction == "min" else value > than


def eta_s(
    points: Sequence[tuple[float, float]], target: float, direction: str, *, window: int = ETA_WINDOW
) -> float | None:
    """Seconds until the metric reaches ``target``, extrapolating linearly over the last
    ``window`` ``(wall time, value)`` points: 0 once the last value meets it, None with fewer
    than two points or while the metric is not moving towards the target."""
    recent = [(t, v) for t, v in points if math.isfinite(v)][-window:]
    if len(recent) < 2:
        return None
    (t0, v0), (t1, v1) = recent[0], recent[-1]
    if meets(v1, target, direction):
        return 0.0
    if t1 <= t0:
        return None
    rate = (v1 - v0) / (t1 - t0)
    remaining = target - v1
    if rate == 0 or (remaining > 0) != (rate > 0):
        return None
    return remaining / rate
