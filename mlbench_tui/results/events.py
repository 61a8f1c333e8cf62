"""The one place the engine reads a run's events: stored records into the wire's payload types.

A record is what the store keeps (kind, JSON payload, rank, time); every reader (results, the
MLPerf log, live progress, the TUI) asks this module for typed events of one kind instead of
reading payload dicts by key. Payloads written by earlier workers parse too (``wire.Payload``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from mlbench_worker import wire

P = TypeVar("P", bound=wire.Payload)


@dataclass(frozen=True)
class EventRecord:
    """One reported event as stored (``goal_reached``, ``epoch_end``, ``run_stop``, ...)."""

    kind: str
    payload: Mapping[str, Any] = field(default_factory=dict)
    rank: int = 0
    t: float | None = None


@dataclass(frozen=True)
class Event(Generic[P]):
    """One event read into its payload type, with the rank that sent it and when."""

    payload: P
    rank: int = 0
    t: float | None = None


def record(payload: wire.Payload, rank: int = 0, t: float | None = None) -> EventRecord:
    """The stored form of a typed payload (what a rank's ``wire.emit`` makes the server keep)."""
    return EventRecord(payload.KIND, payload.to_payload(), rank, t)


def parse(event: EventRecord) -> wire.Payload | None:
    """A record's typed payload; None for a kind this version does not know."""
    return wire.parse_event(event.kind, event.payload)


def of(events: Iterable[EventRecord], kind: type[P], *, rank: int | None = None) -> list[Event[P]]:
    """The events of one payload type, in the order given (only ``rank``'s when set)."""
    return [
        Event(kind.from_payload(e.payload), e.rank, e.t)
        for e in events
        if e.kind == kind.KIND and (rank is None or e.rank == rank)
    ]


def first(events: Iterable[EventRecord], kind: type[P], *, rank: int | None = None) -> Event[P] | None:
    """The first event of one payload type (of ``rank`` when set), or None."""
    found = of(events, kind, rank=rank)
    return found[0] if found else None


def times(events: Iterable[EventRecord], *kinds: type[wire.Payload]) -> list[float]:
    """When the events of these payload types arrived (those with a time)."""
    names = {k.KIND for k in kinds}
    return [e.t for e in events if e.kind in names and e.t is not None]


def last_stops(events: Iterable[EventRecord]) -> dict[int, Event[wire.RunStop]]:
    """Each rank's last ``run_stop`` (its last word on how it stopped), by rank."""
    return {e.rank: e for e in of(events, wire.RunStop)}


def main_stop(events: Iterable[EventRecord]) -> Event[wire.RunStop] | None:
    """The run's ``run_stop``: rank 0's last (every rank sends one), else the last of any rank."""
    stops = of(events, wire.RunStop)
    return next((e for e in reversed(stops) if e.rank == 0), stops[-1] if stops else None)


def environment(events: Iterable[EventRecord]) -> wire.Environment | None:
    """The run's environment fingerprint: the lowest rank's that sent one (rank 0 does)."""
    reported = sorted(of(events, wire.Environment), key=lambda e: e.rank)
    return reported[0].payload if reported else None
