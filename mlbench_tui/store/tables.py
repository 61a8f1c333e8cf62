"""SQLModel tables of the metric store: the schema's single source.

A new store is created from these models and every store is checked against them when it is
opened for writing (``schema.py``); the frozen migrations (``migrations.py``) bring older files to
the same schema, and the writer's inserts are built from them.

Times are unix seconds (REAL) so they sort and compare cheaply; JSON documents (plan, goal,
result, labels, event payloads) are TEXT written with orjson by the store. Metrics are long and
narrow, one row per value: ``(series, rank, step, epoch, t, value)`` where a series stands for one
``(run_id, name)`` pair of the ``series`` table, indexed on ``(series, step)``. Interning the run
and name keeps rows and index entries small (the ingest ceiling is the index insert); the view
``metrics_v`` spells rows out with ``run_id`` and ``name``. Row ids are assigned by the single
writer (see ``writer.py``), so they double as read cursors and live-stream positions.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Index, Table, text
from sqlmodel import Field, SQLModel


def _default(value: str | int, **kwargs: Any) -> Any:
    """A field whose default the database applies too (``DEFAULT`` in the DDL)."""
    server_default = text(str(value)) if isinstance(value, int) else value
    return Field(default=value, sa_column_kwargs={"server_default": server_default}, **kwargs)


class Run(SQLModel, table=True):
    """One benchmark run (one RunPlan launched once)."""

    __tablename__ = "runs"

    id: str = Field(primary_key=True, max_length=32, description="DNS-1123-safe id: r-<12 hex>.")
    name: str = Field(index=True)
    spec_name: str = _default("")
    spec_hash: str = _default("")
    spec_text: str = _default("")
    plan: str = _default("{}")
    task: str = _default("")
    backend: str = _default("")
    workers: int = _default(1)
    repeat: int = _default(0)
    goal: str | None = None
    state: str = _default("pending", index=True)
    target_kind: str = _default("local")
    handle: str | None = None
    created: float
    started: float | None = None
    finished: float | None = None
    result: str | None = None
    error: str | None = None
    labels: str = _default("{}")
    launch: str | None = Field(default=None, description="The target's launch milestones (JSON).")
    owner: str | None = Field(default=None, description="The process that launches and watches it (JSON).")
    spool: str | None = Field(default=None, description="Folder where its ranks keep unsent batches.")
    token_hash: str = Field(description="sha256 of the run's write token; the token itself is never stored.")
    updated: float


class RankRow(SQLModel, table=True):
    """State of one rank of a run."""

    __tablename__ = "ranks"

    run_id: str = Field(primary_key=True)
    rank: int = Field(primary_key=True)
    state: str = _default("pending")
    host: str | None = None
    pid: int | None = None
    pod: str | None = None
    exit_code: int | None = None
    message: str | None = None
    updated: float


class Series(SQLModel, table=True):
    """One metric of one run: the ``(run_id, name)`` pair that metric rows refer to by id."""

    __tablename__ = "series"
    __table_args__ = (Index("ix_series_run_name", "run_id", "name", unique=True),)

    id: int | None = Field(default=None, primary_key=True)
    run_id: str
    name: str


class Metric(SQLModel, table=True):
    """One metric value: long and narrow so any metric name needs no schema change."""

    __tablename__ = "metrics"
    __table_args__ = (Index("ix_metrics_series_step", "series", "step"),)

    id: int | None = Field(default=None, primary_key=True)
    series: int = Field(description="``series.id``: the run and metric name of this value.")
    rank: int
    step: int | None = None
    epoch: float | None = None
    t: float
    value: float | None = None


class LogLine(SQLModel, table=True):
    """One line of a rank's stdout/stderr."""

    __tablename__ = "logs"
    __table_args__ = (Index("ix_logs_run", "run_id"),)

    id: int | None = Field(default=None, primary_key=True)
    run_id: str
    rank: int
    stream: str = _default("stdout")
    seq: int | None = None
    t: float
    text: str


class Event(SQLModel, table=True):
    """A structured event (run_start, epoch_end, goal_reached, run_stop, rank_failed, ...)."""

    __tablename__ = "events"
    __table_args__ = (Index("ix_events_run", "run_id"),)

    id: int | None = Field(default=None, primary_key=True)
    run_id: str
    rank: int | None = None
    kind: str
    payload: str = _default("{}")
    t: float


class BatchReceipt(SQLModel, table=True):
    """Receipt of a stored ingest batch, so a retried ``(rank, session, kind, seq)`` is stored once."""

    __tablename__ = "batches"
    __table_args__ = {"sqlite_with_rowid": False}

    run_id: str = Field(primary_key=True)
    rank: int = Field(primary_key=True)
    kind: str = Field(primary_key=True)
    session: str = _default("", primary_key=True)
    seq: int = Field(primary_key=True)


class SchemaMigration(SQLModel, table=True):
    """Named migrations applied to this store file, in order."""

    __tablename__ = "schema_migrations"

    name: str = Field(primary_key=True)
    applied: float


TABLES: list[Table] = [
    Run.__table__,  # type: ignore[attr-defined]
    RankRow.__table__,  # type: ignore[attr-defined]
    Series.__table__,  # type: ignore[attr-defined]
    Metric.__table__,  # type: ignore[attr-defined]
    LogLine.__table__,  # type: ignore[attr-defined]
    Event.__table__,  # type: ignore[attr-defined]
    BatchReceipt.__table__,  # type: ignore[attr-defined]
    SchemaMigration.__table__,  # type: ignore[attr-defined]
]

# Views over the tables, by name: their SELECT.
VIEWS: dict[str, str] = {
    "metrics_v": (
        "SELECT m.id AS id, s.run_id AS run_id, m.rank AS rank, s.name AS name, m.step AS step,"
        " m.epoch AS epoch, m.t AS t, m.value AS value"
        " FROM metrics AS m JOIN series AS s ON s.id = m.series"
    ),
}
