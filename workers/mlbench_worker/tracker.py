"""Per-rank timing of training phases with MLBench's phase names, cheap enough to leave on.

A training step stamps time once per phase: ``batch_start()`` then ``record(phase)`` after each
phase charges the time since the previous stamp to that phase (one ``perf_counter`` call and a
list update on CPU). On GPU, stamps are CUDA events resolved in bulk later, so asynchronous
kernels are charged to the phase that launched them rather than to the next synchronising call
(MLBench charged queued compute to ``agg``). Totals group phases the way MLBench did:
compute = fwd_pass + comp_loss + backprop + opt_step, communication = agg, preprocess =
batch_load, metrics = comp_metrics. ``time_train`` and ``time_validation`` are wall times.

The training loop stamps through ``begin()``, which samples: it returns the function the step
calls with each phase's name, ``record`` for a batch whose phases are stamped and ``SKIP`` (a
C-level no-op: no Python frame) for one that is not. Every batch is stamped while stamps cost
little next to a step (the default policy keeps their estimated cost under 0.1% of the measured
step time: a 100 ms ResNet-20 step on CPU or a GPU step is stamped every time); on micro-steps
(logistic regression on CPU, ~0.2 ms, where a Python call per phase weighs ~0.2%) one batch in
``k`` is stamped, the gaps drawn at random (mean ``k``, so periodic work cannot alias with the
sample), and phase totals are scaled by batches / stamped batches: unbiased estimates whose
relative error shrinks as 1/sqrt(stamped). ``Tracker(sample_every=1)`` stamps every batch;
``batch_start()`` always stamps (exact, for callers that time batches themselves).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from typing import Any

import torch

PHASES: tuple[str, ...] = (
    "batch_load",
    "fwd_pass",
    "comp_loss",
    "backprop",
    "agg",
    "opt_step",
    "comp_metrics",
)
CATEGORIES: dict[str, str] = {
    "batch_load": "preprocess",
    "fwd_pass": "compute",
    "comp_loss": "compute",
    "backprop": "compute",
    "opt_step": "compute",
    "agg": "communication",
    "comp_metrics": "metrics",
}
_clock = time.perf_counter
_RESOLVE_EVERY = 4096  # pending CUDA events before a bulk resolve (bounds memory)
STAMP_COST_S = 5e-6  # what one batch's stamps cost inside a real step (measured: 8 x ~0.6 us on CPU)
STAMP_COST_CUDA_S = 25e-6  # 8 CUDA events created and recorded (estimate: ~3 us of host time each)
STAMP_BUDGET = 0.001  # the share of step time the stamps may take before batches are sampled
CALIBRATION_BATCHES = 32  # batches always stamped at the start (they measure the step time)
MAX_SAMPLE_EVERY = 64


Record = Callable[[str], object]
"""What a training step calls with each phase's name as the phase ends."""

# the ``record`` of a batch that is not sampled: one C call that ignores the name, no Python frame
SKIP: Record = {}.get  # type: ignore[assignment]


class Tracker:
    """Accumulates phase times and train/validation wall time for one rank."""

    def __init__(
        self, device: torch.device | None = None, *, sample_every: int | None = None, seed: int = 0
    ) -> None:
        """``sample_every``: stamp one batch in that many (1: all); None picks it from the step time."""
        if sample_every is not None and sample_every < 1:
            raise ValueError(f"sample_every must be >= 1, got {sample_every}")
        self._cuda = device is not None and device.type == "cuda"
        self._acc: dict[str, float] = dict.fromkeys(PHASES, 0.0)
        self._last = 0.0
        self._events: list[tuple[str | None, Any]] = []  # (phase, or None for a batch start; event)
        self._train_s = 0.0
        self._val_s = 0.0
        self._mode_since: float | None = None
        self._mode: str | None = None
        self.batches = 0  # batches started (``begin`` or ``batch_start`` calls)
        self.stamped = 0  # of which phases were stamped
        self._fixed_every = sample_every
        self._every = sample_every or 1
        self._countdown = 0 if sample_every is None else 1  # batches until the next stamped one
        self._rng = random.Random(seed)
        self._stamped_at = 0
        if self._cuda:  # instance attributes: no per-call device test on the hot path
            self.batch_start = self._batch_start_cuda  # type: ignore[method-assign]
            self.record = self._record_cuda  # type: ignore[method-assign]

    # -- per batch -----------------------------------------------------------------------------
    def begin(self) -> Record:
        """Start a training batch; returns the function its step calls with each phase's name:
        ``self.record`` when the batch is sampled, the no-op ``SKIP`` otherwise."""
        self.batches += 1
        self._countdown -= 1
        if self._countdown > 0:
            return SKIP
        self.stamped += 1
        self._stamped_at = self.batches
        self._countdown = self._next_gap()
        if self._cuda:
            self._stamp_event(None)
        else:
            self._last = _clock()
        return self.record

    def abandon(self) -> None:
        """The batch just begun did not happen (the loader was exhausted): uncount it."""
        if self._stamped_at == self.batches:
            self.stamped -= 1
            self._countdown = 1  # the next batch takes its place in the sample
        self.batches -= 1

    def _next_gap(self) -> int:
        """Batches until the next stamped one: 1 while calibrating or while stamps are cheap."""
        if self._fixed_every is None:
            if self.stamped < CALIBRATION_BATCHES:
                return 1
            step = sum(self._acc.values()) / self.stamped  # seconds of a stamped batch
            cost = STAMP_COST_CUDA_S if self._cuda else STAMP_COST_S
            wanted = cost / (STAMP_BUDGET * step) if step > 0 else 1.0
            self._every = max(1, min(MAX_SAMPLE_EVERY, math.ceil(wanted)))
        if self._every == 1:
            return 1
        return self._rng.randint(1, 2 * self._every - 1)  # mean ``every``; random: no aliasing

    @property
    def sample_every(self) -> int:
        """One batch in this many has its phases stamped (the current policy)."""
        return self._every

    def batch_start(self) -> None:
        """Stamp the start of a training batch (the next ``record`` measures from here)."""
        self._last = _clock()
        self.batches += 1
        self.stamped += 1

    def record(self, phase: str) -> None:
        """Charge the time since the previous stamp to ``phase`` (one of ``PHASES``)."""
        now = _clock()
        self._acc[phase] += now - self._last
        self._last = now

    def _batch_start_cuda(self) -> None:
        self._stamp_event(None)
        self.batches += 1
        self.stamped += 1

    def _record_cuda(self, phase: str) -> None:
        if phase not in self._acc:
            raise KeyError(phase)
        self._stamp_event(phase)

    def _stamp_event(self, phase: str | None) -> None:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        self._events.append((phase, event))
        if len(self._events) >= _RESOLVE_EVERY:
            self._resolve()

    def _resolve(self) -> None:
        """Turn pending CUDA events into phase times (one synchronisation for the whole list)."""
        if not self._events:
            return
        keep_last = self._events[-1]
        keep_last[1].synchronize()
        previous = None
        for phase, event in self._events:
            if phase is not None and previous is not None:
                self._acc[phase] += previous.elapsed_time(event) / 1000.0
            previous = event
        # the last stamp stays as the reference for the next phase of an unfinished batch
        self._events = [(None, keep_last[1])]

    # -- train / validation wall time ----------------------------------------------------------
    def _switch(self, mode: str | None) -> None:
        now = time.perf_counter()
        if self._mode_since is not None:
            if self._cuda:
                torch.cuda.synchronize()
                now = time.perf_counter()
            if self._mode == "train":
                self._train_s += now - self._mode_since
            elif self._mode == "validation":
                self._val_s += now - self._mode_since
        self._mode = mode
        self._mode_since = now if mode is not None else None

    def train(self) -> None:
        """Training time starts counting (validation stops)."""
        self._switch("train")

    def validation(self) -> None:
        """Validation time starts counting (training stops)."""
        self._switch("validation")

    def pause(self) -> None:
        """Neither training nor validation (reporting, goal checks, the end of the run)."""
        self._switch(None)

    def _running(self, mode: str) -> float:
        """Seconds of the interval still open in ``mode`` (0 in any other mode)."""
        if self._mode != mode or self._mode_since is None:
            return 0.0
        return time.perf_counter() - self._mode_since

    @property
    def train_time(self) -> float:
        """Cumulative training seconds so far, including the running interval."""
        return self._train_s + self._running("train")

    @property
    def validation_time(self) -> float:
        """Cumulative validation seconds so far, including the running interval."""
        return self._val_s + self._running("validation")

    # -- results -------------------------------------------------------------------------------
    def phase_times(self) -> dict[str, float]:
        """Cumulative seconds per phase (estimated from the stamped batches when sampling)."""
        if self._cuda:
            self._resolve()
        if self.stamped >= self.batches or self.stamped == 0:
            return dict(self._acc)
        scale = self.batches / self.stamped
        return {phase: seconds * scale for phase, seconds in self._acc.items()}

    def totals(self) -> dict[str, float]:
        """The metrics reported per rank: ``time_*`` totals and ``phase_<name>``."""
        phases = self.phase_times()
        out = {"time_compute": 0.0, "time_communication": 0.0, "time_preprocess": 0.0, "time_metrics": 0.0}
        for name, seconds in phases.items():
            out[f"time_{CATEGORIES[name]}"] += seconds
        out["time_train"] = self.train_time
        out["time_validation"] = self.validation_time
        out.update({f"phase_{name}": seconds for name, seconds in phases.items()})
        return out
