"""Learning-rate schedules used by the official tasks.

``PolyWarmup`` is MLPerf ResNet's (task 1b): linear warm-up from 0, then polynomial decay.

``WarmupPlateau`` is MLBench's ``ReduceLROnPlateauWithWarmup``: a linear warm-up per step from
the single-worker LR to the scaled LR (Goyal et al.), then the LR is multiplied by ``factor``
when the validation loss has not improved by more than ``threshold`` (absolute) for more than
``patience`` epochs, with ``torch.optim.lr_scheduler.ReduceLROnPlateau``'s counting, which
MLBench used: with patience 2 the third epoch without improvement halves the LR.
"""

from __future__ import annotations

import math


class WarmupPlateau:
    """Linear warm-up over ``warmup_epochs`` then reduce-on-plateau of a minimised metric."""

    def __init__(
        self,
        *,
        base_lr: float,
        target_lr: float,
        warmup_epochs: float,
        steps_per_epoch: int,
        patience: int = 2,
        factor: float = 0.5,
        threshold: float = 0.01,
        min_lr: float = 0.0,
    ) -> None:
        self.base_lr = base_lr
        self.target_lr = target_lr
        self.warmup_steps = max(0, round(warmup_epochs * steps_per_epoch))
        self.patience = patience
        self.factor = factor
        self.threshold = threshold
        self.min_lr = min_lr
        self.best = math.inf
        self.bad_epochs = 0
        self.lr = base_lr if self.warmup_steps > 0 else target_lr
        self._after_warmup = target_lr

    def on_step(self, step: int) -> float:
        """LR for optimizer step ``step`` (0-based); changes only during warm-up."""
        if step < self.warmup_steps:
            self.lr = self.base_lr + (self.target_lr - self.base_lr) * (step + 1) / self.warmup_steps
        else:
            self.lr = self._after_warmup
        return self.lr

    def on_validation(self, value: float, step: int) -> float:
        """Feed the epoch's validation loss; reduces the LR after more than ``patience`` bad epochs."""
        if value < self.best - self.threshold:
            self.best = value
            self.bad_epochs = 0
        elif step >= self.warmup_steps:
            self.bad_epochs += 1
            if self.bad_epochs > self.patience:
                self._after_warmup = max(self.min_lr, self._after_warmup * self.factor)
                self.bad_epochs = 0
                self.lr = self._after_warmup
        return self.lr


class PolyWarmup:
    """MLPerf ResNet's schedule (its reference's ``PolynomialDecayWithWarmup``): the learning rate
    rises linearly from 0 to ``peak_lr`` over ``warmup_steps``, then decays as a polynomial of
    ``power`` to ``end_lr`` over ``decay_steps`` (train steps minus warm-up steps, plus one)."""

    def __init__(
        self, *, peak_lr: float, end_lr: float, warmup_steps: int, decay_steps: int, power: float = 2.0
    ) -> None:
        self.peak_lr = peak_lr
        self.end_lr = end_lr
        self.warmup_steps = max(0, warmup_steps)
        self.decay_steps = max(1, decay_steps)
        self.power = power
        self.lr = self.on_step(0)

    def on_step(self, step: int) -> float:
        """LR for optimizer step ``step`` (0-based; the reference counts from 1)."""
        t = step + 1
        if t <= self.warmup_steps:
            self.lr = self.peak_lr * t / self.warmup_steps
        else:
            done = min(t - self.warmup_steps, self.decay_steps) / self.decay_steps
            self.lr = self.end_lr + (self.peak_lr - self.end_lr) * (1.0 - done) ** self.power
        return self.lr
