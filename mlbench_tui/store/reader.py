"""Read-only access to a store file in this process, with the read methods of the HTTP client.

``StoreReader`` answers ``RunReader`` (``store.read_api``: what a read-only command needs) from
the file itself, through the same queries the server's read routes run, so ``mlbench report``
needs no server of its own. WAL lets it read beside a server that is writing the same store.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Sequence
from pathlib import Path

from sqlalchemy import Engine

from mlbench_tui.errors import NotFound
from mlbench_tui.lifecycle import RunState
from mlbench_tui.results.provenance import rules_digest
from mlbench_tui.store import queries
from mlbench_tui.store.api_models import MAX_PAGE, EventsPage, MetricsPage, RunDetail, RunInfo
from mlbench_tui.store.engine import default_db_path, make_engine, read_only_uri
from mlbench_tui.store.read_api import RunReader

__all__ = ["RunReader", "StoreReader"]


class StoreReader:
    """A ``RunReader`` over one store file; raises ``NotFound`` for an unknown run."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    @classmethod
    def open(cls, path: str | Path | None = None) -> StoreReader | None:
        """A reader of ``path`` (the default store), or None where only a server can answer: no
        file yet, a schema this code would first have to migrate (which takes the writer), or a
        result that other rules computed (a server recomputes and stores it before serving it)."""
        from mlbench_tui.store.migrations import MIGRATIONS

        file = Path(path).expanduser() if path else default_db_path()
        if not file.is_file():
            return None
        try:
            with contextlib.closing(sqlite3.connect(read_only_uri(file), uri=True)) as conn:
                done = {row[0] for row in conn.execute("SELECT name FROM schema_migrations")}
                if done != {name for name, _ in MIGRATIONS} or _stale_results(conn):
                    return None
        except sqlite3.Error:
            return None
        return cls(make_engine(file.resolve(), pool_size=1, read_only=True))

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> StoreReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def list_runs(
        self, *, state: str | None = None, spec_name: str | None = None, limit: int = 500
    ) -> list[RunInfo]:
        with self._engine.connect() as conn:
            return queries.list_runs(conn, state=state, spec_name=spec_name, limit=limit)

    def get_run(self, run_id: str) -> RunDetail:
        with self._engine.connect() as conn:
            detail = queries.get_run(conn, run_id)
        if detail is None:
            raise NotFound(f"run {run_id} not found")
        return detail

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
    ) -> MetricsPage:
        """As ``MlbenchClient.metrics`` (``timeout`` is the HTTP client's; a file read has none)."""
        name_list = [names] if isinstance(names, str) else list(names or ())
        with self._engine.connect() as conn:
            return queries.metrics(
                conn,
                run_id,
                names=name_list,
                rank=rank,
                since=since,
                points=points,
                limit=limit or MAX_PAGE,
            )

    def events(
        self, run_id: str, since: int = 0, *, kind: str | None = None, limit: int = 1000
    ) -> EventsPage:
        """As ``MlbenchClient.events``: events newer than ``since``, oldest first."""
        with self._engine.connect() as conn:
            return queries.events(conn, run_id, since=since, kind=kind, limit=limit)


def _stale_results(conn: sqlite3.Connection) -> bool:
    """Whether a finished run's stored result was computed by other rules than this version's."""
    terminal = tuple(state.value for state in RunState if state.is_terminal())
    row = conn.execute(
        "SELECT 1 FROM runs WHERE result IS NOT NULL AND state IN (?, ?, ?)"
        " AND coalesce(json_extract(result, '$.computed_by.rules'), '') != ? LIMIT 1",
        (*terminal, rules_digest()),
    ).fetchone()
    return row is not None
