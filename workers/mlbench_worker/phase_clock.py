"""Clocks that charge the time between two stamps to a training phase.

A stamped batch calls ``start()`` once and then ``record(phase)`` as each phase ends; the clock
adds the time since the previous stamp to that phase's total. ``CpuClock`` reads
``perf_counter``; ``CudaClock`` records CUDA events on the current stream and resolves them in
bulk later, so queued GPU work is charged to the phase that launched it. The tracker picks one by
composition; this module imports torch only when a CUDA clock is made.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

RESOLVE_EVERY = 4096  # pending CUDA events before a bulk resolve (bounds memory)


class PhaseClock(Protocol):
    """What the tracker needs of a clock."""

    totals: dict[str, float]
    """Seconds charged to each phase so far (resolved: call ``resolve()`` first on a GPU)."""

    def start(self) -> None:
        """Stamp a batch's start: the next ``record`` measures from here."""

    def record(self, phase: str) -> None:
        """Charge the time since the previous stamp to ``phase``."""

    def resolve(self) -> None:
        """Bring ``totals`` up to date (a GPU clock waits for its pending events)."""

    def sync(self) -> None:
        """Wait for queued device work, so a wall-clock reading includes it."""


class CpuClock:
    """``perf_counter`` stamps (or ``now``'s): the host's view, which on a CPU is the work's."""

    def __init__(self, phases: tuple[str, ...], now: Callable[[], float] = time.perf_counter) -> None:
        self.totals: dict[str, float] = dict.fromkeys(phases, 0.0)
        self._now = now
        self._last = 0.0

    def start(self) -> None:
        self._last = self._now()

    def record(self, phase: str) -> None:
        now = self._now()
        self.totals[phase] += now - self._last
        self._last = now

    def resolve(self) -> None:
        return None

    def sync(self) -> None:
        return None


class CudaClock:
    """CUDA-event stamps on the current stream, turned into seconds in bulk (one wait per batch
    of ``RESOLVE_EVERY`` events, or when totals are read); resolved events are reused."""

    def __init__(self, phases: tuple[str, ...]) -> None:
        import torch

        self._torch = torch
        self.totals: dict[str, float] = dict.fromkeys(phases, 0.0)
        self._events: list[tuple[str | None, Any]] = []  # (phase, or None for a start; event)
        self._free: list[Any] = []

    def start(self) -> None:
        self._stamp(None)

    def record(self, phase: str) -> None:
        if phase not in self.totals:
            raise KeyError(phase)
        self._stamp(phase)

    def _stamp(self, phase: str | None) -> None:
        event = self._free.pop() if self._free else self._torch.cuda.Event(enable_timing=True)
        event.record()
        self._events.append((phase, event))
        if len(self._events) >= RESOLVE_EVERY:
            self.resolve()

    def resolve(self) -> None:
        if not self._events:
            return
        last = self._events[-1][1]
        last.synchronize()
        previous = None
        for phase, event in self._events:
            if phase is not None and previous is not None:
                self.totals[phase] += previous.elapsed_time(event) / 1000.0
            previous = event
        # the last stamp stays as the reference for the next phase of an unfinished batch
        self._free += [event for _, event in self._events[:-1]]
        self._events = [(None, last)]

    def sync(self) -> None:
        self._torch.cuda.synchronize()


def make_clock(device_type: str, phases: tuple[str, ...]) -> PhaseClock:
    """The clock for a device type (``cuda`` or anything else)."""
    maker: Callable[[tuple[str, ...]], PhaseClock] = CudaClock if device_type == "cuda" else CpuClock
    return maker(phases)
