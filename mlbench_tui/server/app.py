"""The HTTP API (``/v1``): runs, batched ingest from workers, cursor reads, live streams.

Ingest routes are the hot path (see ``ingest.py``): they read the body once, validate it against
the wire models, hand positional rows to the store's writer and answer only after the group
transaction committed. Everything else is ordinary FastAPI. Every rejection is
a 4xx with a JSON body ``{"error": reason, "detail": ...}``; tokens never appear in answers or logs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any, TypeVar

import orjson
from fastapi import FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from mlbench_tui import __version__
from mlbench_tui.errors import NotFound, StoreError, UsageError
from mlbench_tui.server.auth import AuthConfig, AuthError, Authorizer, bearer
from mlbench_tui.server.ingest import ApiError, IngestFastPath, Ingestor, clean_errors
from mlbench_tui.server.reads import ReadAborted, ReadGate
from mlbench_tui.server.results import ends_run, with_result
from mlbench_tui.server.stream import (
    MAX_COALESCE_S,
    MIN_COALESCE_S,
    Hub,
    encode_change,
    encode_summary,
    follow,
    sse,
)
from mlbench_tui.store import queries
from mlbench_tui.store.api_models import (
    MAX_BODY_BYTES,
    MAX_PAGE,
    MAX_POINTS,
    MAX_RANK,
    BatchAck,
    ErrorBody,
    EventBatch,
    EventsPage,
    Health,
    LogBatch,
    LogsPage,
    MetricBatch,
    MetricName,
    MetricsPage,
    MetricsSummary,
    RankInfo,
    RankUpdate,
    RunCreate,
    RunCreated,
    RunDetail,
    RunInfo,
    RunUpdate,
)
from mlbench_tui.store.store import Store
from mlbench_tui.store.writer import Change

M = TypeVar("M", bound=BaseModel)
log = logging.getLogger("mlbench.server")

RunId = Annotated[str, Path(min_length=1, max_length=64, description="Run id, e.g. r-0123456789ab.")]

_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "Missing or invalid token."},
    403: {"model": ErrorBody, "description": "Token not allowed to do this."},
    404: {"model": ErrorBody, "description": "Unknown run."},
    413: {"model": ErrorBody, "description": "Body too large."},
    422: {"model": ErrorBody, "description": "Invalid request."},
}


def _error(status: int, reason: str, detail: Any = None) -> JSONResponse:
    return JSONResponse({"error": reason, "detail": detail}, status_code=status)


def _json(model: BaseModel | list[Any], status: int = 200) -> Response:
    if isinstance(model, list):
        body = orjson.dumps([m.model_dump(mode="json") for m in model])
    else:
        body = model.__pydantic_serializer__.to_json(model)
    return Response(body, status_code=status, media_type="application/json")


def _schema_body(model: type[BaseModel]) -> dict[str, Any]:
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}},
        },
        "security": [{"bearer": []}],
    }


def create_app(store: Store, auth: AuthConfig) -> IngestFastPath:
    """The ASGI app over ``store``; the caller owns the store's lifetime.

    The outermost layer is ``IngestFastPath``, which answers the three ingest routes itself and
    hands everything else (and the lifespan) to the FastAPI app, its ``app`` attribute.
    """
    hub = Hub(
        lambda run_id, after, names: store.read(lambda c: queries.metric_summary(c, run_id, after, names))
    )
    authz = Authorizer(auth, store)
    ingestor = Ingestor(store, authz)
    reads = ReadGate(store.engine)
    if store.writer is not None:
        store.writer.listeners.append(hub.publish)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        loop = asyncio.get_running_loop()
        hub.bind(loop)
        if store.writer is not None:
            store.writer.attach_loop(loop)  # commit requests inside the event loop (group commit)
        try:
            yield
        finally:
            if store.writer is not None:
                await store.writer.drain()
                store.writer.attach_loop(None)
            hub.close_all()
            reads.close()

    app = FastAPI(
        title="mlbench-tui metrics API",
        version=__version__,
        description="Runs, batched metric/log/event ingest from workers, cursor reads and live streams.",
        lifespan=lifespan,
        responses=_ERRORS,
    )
    app.state.store = store
    app.state.hub = hub
    app.state.reads = reads
    app.state.auth = auth

    # ------------------------------------------------------------------ errors

    @app.exception_handler(ApiError)
    async def _api_error(_r: Request, exc: ApiError) -> JSONResponse:
        return _error(exc.status, exc.reason, exc.detail)

    @app.exception_handler(AuthError)
    async def _auth_error(_r: Request, exc: AuthError) -> JSONResponse:
        resp = _error(exc.status, exc.reason, exc.message)
        if exc.status == 401:
            resp.headers["WWW-Authenticate"] = "Bearer"
        return resp

    @app.exception_handler(NotFound)
    async def _not_found(_r: Request, exc: NotFound) -> JSONResponse:
        return _error(404, "not_found", exc.message)

    @app.exception_handler(UsageError)
    async def _usage(_r: Request, exc: UsageError) -> JSONResponse:
        return _error(422, "invalid_request", exc.message)

    @app.exception_handler(ReadAborted)
    async def _read_aborted(_r: Request, exc: ReadAborted) -> JSONResponse:
        return _error(503, exc.reason, exc.message)

    @app.exception_handler(StoreError)
    async def _store_error(_r: Request, exc: StoreError) -> JSONResponse:
        return _error(503, "store_error", exc.message)

    @app.exception_handler(RequestValidationError)
    async def _validation(_r: Request, exc: RequestValidationError) -> JSONResponse:
        return _error(422, "invalid_request", clean_errors(exc.errors()))

    @app.exception_handler(Exception)
    async def _internal(_r: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", exc_info=exc)
        return _error(500, "internal_error", "internal server error (see the server log)")

    @app.exception_handler(StarletteHTTPException)
    async def _http(_r: Request, exc: StarletteHTTPException) -> JSONResponse:
        reason = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return _error(exc.status_code, reason, exc.detail)

    # ------------------------------------------------------------------ helpers

    async def read_body(request: Request) -> bytes:
        length = request.headers.get("content-length")
        if length is not None:
            try:
                if int(length) > MAX_BODY_BYTES:
                    raise ApiError(413, "body_too_large", f"body over {MAX_BODY_BYTES} bytes")
            except ValueError:
                raise ApiError(400, "bad_request", "invalid Content-Length") from None
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise ApiError(413, "body_too_large", f"body over {MAX_BODY_BYTES} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    def parse(model: type[M], body: bytes) -> M:
        try:
            return model.model_validate_json(body)
        except ValidationError as exc:
            raise ApiError(422, "invalid_request", clean_errors(exc.errors(include_url=False))) from None

    async def write(fn: Callable[[Any], tuple[Any, list[Change]]]) -> Any:
        if store.writer is None:
            raise StoreError("store is read-only")
        return await store.writer.call_async(fn)

    async def reader(request: Request, fn: Callable[[Any], Any]) -> Any:
        return await reads.run(request, fn)

    def check_run(run_id: str) -> None:
        if store.writer is not None and not store.writer.has_run(run_id):
            raise NotFound(f"run {run_id} not found")

    async def ingest(request: Request, run_id: str, kind: str) -> Response:
        body = await ingestor.handle(run_id, kind, bearer(request), await read_body(request))
        return Response(body, media_type="application/json")

    # ------------------------------------------------------------------ health

    @app.get("/healthz", response_model=Health, tags=["server"])
    def healthz() -> Response:
        import os

        return _json(
            Health(version=__version__, store=str(store.path), pid=os.getpid(), open_reads=auth.open_reads)
        )

    # ------------------------------------------------------------------ runs

    @app.post("/v1/runs", status_code=201, response_model=RunCreated, tags=["runs"])
    async def create_run(body: RunCreate, request: Request) -> Response:
        """Register a run; the answer carries its write token, shown only this once."""
        authz.admin(request)
        fn, token = store.op_create_run(body)
        detail = await write(fn)
        return _json(RunCreated(run=detail, write_token=token), status=201)

    @app.get("/v1/runs", response_model=list[RunInfo], tags=["runs"])
    async def list_runs(
        request: Request,
        state: Annotated[str | None, Query(max_length=32)] = None,
        spec_name: Annotated[str | None, Query(max_length=128)] = None,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 500,
    ) -> Response:
        authz.read(request)
        return _json(
            await reader(
                request, lambda c: queries.list_runs(c, state=state, spec_name=spec_name, limit=limit)
            )
        )

    @app.get("/v1/runs/{run_id}", response_model=RunDetail, tags=["runs"])
    async def get_run(run_id: RunId, request: Request) -> Response:
        authz.read(request)
        detail = await reader(request, lambda c: queries.get_run(c, run_id))
        if detail is None:
            raise NotFound(f"run {run_id} not found")
        return _json(detail)

    @app.patch("/v1/runs/{run_id}", response_model=RunDetail, tags=["runs"])
    async def update_run(run_id: RunId, body: RunUpdate, request: Request) -> Response:
        """Change a run; a final state without a result gets the run's result (``server.results``)."""
        authz.admin(request)
        if ends_run(body):
            body = await reader(request, lambda c: with_result(store, c, run_id, body))
        return _json(await write(store.op_update_run(run_id, body)))

    @app.delete("/v1/runs/{run_id}", status_code=204, tags=["runs"])
    async def delete_run(run_id: RunId, request: Request) -> Response:
        """Delete a run with all its metrics, logs, events and ranks."""
        authz.admin(request)
        await write(store.op_delete_run(run_id))
        return Response(status_code=204)

    async def _rank(run_id: str, rank: int, body: RankUpdate, request: Request) -> Response:
        if authz.write_run(request, run_id) is None:
            raise NotFound(f"run {run_id} not found")
        return _json(await write(store.op_update_rank(run_id, rank, body)))

    @app.put("/v1/runs/{run_id}/ranks/{rank}", response_model=RankInfo, tags=["runs"])
    async def put_rank(
        run_id: RunId, rank: Annotated[int, Path(ge=0, le=MAX_RANK)], body: RankUpdate, request: Request
    ) -> Response:
        """Set a rank's state (executor with the admin token, or the rank with the run token)."""
        return await _rank(run_id, rank, body, request)

    @app.patch("/v1/runs/{run_id}/ranks/{rank}", response_model=RankInfo, tags=["runs"])
    async def patch_rank(
        run_id: RunId, rank: Annotated[int, Path(ge=0, le=MAX_RANK)], body: RankUpdate, request: Request
    ) -> Response:
        return await _rank(run_id, rank, body, request)

    # ------------------------------------------------------------------ ingest

    @app.post(
        "/v1/runs/{run_id}/metrics:batch",
        response_model=BatchAck,
        tags=["ingest"],
        openapi_extra=_schema_body(MetricBatch),
    )
    async def metrics_batch(run_id: RunId, request: Request) -> Response:
        """Store a batch of metric values; answered after commit. Retries with the same seq are no-ops."""
        return await ingest(request, run_id, "metrics")

    @app.post(
        "/v1/runs/{run_id}/logs:batch",
        response_model=BatchAck,
        tags=["ingest"],
        openapi_extra=_schema_body(LogBatch),
    )
    async def logs_batch(run_id: RunId, request: Request) -> Response:
        return await ingest(request, run_id, "logs")

    @app.post(
        "/v1/runs/{run_id}/events:batch",
        response_model=BatchAck,
        tags=["ingest"],
        openapi_extra=_schema_body(EventBatch),
    )
    async def events_batch(run_id: RunId, request: Request) -> Response:
        return await ingest(request, run_id, "events")

    # ------------------------------------------------------------------ reads

    @app.get("/v1/runs/{run_id}/metrics", response_model=MetricsPage, tags=["reads"])
    async def read_metrics(
        run_id: RunId,
        request: Request,
        name: Annotated[list[str] | None, Query(max_length=100)] = None,
        rank: Annotated[int | None, Query(ge=0, le=MAX_RANK)] = None,
        since: Annotated[int, Query(ge=0, le=2**62)] = 0,
        points: Annotated[int | None, Query(ge=1, le=MAX_POINTS)] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = MAX_PAGE,
    ) -> Response:
        """Points since a cursor, per (name, rank); ``points=N`` downsamples to N buckets (min/max/last)."""
        authz.read(request)
        check_run(run_id)
        recent = store.recent_metrics(since)
        # Encoded in the read worker too: a full page is tens of ms the event loop keeps for ingest.
        return await reader(
            request,
            lambda c: _json(
                queries.metrics(
                    c,
                    run_id,
                    names=name or (),
                    rank=rank,
                    since=since,
                    points=points,
                    limit=limit,
                    recent=recent,
                )
            ),
        )

    @app.get("/v1/runs/{run_id}/metrics/names", response_model=list[MetricName], tags=["reads"])
    async def read_metric_names(run_id: RunId, request: Request) -> Response:
        authz.read(request)
        check_run(run_id)
        return _json(await reader(request, lambda _c: store.metric_names(run_id)))

    @app.get("/v1/runs/{run_id}/logs", response_model=LogsPage, tags=["reads"])
    async def read_logs(
        run_id: RunId,
        request: Request,
        since: Annotated[int, Query(ge=0, le=2**62)] = 0,
        rank: Annotated[int | None, Query(ge=0, le=MAX_RANK)] = None,
        regex: Annotated[str | None, Query(max_length=queries.MAX_REGEX_LEN)] = None,
        stream: Annotated[str | None, Query(pattern="^(stdout|stderr|system)$")] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 1000,
    ) -> Response:
        """Log lines since a cursor, oldest first, filtered by rank, stream and a Python regex."""
        authz.read(request)
        check_run(run_id)
        return await reader(
            request,
            lambda c: _json(
                queries.logs(c, run_id, since=since, rank=rank, regex=regex, stream=stream, limit=limit)
            ),
        )

    @app.get("/v1/runs/{run_id}/events", response_model=EventsPage, tags=["reads"])
    async def read_events(
        run_id: RunId,
        request: Request,
        since: Annotated[int, Query(ge=0, le=2**62)] = 0,
        kind: Annotated[str | None, Query(max_length=64)] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 1000,
    ) -> Response:
        authz.read(request)
        check_run(run_id)
        return _json(
            await reader(request, lambda c: queries.events(c, run_id, since=since, kind=kind, limit=limit))
        )

    # ------------------------------------------------------------------ streams

    sse_responses: dict[int | str, dict[str, Any]] = {
        200: {"content": {"text/event-stream": {"schema": {"type": "string"}}}, "description": "SSE stream"}
    }

    @app.get(
        "/v1/runs/{run_id}/stream",
        tags=["streams"],
        response_class=StreamingResponse,
        responses=sse_responses,
    )
    async def stream_run(
        run_id: RunId,
        request: Request,
        metrics_since: Annotated[int | None, Query(ge=0, le=2**62)] = None,
        logs_since: Annotated[int | None, Query(ge=0, le=2**62)] = None,
        events_since: Annotated[int | None, Query(ge=0, le=2**62)] = None,
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
    ) -> StreamingResponse:
        """Live stream of one run: ``run``, ``rank``, ``metrics``, ``logs``, ``events``, ``run_deleted``.

        With ``*_since`` cursors the stream first replays what was stored after them, so a client
        that read a page and then subscribes misses nothing. With ``coalesce`` metrics come as
        ``metrics_summary`` events (``MetricsSummary``), the replay included: a live view that only
        draws min/max/last per update costs the server one summary per interval, not every point.
        """
        authz.read(request)
        check_run(run_id)
        sub = hub.subscribe(run_id, coalesce, tuple(name or ()))
        try:
            backlog, cursors = await asyncio.to_thread(
                _backlog,
                store,
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
            follow(hub, sub, backlog, cursors), media_type="text/event-stream", headers=_SSE_HEADERS
        )

    @app.get("/v1/stream", tags=["streams"], response_class=StreamingResponse, responses=sse_responses)
    async def stream_runs(request: Request) -> StreamingResponse:
        """Live stream of the run list: ``run`` (created or changed) and ``run_deleted`` events."""
        authz.read(request)
        sub = hub.subscribe(None)
        hello = sse("hello", {"subscribers": hub.subscribers})
        return StreamingResponse(
            follow(hub, sub, [hello], {}), media_type="text/event-stream", headers=_SSE_HEADERS
        )

    def custom_openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(
            title=app.title, version=app.version, description=app.description, routes=app.routes
        )
        components = schema.setdefault("components", {})
        schemas = components.setdefault("schemas", {})
        for model in (MetricBatch, LogBatch, EventBatch, MetricsSummary):
            doc = model.model_json_schema(ref_template="#/components/schemas/{model}")
            for name, sub_schema in doc.pop("$defs", {}).items():
                schemas.setdefault(name, sub_schema)
            schemas[model.__name__] = doc
        components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        app.openapi_schema = schema
        return schema

    app.openapi = custom_openapi  # type: ignore[method-assign]
    return IngestFastPath(app, ingestor)


_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


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


__all__ = ["create_app", "encode_change"]
