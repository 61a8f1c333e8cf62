"""Per-rank timing of training phases with MLBench's phase names, cheap enough to leave on.

A step stamps time as each phase ends (``record(phase)``): ``perf_counter`` on CPU, CUDA events
on GPU (resolved in bulk later), so queued GPU work is charged to the phase that launched it.
Totals group phases as MLBench did (compute, communication, preprocess, metrics) next to the
train and validation wall times. Stamps are sampled where they would weigh on a micro-step:
``next(tracker.schedule)`` gives a starter for the batches whose phases are stamped (a random
pattern keeping the stamps' cost under ``STAMP_BUDGET`` of a step) and None for the others, and
phase totals are scaled by batches / stamped batches.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import random
import time
from collections.abc import Callable, Iterator
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
RECHECK_EVERY = 256  # stamped batches between two looks at the policy (step times drift)
MAX_SAMPLE_EVERY = 64


Record = Callable[[str], None]
"""What a training step calls with each phase's name as the phase ends (None: not stamped)."""


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
        self._free_events: list[Any] = []
        self._train_s = 0.0
        self._val_s = 0.0
        self.aside_s = 0.0  # time set aside (CUDA-graph capture): neither training nor validation
        self._mode_since: float | None = None
        self._mode: str | None = None
        self.batches = 0  # training batches (counted by the loop, or by ``begin``/``batch_start``)
        self.stamped = 0  # of which phases were stamped
        self._fixed_every = sample_every
        self._every = 1
        self._rng = random.Random(seed)
        self.schedule: Iterator[Callable[[], Record] | None]
        self._set_schedule(sample_every or 1)  # the default policy stamps everything while calibrating
        if self._cuda:  # instance attributes: no per-call device test on the hot path
            self.batch_start = self._batch_start_cuda  # type: ignore[method-assign]
            self.record = self._record_cuda  # type: ignore[method-assign]

    # -- per batch -----------------------------------------------------------------------------
    def _set_schedule(self, every: int) -> None:
        """Make ``schedule`` cycle through a random pattern with one stamped batch in ``every``.

        ``next(schedule)`` gives each batch's starter: ``self._start`` for a stamped batch, None
        for any other, so an unstamped batch runs no Python function. The gaps between stamped
        batches are drawn uniformly from 1..2*every-1 (mean ``every``); the pattern (about 4096
        batches) repeats.
        """
        self._every = every
        pattern: list[Callable[[], Record] | None] = []
        if every == 1:
            pattern.append(self._start)
        while every > 1 and len(pattern) < 4096:
            gap = self._rng.randint(1, 2 * every - 1)
            pattern += [None] * (gap - 1)
            pattern.append(self._start)
        self.schedule = itertools.cycle(pattern)

    def _start(self) -> Record:
        """Start a stamped batch: stamp its start, revisit the policy now and then, return ``record``."""
        self.stamped += 1
        if self._fixed_every is None and self.stamped % RECHECK_EVERY == CALIBRATION_BATCHES % RECHECK_EVERY:
            every = self._wanted_every()
            if every != self._every:
                self._set_schedule(every)
        if self._cuda:
            self._stamp_event(None)
        else:
            self._last = _clock()
        return self.record

    def _wanted_every(self) -> int:
        """One batch in how many to stamp so the stamps cost under ``STAMP_BUDGET`` of a step."""
        step = sum(self._acc.values()) / max(1, self.stamped - 1)  # seconds of a stamped batch
        cost = STAMP_COST_CUDA_S if self._cuda else STAMP_COST_S
        wanted = cost / (STAMP_BUDGET * step) if step > 0 else 1.0
        return max(1, min(MAX_SAMPLE_EVERY, math.ceil(wanted)))

    def begin(self) -> Record | None:
        """Start (and count) a training batch; returns the function its step calls with each
        phase's name, ``self.record``, when the batch is stamped, and None otherwise.
        (The training loop does the same inline and counts batches on its own.)"""
        self.batches += 1
        start = next(self.schedule)
        return start() if start else None

    def unstamp(self) -> None:
        """The stamped batch just started did not happen (the loader was exhausted)."""
        self.stamped -= 1

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
        event = self._free_events.pop() if self._free_events else torch.cuda.Event(enable_timing=True)
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
        self._free_events += [event for _, event in self._events[:-1]]  # resolved: reusable
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

    @contextlib.contextmanager
    def aside(self) -> Iterator[None]:
        """Time that counts as neither training nor validation (warming up and capturing CUDA
        graphs: initialisation, as MLPerf counts it); the next phase is timed from the end."""
        mode = self._mode
        self._switch(None)
        start = time.perf_counter()
        try:
            yield
        finally:
            self.aside_s += time.perf_counter() - start
            self._switch(mode)
            if self._cuda:
                self._stamp_event(None)
            else:
                self._last = _clock()

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
