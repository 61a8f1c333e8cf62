"""Which training batches have their phases stamped, so the stamps stay under a budget of step time.

``next(schedule.starts)`` gives each batch its starter: a function for a stamped batch (it stamps
the batch's start on the clock, opening timed step ``step`` when given one, and returns the
clock's ``record``) and None for any other, so an unstamped batch runs no Python function of its
own. The first ``CALIBRATION_BATCHES`` are stamped; then, every ``RECHECK_EVERY`` stamped batches,
the schedule picks one batch in ``every`` so the stamps cost under ``STAMP_BUDGET`` of a step, and
cycles through a random pattern with that mean gap (phase totals are then scaled by batches /
stamped batches).
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Iterator

from mlbench_worker.timing.phase_clock import PhaseClock

Record = Callable[[str], None]
"""What a training step calls with each phase's name as the phase ends (None: not stamped)."""

STAMP_COST_S = 5e-6  # what one batch's stamps cost inside a real step (measured: 8 x ~0.6 us on CPU)
STAMP_COST_CUDA_S = 28e-6  # 9 CUDA events (8 phases and a timed step's end) at ~3 us of host time each
STAMP_BUDGET = 0.001  # the share of step time the stamps may take before batches are sampled
CALIBRATION_BATCHES = 32  # batches always stamped at the start (they measure the step time)
RECHECK_EVERY = 256  # stamped batches between two looks at the policy (step times drift)
MAX_SAMPLE_EVERY = 64
PATTERN_BATCHES = 4096  # the length of one cycle of the random pattern


class StampSchedule:
    """One batch in ``every`` stamped, at random gaps; ``sample_every`` fixes ``every`` (1: all),
    None picks it from the step time the stamps measure."""

    def __init__(
        self, clock: PhaseClock, *, stamp_cost_s: float, sample_every: int | None = None, seed: int = 0
    ) -> None:
        if sample_every is not None and sample_every < 1:
            raise ValueError(f"sample_every must be >= 1, got {sample_every}")
        self.clock = clock
        self.stamp_cost_s = stamp_cost_s
        self.stamped = 0
        self.every = 1
        self._fixed = sample_every
        self._rng = random.Random(seed)
        self._record: Record = clock.record
        self.starts: Iterator[Callable[[int | None], Record] | None]
        self._set_every(sample_every or 1)  # the default policy stamps everything while calibrating

    def _set_every(self, every: int) -> None:
        """Cycle through a pattern whose gaps between stamped batches are drawn uniformly from
        1..2*every-1 (mean ``every``)."""
        self.every = every
        pattern: list[Callable[[int | None], Record] | None] = []
        if every == 1:
            pattern.append(self._start)
        while every > 1 and len(pattern) < PATTERN_BATCHES:
            gap = self._rng.randint(1, 2 * every - 1)
            pattern += [None] * (gap - 1)
            pattern.append(self._start)
        self.starts = itertools.cycle(pattern)

    def _start(self, step: int | None = None) -> Record:
        self.stamped += 1
        if self._fixed is None and self.stamped % RECHECK_EVERY == CALIBRATION_BATCHES % RECHECK_EVERY:
            every = self.wanted_every()
            if every != self.every:
                self._set_every(every)
        self.clock.start(step)
        return self._record

    def wanted_every(self) -> int:
        """One batch in how many to stamp so the stamps cost under ``STAMP_BUDGET`` of a step."""
        step = sum(self.clock.totals.values()) / max(1, self.stamped - 1)  # seconds of a stamped batch
        wanted = self.stamp_cost_s / (STAMP_BUDGET * step) if step > 0 else 1.0
        return max(1, min(MAX_SAMPLE_EVERY, math.ceil(wanted)))

    def unstamp(self) -> None:
        """The stamped batch just started did not happen (the loader was exhausted)."""
        self.stamped -= 1
