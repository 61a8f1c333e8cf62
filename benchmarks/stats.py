"""Statistics the side-by-side benchmarks share (a helper module, not a benchmark)."""

from __future__ import annotations

import math
import random
import statistics


def median_interval(values: list[float], draws: int = 2000) -> tuple[float, float]:
    """A seeded bootstrap 95% interval of the median of ``values``."""
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(draws))
    return medians[int(0.025 * draws)], medians[int(0.975 * draws) - 1]


def quantile_interval(values: list[float], q: float) -> tuple[float, float]:
    """A distribution-free 95% interval of the ``q`` quantile of ``values`` (order statistics).

    The number of samples below the true quantile is Binomial(n, q); the interval runs between
    the order statistics whose ranks (from 1) are n*q -/+ 1.96 standard deviations of that count.
    With few samples a tail quantile is barely pinned down: the p99 of 350 samples is the
    4th-worst, and its interval spans from the 9th-worst to the worst.
    """
    ordered = sorted(values)
    n = len(ordered)
    if not n:
        return math.nan, math.nan
    spread = 1.96 * math.sqrt(n * q * (1.0 - q))
    low = max(0, math.floor(n * q - spread) - 1)  # ranks from 1, indexes from 0
    high = min(n - 1, math.ceil(n * q + spread) - 1)
    return ordered[low], ordered[high]
