"""Routes of runs: register, list, read, update and delete runs, and set their ranks' states."""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated, TypeVar

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import Response
from sqlalchemy import Connection

from mlbench_tui.errors import NotFound, StoreError
from mlbench_tui.results.model import RunResult
from mlbench_tui.server.errors import ApiError
from mlbench_tui.server.results import ends_run, recomputed, stale, with_result
from mlbench_tui.server.routes.context import Api, RunId, json_response
from mlbench_tui.store import queries
from mlbench_tui.store.api_models import (
    MAX_RANK,
    ErrorBody,
    RankInfo,
    RankUpdate,
    RankUpdates,
    RunCreate,
    RunCreated,
    RunDetail,
    RunInfo,
    RunUpdate,
)

Rank = Annotated[int, Path(ge=0, le=MAX_RANK)]
RunInfoT = TypeVar("RunInfoT", bound=RunInfo)
log = logging.getLogger(__name__)


def served(run: RunInfoT, recomputed: dict[str, RunResult]) -> RunInfoT:
    """``run`` with the result recomputed for it where the store could not keep it."""
    result = recomputed.get(run.id)
    return run if result is None else run.model_copy(update={"result": result})


def router(api: Api) -> APIRouter:
    routes = APIRouter(prefix="/v1/runs", tags=["runs"])

    @routes.post("", status_code=201, response_model=RunCreated)
    async def create_run(body: RunCreate, request: Request) -> Response:
        """Register a run; the answer carries its write token, shown only this once."""
        api.authz.admin(request)
        fn, token = api.store.op_create_run(body)
        detail = await api.write(fn)
        return json_response(RunCreated(run=detail, write_token=token), status=201)

    @routes.get("", response_model=list[RunInfo])
    async def list_runs(
        request: Request,
        state: Annotated[str | None, Query(max_length=32)] = None,
        spec_name: Annotated[str | None, Query(max_length=128)] = None,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 500,
    ) -> Response:
        """Runs, newest first; a result that other rules computed is recomputed first (see get_run)."""
        api.authz.read(request)

        def listed(conn: Connection) -> list[RunInfo]:
            return queries.list_runs(conn, state=state, spec_name=spec_name, limit=limit)

        runs = await api.read(request, listed)
        stored, unstored = await refresh(request, [run.id for run in runs if stale(run)])
        if stored:
            runs = await api.read(request, listed)
        return json_response([served(run, unstored) for run in runs])

    @routes.get("/{run_id}", response_model=RunDetail)
    async def get_run(run_id: RunId, request: Request) -> Response:
        """A run with its plan, ranks and result. A result stored by other rules than this
        version's is recomputed from the run's stored metrics and events, and stored, before it is
        served (``result.computed_by`` says by which version, and what it replaced)."""
        api.authz.read(request)
        detail = await api.read(request, lambda c: queries.get_run(c, run_id))
        if detail is None:
            raise NotFound(f"run {run_id} not found")
        if stale(detail):
            stored, unstored = await refresh(request, [run_id])
            if stored:
                detail = await api.read(request, lambda c: queries.get_run(c, run_id))
                if detail is None:  # deleted meanwhile
                    raise NotFound(f"run {run_id} not found")
            detail = served(detail, unstored)
        return json_response(detail)

    @routes.post(
        "/{run_id}/result:recompute",
        response_model=RunDetail,
        responses={409: {"model": ErrorBody, "description": "The run has not ended with a result."}},
    )
    async def recompute_result(run_id: RunId, request: Request) -> Response:
        """Recompute a finished run's result from its stored metrics and events with this version's
        rules (its recorded state and error are kept), store it and answer the run; 409 for a run
        that has not ended with a result."""
        api.authz.admin(request)
        update = await api.read(request, lambda c: recomputed(api.store, c, run_id))
        if update is None:
            raise ApiError(409, "conflict", f"run {run_id} has no result to recompute: it has not ended")
        return json_response(await api.write(api.store.op_update_run(run_id, update)))

    async def refresh(request: Request, run_ids: list[str]) -> tuple[bool, dict[str, RunResult]]:
        """Recompute the results of ``run_ids`` and store them: whether any was stored, and
        those the store could not take (read-only, full or locked: after the first such refusal
        none is tried), to be served as computed all the same. One that cannot be recomputed is
        served as stored (and logged)."""
        stored = False
        unstored: dict[str, RunResult] = {}
        refused = api.store.read_only is not None
        for run_id in run_ids:

            def fresh(conn: Connection, run_id: str = run_id) -> RunUpdate | None:
                return recomputed(api.store, conn, run_id)

            try:
                update = await api.read(request, fresh)
            except (NotFound, StoreError):
                continue
            except Exception:  # a result that cannot be recomputed is still served as stored
                log.exception("cannot recompute the result of run %s", run_id)
                continue
            if update is None or update.result is None:
                continue
            if not refused:
                try:
                    await api.write(api.store.op_update_run(run_id, update))
                    stored = True
                    continue
                except NotFound:
                    continue
                except StoreError as exc:
                    log.warning("recomputed results are served without storing them: %s", exc)
                    refused = True
            unstored[run_id] = update.result
        return stored, unstored

    @routes.patch("/{run_id}", response_model=RunDetail)
    async def update_run(run_id: RunId, body: RunUpdate, request: Request) -> Response:
        """Change a run; a final state without a result gets the run's result (``server.results``)."""
        api.authz.admin(request)
        if ends_run(body):  # the record complete first: what the ranks spooled, then the result
            await asyncio.to_thread(api.spools.import_for, run_id, ended=True, settle=False)
            body = await api.read(request, lambda c: with_result(api.store, c, run_id, body))
        return json_response(await api.write(api.store.op_update_run(run_id, body)))

    @routes.delete("/{run_id}", status_code=204)
    async def delete_run(run_id: RunId, request: Request) -> Response:
        """Delete a run with all its metrics, logs, events and ranks."""
        api.authz.admin(request)
        await api.write(api.store.op_delete_run(run_id))
        return Response(status_code=204)

    async def set_rank(run_id: str, rank: int, body: RankUpdate, request: Request) -> Response:
        if api.authz.write_run(request, run_id) is None:
            raise NotFound(f"run {run_id} not found")
        return json_response(await api.write(api.store.op_update_rank(run_id, rank, body)))

    @routes.put("/{run_id}/ranks", response_model=list[RankInfo])
    async def put_ranks(run_id: RunId, body: RankUpdates, request: Request) -> Response:
        """Set the states of many ranks at once (an executor polling a large run sends one request)."""
        if api.authz.write_run(request, run_id) is None:
            raise NotFound(f"run {run_id} not found")
        updates = [
            (item.rank, RankUpdate(**item.model_dump(exclude_unset=True, exclude={"rank"})))
            for item in body.ranks
        ]
        return json_response(await api.write(api.store.op_update_ranks(run_id, updates)))

    @routes.put("/{run_id}/ranks/{rank}", response_model=RankInfo)
    async def put_rank(run_id: RunId, rank: Rank, body: RankUpdate, request: Request) -> Response:
        """Set a rank's state (executor with the admin token, or the rank with the run token)."""
        return await set_rank(run_id, rank, body, request)

    @routes.patch("/{run_id}/ranks/{rank}", response_model=RankInfo)
    async def patch_rank(run_id: RunId, rank: Rank, body: RankUpdate, request: Request) -> Response:
        return await set_rank(run_id, rank, body, request)

    return routes
