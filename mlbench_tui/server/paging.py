"""A run's whole metric series or event list, read page by page from the ``/v1`` reads: in the
server from the store (``store.queries``), in a client over HTTP (``MlbenchClient``); both give
the same wire pages, so one loop turns them into the records results are computed from."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from mlbench_tui.results.events import EventRecord
from mlbench_tui.results.time_to_accuracy import MetricPoint
from mlbench_tui.store.api_models import EventsPage, MetricsPage

NAMES_PER_READ = 50  # metric names per read (the API's limit is 100)

MetricsFetch = Callable[[list[str] | None, int], MetricsPage]  # (names or all, since) -> page
EventsFetch = Callable[[int], EventsPage]  # since -> page


def all_metrics(fetch: MetricsFetch, names: Sequence[str] | None = None) -> list[MetricPoint]:
    """Every point of the named metrics (all metrics when None, none when empty), NaN left out."""
    batches: list[list[str] | None] = [None]
    if names is not None:
        batches = [list(names[i : i + NAMES_PER_READ]) for i in range(0, len(names), NAMES_PER_READ)]
    points: list[MetricPoint] = []
    for batch in batches:
        cursor = 0
        while True:
            page = fetch(batch, cursor)
            for s in page.series:
                for step, value, t, epoch in zip(s.step, s.value, s.t, s.epoch, strict=True):
                    if value is not None:
                        points.append(MetricPoint(s.name, value, s.rank, step, epoch, t))
            if not page.series or page.cursor == cursor:
                break
            cursor = page.cursor
    return points


def all_events(fetch: EventsFetch) -> list[EventRecord]:
    """Every event, oldest first."""
    events: list[EventRecord] = []
    cursor = 0
    while True:
        page = fetch(cursor)
        events.extend(EventRecord(e.kind, e.payload, e.rank or 0, e.t) for e in page.events)
        if not page.events or page.cursor == cursor:
            return events
        cursor = page.cursor
