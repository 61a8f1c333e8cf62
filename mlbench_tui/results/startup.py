"""A run's start: the launcher's part (split at the milestones its target reports) and the
slowest rank's phases, from the ranks' ``startup`` events (``wire.Startup``). Pure
functions over events and milestones."""

from __future__ import annotations

from collections.abc import Iterable

from mlbench_worker import wire

from mlbench_tui.lifecycle import LaunchMilestones
from mlbench_tui.results import events as ev
from mlbench_tui.results.events import EventRecord
from mlbench_tui.results.model import StartupFigures

LAUNCHERS = {"local": "spawn", "slurm": "queued and spawned", "kubernetes": "scheduled, pulled and started"}
"""What the launcher's part holds on each target."""

MILESTONE_PARTS: dict[str, tuple[tuple[str, str], ...]] = {
    "slurm": (("started", "queued"),),
    "kubernetes": (("scheduled", "scheduled"), ("image_pulled", "image pulled"), ("started", "pod started")),
}
"""Per target, in order, each milestone (a ``LaunchMilestones`` field) that ends a part of the
launcher's and that part's name; the first part begins at the run's creation."""
LAST_PART = {"slurm": "spawned", "kubernetes": "spawn"}
"""The part from the last milestone to the first rank's process start."""


def launcher_parts(
    launched_at: float, first_process: float, milestones: LaunchMilestones | None, target: str
) -> dict[str, float]:
    """The launcher's part split at the target's milestones, in order, summing to
    ``max(0, first_process - launched_at)``. Each milestone is clamped between the previous one
    and the first process (the target's clock or its one-second stamps may disagree with ours),
    so no part is negative; a part whose milestone is unknown joins the next one ("image pulled
    and pod started"). Empty where the target reports none."""
    steps = MILESTONE_PARTS.get(target, ())
    if milestones is None or not steps:
        return {}
    known = [(label, getattr(milestones, name)) for name, label in steps]
    if all(at is None for _, at in known):
        return {}
    end = max(launched_at, first_process)
    parts: dict[str, float] = {}
    previous, waiting = launched_at, []
    for label, at in [*known, (LAST_PART.get(target, "spawn"), end)]:
        waiting.append(label)
        if at is None:
            continue
        point = min(max(at, previous), end)
        parts[" and ".join(waiting)] = point - previous
        previous, waiting = point, []
    return parts


def startup_figures(
    events: Iterable[EventRecord],
    *,
    launched_at: float | None = None,
    target: str = "local",
    milestones: LaunchMilestones | None = None,
) -> StartupFigures | None:
    """The run's start (None when no rank reported one): the slowest rank's phases, and the
    launcher's part from ``launched_at`` (the run's creation) to its first rank's process,
    split at the target's ``milestones`` where it reported them."""
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
    order = {name: i for i, name in enumerate(wire.STARTUP_PHASES)}
    phases = dict(sorted(reports[slowest].items(), key=lambda item: order.get(item[0], len(order))))
    launcher, parts = None, {}
    if launched_at is not None and starts:
        launcher = max(0.0, min(starts) - launched_at)  # clocks of other hosts may run behind
        parts = launcher_parts(launched_at, min(starts), milestones, target)
    return StartupFigures(
        launcher_s=launcher,
        launcher=LAUNCHERS.get(target, "spawn"),
        launcher_parts=parts,
        phases=phases,
        slowest_rank=slowest,
        ranks=len(reports),
    )
