"""The HTTP API (``/v1``): the ASGI app over a store, assembled from the route modules.

Ingest routes are the hot path (``ingest.py``): they read the body once, validate it against the
wire models, hand positional rows to the store's writer and answer only after the group
transaction committed. Everything else is ordinary FastAPI, one router per resource
(``routes/``). Every rejection, on either path, is answered through one error map
(``errors.py``): a 4xx with a JSON body ``{"error": reason, "detail": ...}``; tokens never appear
in answers or logs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.responses import Response
from pydantic import BaseModel
from starlette.types import ASGIApp

from mlbench_tui import __version__
from mlbench_tui.server import errors, stream_events
from mlbench_tui.server.auth import AuthConfig, Authorizer
from mlbench_tui.server.hosts import HostCheck, HostPolicy
from mlbench_tui.server.ingest import IngestFastPath, Ingestor
from mlbench_tui.server.reads import ReadGate
from mlbench_tui.server.routes import events, logs, metrics, runs, streams
from mlbench_tui.server.routes.context import Api, json_response
from mlbench_tui.server.spools import SpoolImporter
from mlbench_tui.server.stream import Hub
from mlbench_tui.store import queries
from mlbench_tui.store.api_models import ErrorBody, EventBatch, Health, LogBatch, MetricBatch
from mlbench_tui.store.store import Store

_BAD_BODY = {
    "description": "The body could not be read as JSON (bytes that are not UTF-8, for one).",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
}
_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "Missing or invalid token."},
    403: {"model": ErrorBody, "description": "Token not allowed to do this."},
    404: {"model": ErrorBody, "description": "Unknown run."},
    413: {"model": ErrorBody, "description": "Body too large."},
    421: {"model": ErrorBody, "description": "The Host header names another server (wrong_host)."},
    422: {"model": ErrorBody, "description": "Invalid request."},
    503: {
        "model": ErrorBody,
        "description": "The store cannot answer now: read-only, locked by another program, or failing.",
    },
}
_WRITE_ERRORS: dict[str, dict[str, Any]] = {  # every operation that writes (POST, PUT, PATCH, DELETE)
    "409": {
        "description": "The run's record does not take this write: it ended (run_ended), the rank "
        "reported its stop (rank_stopped), or a run of that name is under way elsewhere (run_under_way).",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
    },
    "507": {
        "description": "The disk holding the store is full (disk_full); nothing stored is lost.",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
    },
}


def create_app(
    store: Store,
    auth: AuthConfig,
    hosts: HostPolicy | None = None,
    spools: SpoolImporter | None = None,
) -> ASGIApp:
    """The ASGI app over ``store``; the caller owns the store's lifetime.

    The outermost layer is ``HostCheck`` (with a ``hosts`` policy: requests naming another host
    are answered 421), then ``IngestFastPath``, which answers the three ingest routes itself and
    hands everything else (and the lifespan) to the FastAPI app.
    """
    hub = Hub(
        lambda run_id, after, names: store.read(lambda c: queries.metric_summary(c, run_id, after, names))
    )
    authz = Authorizer(auth, store)
    importer = spools or SpoolImporter(store)
    api = Api(store, auth, authz, Ingestor(store, authz), ReadGate(store.engine), hub, importer)
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
            api.reads.close()

    app = FastAPI(
        title="mlbench-tui metrics API",
        version=__version__,
        description="Runs, batched metric/log/event ingest from workers, cursor reads and live streams.",
        lifespan=lifespan,
        responses=_ERRORS,
    )
    errors.install(app)

    @app.get("/healthz", response_model=Health, tags=["server"])
    def healthz() -> Response:
        health = Health(
            version=__version__, store=str(store.path), pid=os.getpid(), open_reads=auth.open_reads
        )
        return json_response(health)

    for module in (runs, metrics, logs, events, streams):
        app.include_router(module.router(api))

    def openapi() -> dict[str, Any]:
        """The OpenAPI document, with the ingest bodies' schemas the routes read themselves."""
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(
            title=app.title, version=app.version, description=app.description, routes=app.routes
        )
        components = schema.setdefault("components", {})
        schemas = components.setdefault("schemas", {})
        documented: list[type[BaseModel]] = [MetricBatch, LogBatch, EventBatch, *stream_events.models()]
        for model in documented:
            doc = model.model_json_schema(ref_template="#/components/schemas/{model}", mode="serialization")
            for name, sub_schema in doc.pop("$defs", {}).items():
                schemas.setdefault(name, sub_schema)
            schemas.setdefault(model.__name__, doc)
        for path, operations in schema.get("paths", {}).items():
            for method, operation in operations.items():
                responses = operation.setdefault("responses", {})
                if "requestBody" in operation and not path.endswith(":batch"):  # FastAPI parses these
                    responses.setdefault("400", _BAD_BODY)
                if method in ("post", "put", "patch", "delete"):
                    for status, answer in _WRITE_ERRORS.items():
                        responses.setdefault(status, answer)
        components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
    served = IngestFastPath(app, api.ingestor)
    return served if hosts is None else HostCheck(served, hosts)
