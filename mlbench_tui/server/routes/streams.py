"""Routes of live streams (Server-Sent Events): one run's changes, and the run list's."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse

from mlbench_tui.errors import NotFound
from mlbench_tui.server.routes.context import Api, OptionalCursor, RunId
from mlbench_tui.server.stream import (
    KEEPALIVE_S,
    MAX_COALESCE_S,
    MAX_KEEPALIVE_S,
    MIN_COALESCE_S,
    MIN_KEEPALIVE_S,
    encode_change,
    encode_summary,
    follow,
    sse,
)
from mlbench_tui.server.stream_events import LIST_STREAM, RUN_STREAM, stream_response
from mlbench_tui.store import queries
from mlbench_tui.store.api_models import MAX_PAGE
from mlbench_tui.store.changes import Change
from mlbench_tui.store.store import Store

_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def router(api: Api) -> APIRouter:
    routes = APIRouter(tags=["streams"])

    @routes.get(
        "/v1/runs/{run_id}/stream", response_class=StreamingResponse, responses=stream_response(RUN_STREAM)
    )
    async def stream_run(
        run_id: RunId,
        request: Request,
        metrics_since: OptionalCursor = None,
        logs_since: OptionalCursor = None,
        events_since: OptionalCursor = None,
        coalesce: Annotated[
            float | None,
            Query(
                ge=MIN_COALESCE_S,
                le=MAX_COALESCE_S,
                description="Seconds: send one metrics_summary event per interval instead of every"
                " metrics batch (per metric and rank: last point, min and max; see MetricsSummary).",
            ),
        ] = None,
        name: Annotated[
            list[str] | None,
            Query(
                max_length=100,
                description="With coalesce: summarise only these metrics (what the client shows).",
            ),
        ] = None,
        keepalive: Annotated[
            float,
            Query(
                ge=MIN_KEEPALIVE_S,
                le=MAX_KEEPALIVE_S,
                description="Seconds without an event after which a keepalive comment is sent.",
            ),
        ] = KEEPALIVE_S,
    ) -> StreamingResponse:
        """Live stream of one run: ``run``, ``rank``, ``metrics``, ``logs``, ``events``, ``run_deleted``.

        With ``*_since`` cursors the stream first replays what was stored after them, so a client
        that read a page and then subscribes misses nothing. With ``coalesce`` metrics come as
        ``metrics_summary`` events (``MetricsSummary``), the replay included: a live view that only
        draws min/max/last per update costs the server one summary per interval, not every point.
        """
        api.authz.read(request)
        api.check_run(run_id)
        hub = api.hub
        sub = hub.subscribe(run_id, coalesce, tuple(name or ()))
        try:
            backlog, cursors = await asyncio.to_thread(
                _backlog,
                api.store,
                run_id,
                metrics_since,
                logs_since,
                events_since,
                coalesce is not None,
                sub.names,
            )
        except BaseException:
            hub.unsubscribe(sub)
            raise
        if coalesce is not None:
            hub.start_summaries(sub, cursors["metrics"])
        return StreamingResponse(
            follow(hub, sub, backlog, cursors, keepalive),
            media_type="text/event-stream",
            headers=_SSE_HEADERS,
        )

    @routes.get("/v1/stream", response_class=StreamingResponse, responses=stream_response(LIST_STREAM))
    async def stream_runs(request: Request) -> StreamingResponse:
        """Live stream of the run list: ``run`` (created or changed) and ``run_deleted`` events."""
        api.authz.read(request)
        sub = api.hub.subscribe(None)
        hello = sse("hello", {"subscribers": api.hub.subscribers})
        return StreamingResponse(
            follow(api.hub, sub, [hello], {}), media_type="text/event-stream", headers=_SSE_HEADERS
        )

    return routes


def _backlog(
    store: Store,
    run_id: str,
    metrics_since: int | None,
    logs_since: int | None,
    events_since: int | None,
    summary: bool = False,
    names: tuple[str, ...] = (),
) -> tuple[list[bytes], dict[str, int]]:
    """SSE chunks for what was stored after the given cursors, plus the run itself."""
    out: list[bytes] = []
    cursors: dict[str, int] = {}
    with store.engine.connect() as conn:
        detail = queries.get_run(conn, run_id)
        if detail is None:
            raise NotFound(f"run {run_id} not found")
        out.append(sse("run", detail.model_dump(mode="json")))
        if summary:  # one summary of everything after the cursor; live summaries go on from there
            if metrics_since is None:
                top = conn.exec_driver_sql("SELECT coalesce(max(id), 0) FROM metrics").scalar()
                cursors["metrics"] = int(top or 0)
            else:
                cursor, series = queries.metric_summary(conn, run_id, metrics_since, names)
                encoded = encode_summary(cursor, series)
                if encoded is not None:
                    out.append(encoded[2])
                cursors["metrics"] = cursor
        elif metrics_since is not None:
            # A recent cursor (a client reconnecting): walk the new rows by id; otherwise the
            # run's series through their index (as ``queries.metrics`` does).
            if store.recent_metrics(metrics_since):
                tables = "metrics AS m CROSS JOIN series AS s ON s.id = m.series"
            else:
                tables = (
                    "series AS s CROSS JOIN metrics AS m INDEXED BY ix_metrics_series_step ON m.series = s.id"
                )
            rows = conn.exec_driver_sql(
                f"SELECT m.id, s.run_id, m.rank, s.name, m.step, m.epoch, m.t, m.value FROM {tables}"
                " WHERE s.run_id = ? AND m.id > ? ORDER BY m.id LIMIT ?",
                (run_id, metrics_since, MAX_PAGE),
            ).fetchall()
            if rows:
                plain = [tuple(r) for r in rows]
                encoded = encode_change(Change("metrics", run_id, plain))
                assert encoded is not None
                out.append(encoded[2])
            cursors["metrics"] = rows[-1][0] if rows else metrics_since
        if logs_since is not None:
            logs = queries.logs(conn, run_id, since=logs_since, limit=MAX_PAGE)
            if logs.lines:
                out.append(
                    sse("logs", {"cursor": logs.cursor, "lines": [ln.model_dump() for ln in logs.lines]})
                )
            cursors["logs"] = logs.cursor
        if events_since is not None:
            events = queries.events(conn, run_id, since=events_since, limit=MAX_PAGE)
            if events.events:
                out.append(
                    sse(
                        "events", {"cursor": events.cursor, "events": [e.model_dump() for e in events.events]}
                    )
                )
            cursors["events"] = events.cursor
    return out, cursors
