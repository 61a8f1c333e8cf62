"""Routes of metrics: batched ingest from workers, cursor reads with downsampling, metric names,
and reads across ranks (every rank's latest point, percentile bands)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from sqlalchemy import Connection

from mlbench_tui.server.routes.context import Api, Cursor, PageLimit, RunId, add_ingest_route, json_response
from mlbench_tui.store import across_ranks, queries
from mlbench_tui.store.api_models import (
    MAX_PAGE,
    MAX_POINTS,
    MAX_RANK,
    MetricBands,
    MetricBatch,
    MetricName,
    MetricsPage,
    RanksLatest,
)


def router(api: Api) -> APIRouter:
    routes = APIRouter(prefix="/v1/runs/{run_id}")

    add_ingest_route(
        routes,
        api,
        "metrics",
        MetricBatch,
        "Store a batch of metric values; answered after commit. Retries with the same seq are no-ops.",
    )

    @routes.get("/metrics", response_model=MetricsPage, tags=["reads"])
    async def read_metrics(
        run_id: RunId,
        request: Request,
        name: Annotated[list[str] | None, Query(max_length=100)] = None,
        rank: Annotated[int | None, Query(ge=0, le=MAX_RANK)] = None,
        since: Cursor = 0,
        points: Annotated[int | None, Query(ge=1, le=MAX_POINTS)] = None,
        limit: PageLimit = MAX_PAGE,
    ) -> Response:
        """Points since a cursor, per (name, rank); ``points=N`` downsamples to N buckets (min/max/last)."""
        api.authz.read(request)
        api.check_run(run_id)
        recent = api.store.recent_metrics(since)

        def page(conn: Connection) -> Response:  # encoded in the read worker too, off the event loop
            found = queries.metrics(
                conn,
                run_id,
                names=name or (),
                rank=rank,
                since=since,
                points=points,
                limit=limit,
                recent=recent,
            )
            return json_response(found)

        return await api.read(request, page)

    @routes.get("/metrics/latest", response_model=RanksLatest, tags=["reads"])
    async def read_latest(
        run_id: RunId, request: Request, name: Annotated[list[str], Query(min_length=1, max_length=100)]
    ) -> Response:
        """Every rank's latest point of each metric, in one answer however many ranks the run has."""
        api.authz.read(request)
        api.check_run(run_id)
        return await api.read(request, lambda c: json_response(across_ranks.latest_by_rank(c, run_id, name)))

    @routes.get("/metrics/bands", response_model=MetricBands, tags=["reads"])
    async def read_bands(
        run_id: RunId,
        request: Request,
        name: Annotated[list[str], Query(min_length=1, max_length=100)],
        points: Annotated[int, Query(ge=1, le=MAX_POINTS)] = 200,
    ) -> Response:
        """p50, p90 and max of each metric across ranks, in at most ``points`` buckets of steps."""
        api.authz.read(request)
        api.check_run(run_id)
        return await api.read(
            request, lambda c: json_response(across_ranks.rank_bands(c, run_id, name, points))
        )

    @routes.get("/metrics/names", response_model=list[MetricName], tags=["reads"])
    async def read_metric_names(run_id: RunId, request: Request) -> Response:
        api.authz.read(request)
        api.check_run(run_id)
        return json_response(await api.read(request, lambda _c: api.store.metric_names(run_id)))

    return routes
