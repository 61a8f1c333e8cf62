"""A rank's start, phase by phase: marks take the time since the previous one, capture moves
out of the first step into its own phase, the event is sent once, and the process's own start
time comes from /proc."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

from mlbench_worker.timing.startup import STARTUP_EVENT, StartupClock, process_start_time


class Events:
    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def event(self, kind: str, payload: dict[str, Any]) -> None:
        self.sent.append((kind, payload))


def test_marks_split_the_time_since_the_process_started() -> None:
    clock = StartupClock()
    clock.mark("interpreter")
    before = time.time()
    while time.time() - before < 0.01:
        pass
    clock.mark("imports")
    clock.add("graph_capture", 0.004)
    before_last = time.time()
    clock.mark("first_step")
    after_last = time.time()
    assert list(clock.phases) == ["interpreter", "imports", "graph_capture", "first_step"]
    assert clock.phases["imports"] >= 0.01
    assert clock.phases["graph_capture"] == 0.004
    assert all(seconds >= 0 for seconds in clock.phases.values())
    # every phase together is the time from the process's start to the last mark (plus what
    # of the capture the last interval was too short to hold: its phase is never negative)
    assert clock.process_start is not None
    total = sum(clock.phases.values()) + clock.process_start
    assert before_last - 1e-6 <= total <= after_last + 0.004 + 1e-6


def test_the_startup_event_is_sent_once_with_the_process_start() -> None:
    clock, events = StartupClock(), Events()
    clock.mark("interpreter")
    clock.report(events, rank=3)
    clock.report(events, rank=3)
    assert [kind for kind, _ in events.sent] == [STARTUP_EVENT]
    payload = events.sent[0][1]
    assert payload["rank"] == 3 and set(payload["phases"]) == {"interpreter"}
    assert payload["process_start_t"] == clock.process_start


CHILD = """
import time
from mlbench_worker.timing.startup import process_start_time
print(process_start_time(), time.time())
"""


def test_the_process_start_is_this_process_s() -> None:
    started = process_start_time()
    assert started is not None and started <= time.time()
    assert time.time() - started < 24 * 3600  # a test process, not the machine's boot


def test_a_child_started_after_we_asked_for_it_to_the_clock_tick() -> None:
    """The start is placed on the wall clock to the tick (10 ms), not to the whole second that
    /proc/stat's btime gives: a process cannot have started before its parent asked for it."""
    asked = time.time()
    out = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, check=True, env=os.environ.copy()
    ).stdout.split()
    started, child_now = float(out[0]), float(out[1])
    # ticks (10 ms) and a scheduler's interruption of the uptime read, far from btime's second
    assert asked - 0.05 <= started <= child_now


LAZY = """
import sys
from mlbench_worker.timing.startup import LAZY_IMPORTS, StartupClock, import_lazy
clock = StartupClock()
clock.mark("data")
assert not any(name in sys.modules for name in LAZY_IMPORTS), "imported before setup"
import_lazy(clock)
clock.mark("model")
again = StartupClock()
import_lazy(again)
phases = clock.phases
print(round(phases["lazy_imports"], 3), round(phases["model"], 3), again.phases["lazy_imports"] < 0.05)
"""


def test_what_torch_imports_on_first_use_is_a_phase_of_its_own_not_the_model_s() -> None:
    """torch's compiler stack, imported by the first optimizer, was nearly all of the ``model``
    phase; it is counted apart (and is near zero once imported: a forked rank's)."""
    done = subprocess.run(
        [sys.executable, "-c", LAZY], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    lazy, model, second = done.stdout.split()
    assert float(lazy) > float(model)  # the import happened inside the lazy phase, not the model's
    assert second == "True"
