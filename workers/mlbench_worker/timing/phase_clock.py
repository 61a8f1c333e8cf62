"""Clocks that charge the time between two stamps to a training phase, and time whole steps.

A stamped batch calls ``start()`` once and then ``record(phase)`` as each phase ends; the clock
adds the time since the previous stamp to that phase's total. A batch after the warm-up starts
with ``start(step=n)``: it is also a *timed step*, whose duration runs from that stamp to the next
batch's start (``start`` again, or ``step_end()`` when the next batch is not stamped), with the
seconds its ``comm_phase`` took inside it; ``step_drop()`` forgets a step that held something
else (a CUDA-graph capture). ``take_steps()`` hands over the timed steps resolved so far.

``CpuClock`` reads ``perf_counter``; ``CudaClock`` records CUDA events on the current stream and
resolves them in bulk later, so queued GPU work is charged to the phase (and the step) that
launched it. The tracker picks one by composition; this module imports torch only when a CUDA
clock is made, and ``CudaClock`` takes its event type and device wait as arguments, so its
bookkeeping runs on a CPU with recorded timestamps too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

RESOLVE_EVERY = 4096  # pending CUDA events before a bulk resolve (bounds memory)
COMM_PHASE = "agg"  # the phase a timed step's communication seconds are read from


@dataclass(frozen=True)
class TimedStep:
    """One training step after the warm-up: its number (1-based), its seconds from its start to
    the next step's, and the seconds of those its all-reduce took."""

    step: int
    seconds: float
    comm_s: float


class PhaseClock(Protocol):
    """What the tracker needs of a clock."""

    totals: dict[str, float]
    """Seconds charged to each phase so far (resolved: call ``resolve()`` first on a GPU)."""

    def start(self, step: int | None = None) -> None:
        """Stamp a batch's start: the next ``record`` measures from here; ends the open timed
        step, and with ``step`` opens timed step number ``step``."""

    def record(self, phase: str) -> None:
        """Charge the time since the previous stamp to ``phase``."""

    def step_end(self) -> None:
        """End the open timed step here (the next batch starts unstamped)."""

    def step_drop(self) -> None:
        """Forget the open timed step (it held time that is not a step's, or never happened)."""

    def take_steps(self) -> list[TimedStep]:
        """The timed steps resolved since the last call (a GPU clock waits for nothing here)."""

    def resolve(self) -> None:
        """Bring ``totals`` (and the timed steps) up to date (a GPU clock waits for its events)."""

    def sync(self) -> None:
        """Wait for queued device work, so a wall-clock reading includes it."""


class CpuClock:
    """``perf_counter`` stamps (or ``now``'s): the host's view, which on a CPU is the work's."""

    def __init__(
        self,
        phases: tuple[str, ...],
        now: Callable[[], float] = time.perf_counter,
        comm_phase: str = COMM_PHASE,
    ) -> None:
        self.totals: dict[str, float] = dict.fromkeys(phases, 0.0)
        self._now = now
        self._last = 0.0
        self._comm_phase = comm_phase
        self._open: int | None = None  # the open timed step's number
        self._open_at = 0.0
        self._open_comm = 0.0
        self._steps: list[TimedStep] = []

    def start(self, step: int | None = None) -> None:
        now = self._now()
        self._last = now
        if self._open is not None:
            self._steps.append(TimedStep(self._open, now - self._open_at, self._open_comm))
        self._open = step
        self._open_at, self._open_comm = now, 0.0

    def record(self, phase: str) -> None:
        now = self._now()
        seconds = now - self._last
        self.totals[phase] += seconds
        if phase == self._comm_phase and self._open is not None:
            self._open_comm += seconds
        self._last = now

    def step_end(self) -> None:
        if self._open is not None:
            self._steps.append(TimedStep(self._open, self._now() - self._open_at, self._open_comm))
            self._open = None

    def step_drop(self) -> None:
        self._open = None

    def take_steps(self) -> list[TimedStep]:
        steps, self._steps = self._steps, []
        return steps

    def resolve(self) -> None:
        return None

    def sync(self) -> None:
        return None


# what a CUDA clock's pending stamp is: a batch start (which may open a timed step), a phase's end,
# the end of the open timed step, the forgetting of it (no event), or the last stamp a resolve kept
_START, _PHASE, _END, _DROP, _REFERENCE = range(5)


class CudaClock:
    """CUDA-event stamps on the current stream, turned into seconds in bulk (one wait per batch
    of ``RESOLVE_EVERY`` events, or when totals are read); resolved events are reused.

    ``event`` makes a timing event (``torch.cuda.Event(enable_timing=True)``) and ``synchronize``
    waits for the device; both default to CUDA's."""

    def __init__(
        self,
        phases: tuple[str, ...],
        *,
        event: Callable[[], Any] | None = None,
        synchronize: Callable[[], None] | None = None,
        comm_phase: str = COMM_PHASE,
    ) -> None:
        if event is None or synchronize is None:
            import torch

            event = event or (lambda: torch.cuda.Event(enable_timing=True))
            synchronize = synchronize or torch.cuda.synchronize
        self._event = event
        self._synchronize = synchronize
        self._comm_phase = comm_phase
        self.totals: dict[str, float] = dict.fromkeys(phases, 0.0)
        # (kind, phase name or step number, event) in the order they were stamped
        self._pending: list[tuple[int, Any, Any]] = []
        self._free: list[Any] = []
        self._open: bool = False  # a timed step is open (its stamps may be pending or resolved)
        self._open_step: tuple[int, Any] | None = None  # (number, start event) once resolved past it
        self._open_comm = 0.0
        self._steps: list[TimedStep] = []

    def start(self, step: int | None = None) -> None:
        self._stamp(_START, step)
        self._open = step is not None

    def record(self, phase: str) -> None:
        if phase not in self.totals:
            raise KeyError(phase)
        self._stamp(_PHASE, phase)

    def step_end(self) -> None:
        if self._open:
            self._stamp(_END, None)
            self._open = False

    def step_drop(self) -> None:
        if self._open:
            self._pending.append((_DROP, None, None))
            self._open = False

    def take_steps(self) -> list[TimedStep]:
        steps, self._steps = self._steps, []
        return steps

    def _stamp(self, kind: int, what: Any) -> None:
        event = self._free.pop() if self._free else self._event()
        event.record()
        self._pending.append((kind, what, event))
        if len(self._pending) >= RESOLVE_EVERY:
            self.resolve()

    def resolve(self) -> None:
        stamped = [e for _, _, e in self._pending if e is not None]
        if not stamped:
            return
        last = stamped[-1]
        last.synchronize()
        previous = None
        keep: set[int] = {id(last)}
        for kind, what, event in self._pending:
            if kind == _DROP:
                self._open_step = None
                continue
            if kind == _PHASE and previous is not None:
                seconds = previous.elapsed_time(event) / 1000.0
                self.totals[what] += seconds
                if what == self._comm_phase and self._open_step is not None:
                    self._open_comm += seconds
            if kind in (_START, _END) and self._open_step is not None:
                number, began = self._open_step
                self._steps.append(TimedStep(number, began.elapsed_time(event) / 1000.0, self._open_comm))
                self._open_step = None
            if kind == _START and what is not None:
                self._open_step, self._open_comm = (what, event), 0.0
            previous = event
        if self._open_step is not None:
            keep.add(id(self._open_step[1]))  # a step still open measures from its start later
        # the last stamp stays as the reference for the next phase of an unfinished batch
        self._free += [e for e in stamped if id(e) not in keep]
        self._pending = [(_REFERENCE, None, last)]

    def sync(self) -> None:
        self._synchronize()


def make_clock(device_type: str, phases: tuple[str, ...]) -> PhaseClock:
    """The clock for a device type (``cuda`` or anything else)."""
    if device_type == "cuda":
        return CudaClock(phases)
    return CpuClock(phases)
