"""A run's whole metric series and event list, read over HTTP through the server's cursor pages."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from mlbench_tui.results.events import EventRecord
from mlbench_tui.results.time_to_accuracy import MetricPoint
from mlbench_tui.server.paging import all_events, all_metrics

if TYPE_CHECKING:
    from mlbench_tui.server.client import MlbenchClient


def read_metrics(client: MlbenchClient, run_id: str, names: Sequence[str] | None = None) -> list[MetricPoint]:
    """Every stored point of a run's metrics (of ``names``, or all)."""
    return all_metrics(lambda batch, since: client.metrics(run_id, names=batch, since=since), names)


def read_events(client: MlbenchClient, run_id: str) -> list[EventRecord]:
    """Every stored event of a run, oldest first."""
    return all_events(lambda since: client.events(run_id, since=since, limit=50_000))
