"""The two translation learning-rate schedules, as functions of the optimizer step.

``GNMTSchedule`` is MLPerf's ``WarmupMultiStepLR``: an exponential warm-up over
``warmup_steps`` (from 1% of ``lr``: ``lr * 0.01 ** ((warmup - step) / warmup)``), then the rate
is multiplied by ``decay_factor`` once past ``decay_start`` of the training steps and every
``decay_interval`` of them afterwards, at most ``decay_steps`` times. ``InverseSqrtSchedule``
is the Transformer's (fairseq's ``inverse_sqrt``): linear warm-up from ``init_lr`` to ``lr``
over ``warmup_steps``, then ``lr * sqrt(warmup_steps / step)``.
"""

from __future__ import annotations

import math


class GNMTSchedule:
    """Exponential warm-up, then step decay from a fraction of the total training steps."""

    def __init__(
        self,
        *,
        lr: float,
        total_steps: int,
        warmup_steps: int = 200,
        decay_start: float = 0.4,
        decay_interval: float = 0.05,
        decay_steps: int = 4,
        decay_factor: float = 0.5,
    ) -> None:
        self.lr = lr
        self.warmup_steps = max(0, warmup_steps)
        self.decay_start = int(decay_start * total_steps)
        self.decay_interval = max(1, int(decay_interval * total_steps))
        self.decay_steps = decay_steps
        self.decay_factor = decay_factor

    def __call__(self, step: int) -> float:
        """The learning rate of optimizer step ``step`` (0-based)."""
        if step < self.warmup_steps:
            return self.lr * 0.01 ** ((self.warmup_steps - step) / self.warmup_steps)
        if step <= self.decay_start:
            return self.lr
        decays = min(self.decay_steps, (step - self.decay_start) // self.decay_interval + 1)
        return self.lr * self.decay_factor**decays


class InverseSqrtSchedule:
    """Linear warm-up to ``lr``, then decay proportional to the inverse square root of the step."""

    def __init__(self, *, lr: float, warmup_steps: int = 1000, init_lr: float = 0.0) -> None:
        self.lr = lr
        self.warmup_steps = max(1, warmup_steps)
        self.init_lr = init_lr

    def __call__(self, step: int) -> float:
        """The learning rate of optimizer step ``step`` (0-based; step n is update n + 1)."""
        update = step + 1
        if update <= self.warmup_steps:
            return self.init_lr + (self.lr - self.init_lr) * update / self.warmup_steps
        return self.lr * math.sqrt(self.warmup_steps / update)
