"""Routes of log lines: batched ingest from ranks, and cursor reads filtered by rank (or rank set),
stream and regex."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from mlbench_tui.ranksets import parse_ranks
from mlbench_tui.server.routes.context import Api, Cursor, PageLimit, RunId, add_ingest_route, json_response
from mlbench_tui.store import queries
from mlbench_tui.store.api_models import MAX_RANK, LogBatch, LogsPage


def router(api: Api) -> APIRouter:
    routes = APIRouter(prefix="/v1/runs/{run_id}")

    add_ingest_route(routes, api, "logs", LogBatch)

    @routes.get("/logs", response_model=LogsPage, tags=["reads"])
    async def read_logs(
        run_id: RunId,
        request: Request,
        since: Cursor = 0,
        rank: Annotated[int | None, Query(ge=0, le=MAX_RANK)] = None,
        ranks: Annotated[
            str | None,
            Query(
                max_length=2000,
                description="A rank set: ranks and ranges, e.g. 0-7,512.",
                examples=["0-7,512"],
            ),
        ] = None,
        regex: Annotated[str | None, Query(max_length=queries.MAX_REGEX_LEN)] = None,
        stream: Annotated[str | None, Query(pattern="^(stdout|stderr|system)$")] = None,
        limit: PageLimit = 1000,
        tail: Annotated[
            bool, Query(description="The last 'limit' lines since the cursor, not the first.")
        ] = False,
    ) -> Response:
        """Log lines since a cursor, oldest first, filtered by rank (or a rank set), stream and a
        Python regex; the first ``limit`` of them, or the last with ``tail``."""
        api.authz.read(request)
        api.check_run(run_id)
        rank_set = parse_ranks(ranks) if ranks is not None else None
        return await api.read(
            request,
            lambda c: json_response(
                queries.logs(
                    c,
                    run_id,
                    since=since,
                    rank=rank,
                    ranks=rank_set,
                    regex=regex,
                    stream=stream,
                    limit=limit,
                    tail=tail,
                )
            ),
        )

    return routes
