"""Statistics the side-by-side benchmarks share (a helper module, not a benchmark)."""

from __future__ import annotations

import random
import statistics


def median_interval(values: list[float], draws: int = 2000) -> tuple[float, float]:
    """A seeded bootstrap 95% interval of the median of ``values``."""
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(draws))
    return medians[int(0.025 * draws)], medians[int(0.975 * draws) - 1]
