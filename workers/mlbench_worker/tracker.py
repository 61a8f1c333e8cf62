"""Per-rank timing of training phases with MLBench's phase names, cheap enough to leave on.

A training step stamps time once per phase: ``batch_start()`` then ``record(phase)`` after each
phase charges the time since the previous stamp to that phase (one ``perf_counter`` call and a
list update on CPU). On GPU, stamps are CUDA events resolved in bulk later, so asynchronous
kernels are charged to the phase that launched them rather than to the next synchronising call
(MLBench charged queued compute to ``agg``). Totals group phases the way MLBench did:
compute = fwd_pass + comp_loss + backprop + opt_step, communication = agg, preprocess =
batch_load, metrics = comp_metrics. ``time_train`` and ``time_validation`` are wall times.
"""

from __future__ import annotations

import time
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


class Tracker:
    """Accumulates phase times and train/validation wall time for one rank."""

    def __init__(self, device: torch.device | None = None) -> None:
        self._cuda = device is not None and device.type == "cuda"
        self._acc: dict[str, float] = dict.fromkeys(PHASES, 0.0)
        self._last = 0.0
        self._events: list[tuple[str | None, Any]] = []  # (phase, or None for a batch start; event)
        self._train_s = 0.0
        self._val_s = 0.0
        self._mode_since: float | None = None
        self._mode: str | None = None
        self.batches = 0  # batches started (``batch_start`` calls)
        if self._cuda:  # instance attributes: no per-call device test on the hot path
            self.batch_start = self._batch_start_cuda  # type: ignore[method-assign]
            self.record = self._record_cuda  # type: ignore[method-assign]

    # -- per batch -----------------------------------------------------------------------------
    def batch_start(self) -> None:
        """Stamp the start of a training batch (the next ``record`` measures from here)."""
        self._last = _clock()
        self.batches += 1

    def record(self, phase: str) -> None:
        """Charge the time since the previous stamp to ``phase`` (one of ``PHASES``)."""
        now = _clock()
        self._acc[phase] += now - self._last
        self._last = now

    def _batch_start_cuda(self) -> None:
        self._stamp_event(None)
        self.batches += 1

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
        """Cumulative seconds per phase."""
        if self._cuda:
            self._resolve()
        return dict(self._acc)

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
