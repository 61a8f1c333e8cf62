"""Quantiles of measured samples, one definition for every figure that has a p10, p50 or p99.

Linear interpolation between the two nearest values (numpy's default, nccl-tests' and most
tools'), so the median of an even count is the midpoint; a weighted form for values that stand
for several samples each (a report window's mean for each of its steps).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence


def quantile(ordered: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of sorted, non-empty ``ordered``, linearly interpolated between
    the two nearest values (numpy's default), so the median of an even count is the midpoint."""
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def weighted_quantile(pairs: Sequence[tuple[float, int]], q: float) -> float:
    """``quantile`` of values each repeated ``weight`` times (a report window's mean stands for
    each of its steps), without building the repeated list."""
    ordered = sorted(pairs)
    total = sum(w for _, w in ordered)
    position = q * (total - 1)

    def at(index: float) -> float:
        seen = 0
        for value, weight in ordered:
            seen += weight
            if index < seen:
                return value
        return ordered[-1][0]

    low = math.floor(position)
    return at(low) + (at(low + 1) - at(low)) * (position - low) if low + 1 < total else at(low)


def relative_spread(values: Iterable[float]) -> float | None:
    """Half the p10-p90 range over the median (a within-run spread); None below two values."""
    ordered = sorted(values)
    if len(ordered) < 2:
        return None
    middle = quantile(ordered, 0.5)
    return (quantile(ordered, 0.9) - quantile(ordered, 0.1)) / 2 / middle if middle > 0 else None
