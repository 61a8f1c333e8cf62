"""A run's start: the launcher's part and the slowest rank's phases, from the ranks' ``startup``
events (``mlbench_worker.startup``). Pure functions over events."""

from __future__ import annotations

from collections.abc import Iterable

from mlbench_worker import wire
from mlbench_worker.startup import PHASES

from mlbench_tui.results import events as ev
from mlbench_tui.results.model import StartupFigures
from mlbench_tui.results.time_to_accuracy import EventRecord

LAUNCHERS = {"local": "spawn", "slurm": "queued and spawned", "kubernetes": "scheduled, pulled and started"}
"""What the launcher's part holds on each target."""


def startup_figures(
    events: Iterable[EventRecord], *, launched_at: float | None = None, target: str = "local"
) -> StartupFigures | None:
    """The run's start (None when no rank reported one): the slowest rank's phases, and the
    launcher's part from ``launched_at`` (the run's creation) to its first rank's process."""
    reports: dict[int, dict[str, float]] = {}
    starts: list[float] = []
    for event in ev.of(events, wire.Startup):
        if event.payload.phases:
            reports[event.rank] = dict(event.payload.phases)
        if event.payload.process_start_t is not None:
            starts.append(event.payload.process_start_t)
    if not reports:
        return None
    slowest = max(sorted(reports), key=lambda rank: sum(reports[rank].values()))
    order = {name: i for i, name in enumerate(PHASES)}
    phases = dict(sorted(reports[slowest].items(), key=lambda item: order.get(item[0], len(order))))
    launcher = None
    if launched_at is not None and starts:
        launcher = max(0.0, min(starts) - launched_at)  # clocks of other hosts may run behind
    return StartupFigures(
        launcher_s=launcher,
        launcher=LAUNCHERS.get(target, "spawn"),
        phases=phases,
        slowest_rank=slowest,
        ranks=len(reports),
    )
