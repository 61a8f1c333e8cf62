"""What each Server-Sent Event of the two live streams carries, declared for the OpenAPI document.

``server.stream`` encodes events straight from committed rows (no model per point: a batch may
hold thousands); these models say what those bytes are, the document lists them per stream
(``x-events``: event name -> the schema of its ``data``), and a contract test reads real streams
and checks every event against them.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from mlbench_tui.store.api_models import EventOut, LogLineOut, MetricsSummary, RankInfo, RunDetail


class StreamPoint(BaseModel):
    """One metric point of a ``metrics`` event."""

    id: int = Field(description="Store id: the stream's metrics cursor.")
    rank: int
    name: str
    step: int | None = None
    epoch: float | None = None
    t: float | None = None
    value: float | None = None


class MetricsEvent(BaseModel):
    """``metrics``: points committed in one batch (a run stream without ``coalesce``)."""

    cursor: int = Field(description="Highest id among the points; pass as metrics_since to resume.")
    points: list[StreamPoint]


class LogsEvent(BaseModel):
    """``logs``: log lines committed together."""

    cursor: int = Field(description="Highest id among the lines; pass as logs_since to resume.")
    lines: list[LogLineOut]


class EventsEvent(BaseModel):
    """``events``: the run's lifecycle events committed together (run_start, epoch_end, ...)."""

    cursor: int = Field(description="Highest id among the events; pass as events_since to resume.")
    events: list[EventOut]


class RunDeleted(BaseModel):
    """``run_deleted``: the run is gone (a run stream ends after it)."""

    id: str


class Resync(BaseModel):
    """``resync``: the client fell behind and events were dropped; refetch from its cursors."""

    reason: str


class Hello(BaseModel):
    """``hello``: the first event of the run-list stream."""

    subscribers: int = Field(description="Open streams on the server, this one included.")


RUN_STREAM: dict[str, type[BaseModel]] = {
    "run": RunDetail,
    "rank": RankInfo,
    "metrics": MetricsEvent,
    "metrics_summary": MetricsSummary,
    "logs": LogsEvent,
    "events": EventsEvent,
    "run_deleted": RunDeleted,
    "resync": Resync,
}
LIST_STREAM: dict[str, type[BaseModel]] = {
    "hello": Hello,
    "run": RunDetail,
    "run_deleted": RunDeleted,
    "resync": Resync,
}
STREAM_NOTE = (
    "Server-Sent Events: each event is an 'event: NAME' line and a 'data: JSON' line (keepalives are "
    "comment lines). x-events gives the schema of each event's data."
)


def stream_response(events: dict[str, type[BaseModel]]) -> dict[int | str, dict[str, Any]]:
    """The 200 answer of a stream route, its events listed by name under ``x-events``."""
    listed = {name: {"$ref": f"#/components/schemas/{model.__name__}"} for name, model in events.items()}
    content = {"schema": {"type": "string", "description": STREAM_NOTE}, "x-events": listed}
    return {200: {"content": {"text/event-stream": content}, "description": "An endless stream of events."}}


def models() -> list[type[BaseModel]]:
    """Every event data model, for the document's components."""
    seen: dict[str, type[BaseModel]] = {}
    for model in (*RUN_STREAM.values(), *LIST_STREAM.values()):
        seen.setdefault(model.__name__, model)
    return list(seen.values())
