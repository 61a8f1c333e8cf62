"""Where a rank's seconds before its first training step went.

The rank stamps the end of each phase of its start (``mark``): the interpreter up to the worker's
own code, the imports (torch, the task), device init, rendezvous and the process group, the
exchange of every rank's facts and rank 0's environment fingerprint (the first collective), the
task's setup (data ready, the modules torch imports on first use, then model ready), CUDA-graph
capture and the first step. Once the first
step is done (or the task's timed part begins, for tasks without steps) ``report`` sends them as
one ``startup`` event with the process's own start time, so the engine can tell the launcher's
part (spawn, scheduling) apart from the rank's and show the slowest rank's phases. MLPerf's
``init_start`` is the process start and ``init_stop`` its ``run_start``; the time to accuracy
never includes any of this. Stdlib only; stamps are two ``time`` calls each.
"""

from __future__ import annotations

import importlib
import os
import sys
import time

from mlbench_worker.wire import STARTUP, STARTUP_PHASES, EventSink, Startup, emit

STARTUP_EVENT = STARTUP
PHASES = STARTUP_PHASES
LAZY_IMPORTS = ("torch._dynamo",)
"""What torch imports on first use during a rank's setup: ``torch.optim.Optimizer`` imports its
compiler stack (``torch._dynamo``, with sympy and torch.fx's symbolic shapes) when the first
optimizer is built. A cold rank pays for it there (``lazy_imports``); the warm-start server
preloads it."""


def process_start_time() -> float | None:
    """When this process was created (UNIX time), from ``/proc`` (None where there is none).

    The start is counted in clock ticks since boot; it is placed on the wall clock through the
    uptime read now (10 ms resolution), not ``btime``, which the kernel gives in whole seconds:
    that put every start up to a second early, and the launcher's part of a run that short.
    """
    try:
        with open("/proc/self/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        offset = _boot_offset()
    except (OSError, IndexError, ValueError):
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return offset + int(fields[19]) / ticks  # field 22 of stat: starttime, in ticks since boot


def _boot_offset(tries: int = 5) -> float:
    """Wall-clock time minus uptime: the UNIX time of boot, from the read of ``/proc/uptime``
    that the fewest microseconds of wall clock bracket (a read the scheduler interrupted is off
    by half the interruption)."""
    best: tuple[float, float] | None = None  # (bracket, offset)
    for _ in range(tries):
        before = time.time()
        with open("/proc/uptime", encoding="ascii") as uptime_file:
            uptime = float(uptime_file.read().split()[0])
        after = time.time()
        if best is None or after - before < best[0]:
            best = (after - before, (before + after) / 2 - uptime)
    assert best is not None
    return best[1]


class StartupClock:
    """The ends of a rank's start phases, as seconds since its process started."""

    def __init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        """Count from this process's start again: a rank forked by a warm start
        (``mlbench_worker.launch.warm``) was imported by the process it was forked from."""
        self.process_start = process_start_time()
        self._origin = self.process_start if self.process_start is not None else time.time()
        self._last = self._origin
        self.phases: dict[str, float] = {}
        self.reported = False

    def mark(self, phase: str) -> None:
        """``phase`` ended now: it took the time since the previous mark (first mark: since start)."""
        now = time.time()
        self.phases[phase] = self.phases.get(phase, 0.0) + max(0.0, now - self._last)
        self._last = now

    def add(self, phase: str, seconds: float) -> None:
        """``phase`` took ``seconds`` inside the last interval (CUDA-graph capture within the first
        step): it moves from the interval's phase to its own."""
        self.phases[phase] = self.phases.get(phase, 0.0) + seconds
        self._last += seconds

    def report(self, reporter: EventSink, rank: int) -> None:
        """Send the ``startup`` event once (every rank: the engine shows the slowest)."""
        if self.reported:
            return
        self.reported = True
        phases = {name: round(seconds, 6) for name, seconds in self.phases.items()}
        emit(reporter, Startup(rank=rank, process_start_t=self.process_start, phases=phases))


CLOCK = StartupClock()
"""This process's clock (one rank per process)."""


def import_lazy(clock: StartupClock = CLOCK) -> None:
    """Import ``LAZY_IMPORTS`` now, before torch would on first use, and count the time as the
    ``lazy_imports`` phase (zero when they were imported already: a forked rank's are)."""
    started = time.perf_counter()
    for name in LAZY_IMPORTS:
        if name not in sys.modules:
            importlib.import_module(name)
    clock.add("lazy_imports", time.perf_counter() - started)
