"""SQLModel tables of the metric store: runs, ranks, metrics, log lines, events, batch receipts.

Times are unix seconds (REAL) so they sort and compare cheaply; JSON documents (plan, goal,
result, labels, event payloads) are TEXT written with orjson by the store. Metrics are long and
narrow, one row per value: ``(series, rank, step, epoch, t, value)`` where a series stands for one
``(run_id, name)`` pair of the ``series`` table, indexed on ``(series, step)``. Interning the run
and name keeps rows and index entries small (the ingest ceiling is the index insert); the view
``metrics_v`` spells rows out with ``run_id`` and ``name``. Row ids are assigned by the single
writer (see ``writer.py``), so they double as read cursors and live-stream positions.
"""

from __future__ import annotations

from sqlalchemy import Index
from sqlmodel import Field, SQLModel


class Run(SQLModel, table=True):
    """One benchmark run (one RunPlan launched once)."""

    __tablename__ = "runs"

    id: str = Field(primary_key=True, max_length=32, description="DNS-1123-safe id: r-<12 hex>.")
    name: str = Field(index=True)
    spec_name: str = ""
    spec_hash: str = ""
    spec_text: str = ""
    plan: str = "{}"
    task: str = ""
    backend: str = ""
    workers: int = 1
    repeat: int = 0
    goal: str | None = None
    state: str = Field(default="pending", index=True)
    target_kind: str = "local"
    handle: str | None = None
    created: float
    started: float | None = None
    finished: float | None = None
    result: str | None = None
    error: str | None = None
    labels: str = "{}"
    token_hash: str = Field(description="sha256 of the run's write token; the token itself is never stored.")
    updated: float


class RankRow(SQLModel, table=True):
    """State of one rank of a run."""

    __tablename__ = "ranks"

    run_id: str = Field(primary_key=True)
    rank: int = Field(primary_key=True)
    state: str = "pending"
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
    stream: str = "stdout"
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
    payload: str = "{}"
    t: float


class BatchReceipt(SQLModel, table=True):
    """Receipt of a stored ingest batch, so a retried ``(rank, session, kind, seq)`` is stored once."""

    __tablename__ = "batches"

    run_id: str = Field(primary_key=True)
    rank: int = Field(primary_key=True)
    kind: str = Field(primary_key=True)
    session: str = Field(default="", primary_key=True)
    seq: int = Field(primary_key=True)


class SchemaMigration(SQLModel, table=True):
    """Named migrations applied to this store file, in order."""

    __tablename__ = "schema_migrations"

    name: str = Field(primary_key=True)
    applied: float


TABLES = [
    Run.__table__,  # type: ignore[attr-defined]
    RankRow.__table__,  # type: ignore[attr-defined]
    Series.__table__,  # type: ignore[attr-defined]
    Metric.__table__,  # type: ignore[attr-defined]
    LogLine.__table__,  # type: ignore[attr-defined]
    Event.__table__,  # type: ignore[attr-defined]
    BatchReceipt.__table__,  # type: ignore[attr-defined]
    SchemaMigration.__table__,  # type: ignore[attr-defined]
]
