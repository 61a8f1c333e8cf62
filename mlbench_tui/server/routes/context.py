"""What the route modules share: the server's parts (``Api``) and the helpers every route uses."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

import orjson
from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel

from mlbench_tui.errors import NotFound
from mlbench_tui.server.auth import AuthConfig, Authorizer, bearer
from mlbench_tui.server.ingest import Ingestor, check_length, read_body
from mlbench_tui.server.reads import ReadGate
from mlbench_tui.server.spools import SpoolImporter
from mlbench_tui.server.stream import Hub
from mlbench_tui.store.api_models import MAX_PAGE, BatchAck
from mlbench_tui.store.changes import Change
from mlbench_tui.store.store import Store

RunId = Annotated[str, Path(min_length=1, max_length=64, description="Run id, e.g. r-0123456789ab.")]
Cursor = Annotated[int, Query(ge=0, le=2**62)]
"""A read's cursor: rows after this store id (a page's ``next``)."""
OptionalCursor = Annotated[int | None, Query(ge=0, le=2**62)]
PageLimit = Annotated[int, Query(ge=1, le=MAX_PAGE)]
T = TypeVar("T")


@dataclass(frozen=True)
class Api:
    """The parts a route needs: the store, its readers and writer, tokens, live streams."""

    store: Store
    auth: AuthConfig
    authz: Authorizer
    ingestor: Ingestor
    reads: ReadGate
    hub: Hub
    spools: SpoolImporter

    async def write(self, fn: Callable[[Any], tuple[Any, list[Change]]]) -> Any:
        """Run a store operation (``Store.op_*``) in the writer; its result after commit."""
        return await self.store.require_writer().call_async(fn)

    async def read(self, request: Request, fn: Callable[[Any], T]) -> T:
        """Run a read function (see ``queries``) in the read gate, for as long as ``request`` waits."""
        return await self.reads.run(request, fn)

    def check_run(self, run_id: str) -> None:
        """404 for a run the writer does not know, without a query."""
        if self.store.writer is not None and not self.store.writer.has_run(run_id):
            raise NotFound(f"run {run_id} not found")

    async def ingest(self, request: Request, run_id: str, kind: str) -> Response:
        """An ingest route served by FastAPI (the fast path serves these before FastAPI sees them)."""
        check_length(request.headers.get("content-length"))
        body = await read_body(request.receive)
        return Response(
            await self.ingestor.handle(run_id, kind, bearer(request), body), media_type="application/json"
        )


def json_response(model: BaseModel | list[Any], status: int = 200) -> Response:
    """A model (or a list of them) as JSON, serialised by pydantic-core without a detour."""
    if isinstance(model, list):
        body = orjson.dumps([m.model_dump(mode="json") for m in model])
    else:
        body = model.__pydantic_serializer__.to_json(model)
    return Response(body, status_code=status, media_type="application/json")


def add_ingest_route(routes: APIRouter, api: Api, kind: str, model: type[BaseModel], doc: str = "") -> None:
    """Declare ``POST {prefix}/{kind}:batch`` on ``routes``: the FastAPI twin of the fast path's
    route, with ``model`` as its documented body (the route reads the body itself)."""

    async def batch(run_id: RunId, request: Request) -> Response:
        return await api.ingest(request, run_id, kind)

    batch.__doc__ = doc or None
    body = {"application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}}
    routes.post(
        f"/{kind}:batch",
        response_model=BatchAck,
        tags=["ingest"],
        name=f"{kind}_batch",
        openapi_extra={"requestBody": {"required": True, "content": body}, "security": [{"bearer": []}]},
    )(batch)
