"""``RunReader``: the reads of runs and their metrics that a read-only command needs.

Two answer it alike: ``MlbenchClient`` over the ``/v1`` HTTP API, and ``store.reader.StoreReader``
from the store file through the same queries the server's read routes run. Code that reads
through this protocol (``report``, the TUI's compare screen) needs neither a server of its own nor
the store's modules: the TUI imports this, never the store it describes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from mlbench_tui.store.api_models import EventsPage, MetricsPage, RunDetail, RunInfo


class RunReader(Protocol):
    """The reads of runs and their metrics that ``MlbenchClient`` and ``StoreReader`` both answer."""

    def list_runs(
        self, *, state: str | None = None, spec_name: str | None = None, limit: int = 500
    ) -> list[RunInfo]: ...

    def get_run(self, run_id: str) -> RunDetail: ...

    def metrics(
        self,
        run_id: str,
        names: Sequence[str] | str | None = None,
        *,
        rank: int | None = None,
        since: int = 0,
        points: int | None = None,
        limit: int | None = None,
        timeout: float | None = None,
    ) -> MetricsPage: ...

    def events(
        self, run_id: str, since: int = 0, *, kind: str | None = None, limit: int = 1000
    ) -> EventsPage: ...

    def close(self) -> None: ...
