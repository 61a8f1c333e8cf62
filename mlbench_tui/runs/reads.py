"""A run's whole series read through the server's cursor pages: metrics and events."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mlbench_tui.results.time_to_accuracy import EventRecord, MetricPoint
    from mlbench_tui.server.client import MlbenchClient


def read_metrics(client: MlbenchClient, run_id: str, names: Sequence[str] | None = None) -> list[MetricPoint]:
    """Every stored point of a run's metrics (of ``names``, or all), following the cursor."""
    from mlbench_tui.results.time_to_accuracy import MetricPoint

    batches: list[list[str] | None] = [None]
    if names is not None:
        wanted = list(names)
        if not wanted:
            return []
        batches = [wanted[i : i + 50] for i in range(0, len(wanted), 50)]
    points: list[MetricPoint] = []
    for batch in batches:
        cursor = 0
        while True:
            page = client.metrics(run_id, names=batch, since=cursor)
            count = 0
            for series in page.series:
                for step, value, t, epoch in zip(
                    series.step, series.value, series.t, series.epoch, strict=False
                ):
                    if value is not None:
                        points.append(MetricPoint(series.name, value, series.rank, step, epoch, t))
                        count += 1
            if count == 0 or page.cursor == cursor:
                break
            cursor = page.cursor
    return points


def read_events(client: MlbenchClient, run_id: str) -> list[EventRecord]:
    """Every stored event of a run, oldest first."""
    from mlbench_tui.results.time_to_accuracy import EventRecord

    events: list[EventRecord] = []
    cursor = 0
    while True:
        page = client.events(run_id, since=cursor, limit=50_000)
        events.extend(EventRecord(e.kind, e.payload, e.rank or 0, e.t) for e in page.events)
        if not page.events or page.cursor == cursor:
            return events
        cursor = page.cursor
