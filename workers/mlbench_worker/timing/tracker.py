"""Per-rank timing of training phases with MLBench's phase names, cheap enough to leave on.

A step stamps time as each phase ends (``record(phase)``) on a clock (``mlbench_worker.timing.phase_clock``:
``perf_counter`` on CPU, CUDA events on GPU); a schedule (``mlbench_worker.timing.stamp_schedule``) picks
which batches are stamped where the stamps would weigh on a micro-step, and phase totals are then
scaled by batches / stamped batches. ``Tracker.each_batch`` is the one way a batch starts: the
training loop and the benchmarks iterate their loaders through it. Every stamped batch after the
task's warm-up (``warmup_steps``) is also a timed step (``phase_clock.TimedStep``): its duration
from its start to the next batch's and its all-reduce seconds, a random sample of the run's steps
where batches are sampled, which the loop reports and the results take their step time from.
Totals group phases as MLBench did (compute, communication, preprocess, metrics) next to the train
and validation wall times.
This module imports no torch (the TensorFlow task uses it too).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, TypeVar

from mlbench_worker import wire
from mlbench_worker.timing.phase_clock import PhaseClock, TimedStep, make_clock
from mlbench_worker.timing.stamp_schedule import STAMP_COST_CUDA_S, STAMP_COST_S, Record, StampSchedule

if TYPE_CHECKING:
    import torch

__all__ = ["CATEGORIES", "PHASES", "Record", "TimedStep", "Tracker"]

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
TOTAL_OF_CATEGORY: dict[str, str] = {
    "compute": wire.TIME_COMPUTE,
    "communication": wire.TIME_COMMUNICATION,
    "preprocess": wire.TIME_PREPROCESS,
    "metrics": wire.TIME_METRICS,
}
T = TypeVar("T")


class Tracker:
    """Accumulates phase times and train/validation wall time for one rank."""

    def __init__(
        self,
        device: torch.device | None = None,
        *,
        sample_every: int | None = None,
        seed: int = 0,
        clock: PhaseClock | None = None,
        warmup_steps: int = 0,
    ) -> None:
        """``sample_every``: stamp one batch in that many (1: all); None picks it from the step
        time. ``clock``: the device's by default (tests pass one reading a scripted time).
        ``warmup_steps``: the first batches, never timed steps."""
        cuda = device is not None and device.type == "cuda"
        self.clock = clock or make_clock("cuda" if cuda else "cpu", PHASES)
        self.schedule = StampSchedule(
            self.clock,
            stamp_cost_s=STAMP_COST_CUDA_S if cuda else STAMP_COST_S,
            sample_every=sample_every,
            seed=seed,
        )
        self._train_s = 0.0
        self._val_s = 0.0
        self.aside_s = 0.0  # time set aside (CUDA-graph capture): neither training nor validation
        self._mode_since: float | None = None
        self._mode: str | None = None
        self.batches = 0  # training batches started through ``each_batch``
        self.warmup_steps = warmup_steps

    # -- per batch -----------------------------------------------------------------------------
    def each_batch(self, batches: Iterable[T]) -> Iterator[tuple[T, Record | None]]:
        """Yield ``(batch, record)`` for each batch, started on the tracker before the loader does
        its work (so ``batch_load`` times the loader): ``record`` is the clock's on stamped
        batches and None on the others (a step guards each call, so an unstamped batch costs a
        branch per phase)."""
        schedule, clock, warmup = self.schedule, self.clock, self.warmup_steps
        iterator = iter(batches)
        end = object()
        try:
            while True:
                start = next(schedule.starts)
                if start:
                    number = self.batches + 1
                    record = start(number if number > warmup else None)
                else:
                    clock.step_end()  # the previous batch's timed step, when it was one
                    record = None
                batch = next(iterator, end)
                if batch is end:
                    if record:
                        clock.step_drop()
                        schedule.unstamp()
                    return
                if record:
                    record("batch_load")
                self.batches += 1
                yield batch, record  # type: ignore[misc]
        finally:  # the loop stopped early (max_time): its last step ended with it
            clock.step_end()

    @property
    def stamped(self) -> int:
        """Batches whose phases were stamped."""
        return self.schedule.stamped

    @property
    def sample_every(self) -> int:
        """One batch in this many has its phases stamped (the current policy)."""
        return self.schedule.every

    # -- train / validation wall time ----------------------------------------------------------
    def _switch(self, mode: str | None) -> None:
        now = time.perf_counter()
        if self._mode_since is not None:
            self.clock.sync()
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
        self.clock.step_drop()  # a step that held a capture is not a step's time
        self._switch(None)
        start = time.perf_counter()
        try:
            yield
        finally:
            self.aside_s += time.perf_counter() - start
            self._switch(mode)
            self.clock.start()

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
    def take_steps(self) -> list[TimedStep]:
        """The timed steps (after the warm-up) resolved since the last call."""
        return self.clock.take_steps()

    def phase_times(self) -> dict[str, float]:
        """Cumulative seconds per phase (estimated from the stamped batches when sampling)."""
        self.clock.resolve()
        totals = self.clock.totals
        if self.stamped >= self.batches or self.stamped == 0:
            return dict(totals)
        scale = self.batches / self.stamped
        return {phase: seconds * scale for phase, seconds in totals.items()}

    def totals(self) -> dict[str, float]:
        """The metrics reported per rank: ``time_*`` totals and ``phase_<name>``."""
        phases = self.phase_times()
        out = dict.fromkeys(wire.TRACKER_TOTALS, 0.0)
        for name, seconds in phases.items():
            out[TOTAL_OF_CATEGORY[CATEGORIES[name]]] += seconds
        out[wire.TIME_TRAIN] = self.train_time
        out[wire.TIME_VALIDATION] = self.validation_time
        out.update({wire.phase_metric(name): seconds for name, seconds in phases.items()})
        return out
