"""Routes of events (run_start, epoch_end, goal_reached, ...): batched ingest and cursor reads."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from mlbench_tui.server.routes.context import Api, Cursor, PageLimit, RunId, add_ingest_route, json_response
from mlbench_tui.store import queries
from mlbench_tui.store.api_models import EventBatch, EventsPage


def router(api: Api) -> APIRouter:
    routes = APIRouter(prefix="/v1/runs/{run_id}")

    add_ingest_route(routes, api, "events", EventBatch)

    @routes.get("/events", response_model=EventsPage, tags=["reads"])
    async def read_events(
        run_id: RunId,
        request: Request,
        since: Cursor = 0,
        kind: Annotated[str | None, Query(max_length=64)] = None,
        limit: PageLimit = 1000,
    ) -> Response:
        api.authz.read(request)
        api.check_run(run_id)
        found = await api.read(
            request, lambda c: queries.events(c, run_id, since=since, kind=kind, limit=limit)
        )
        return json_response(found)

    return routes
