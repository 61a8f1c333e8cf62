"""The ingest hot path: ``POST /v1/runs/{id}/{metrics,logs,events}:batch``.

``Ingestor`` turns one request (token, body) into positional rows for the store's writer and
returns the acknowledgement after commit. ``IngestFastPath`` is a thin ASGI layer in front of
FastAPI that serves exactly these three routes without FastAPI's routing, dependency and
middleware machinery (a few hundred microseconds per request on a small machine); the FastAPI
routes of the same paths stay for the OpenAPI document and behave identically (same ``Ingestor``).
"""

from __future__ import annotations

import time
from typing import Any

import orjson
from pydantic import BaseModel, ValidationError

from mlbench_tui.errors import StoreError, UsageError
from mlbench_tui.server.auth import AuthError, Authorizer
from mlbench_tui.store.api_models import MAX_BODY_BYTES, MAX_PAYLOAD_BYTES, EventBatch, LogBatch, MetricBatch
from mlbench_tui.store.db import NotFound
from mlbench_tui.store.store import Store, dumps_json

MODELS: dict[str, type[BaseModel]] = {"metrics": MetricBatch, "logs": LogBatch, "events": EventBatch}
_PREFIX = "/v1/runs/"
_SUFFIXES = {"metrics:batch": "metrics", "logs:batch": "logs", "events:batch": "events"}


class ApiError(Exception):
    """A request the API refuses: HTTP status, machine-readable reason, detail for humans."""

    def __init__(self, status: int, reason: str, detail: Any = None) -> None:
        super().__init__(reason)
        self.status, self.reason, self.detail = status, reason, detail


def clean_errors(errors: Any) -> list[dict[str, Any]]:
    """Validation errors as JSON-safe dicts (inputs can hold NaN or bytes)."""
    out = []
    for err in errors:
        item = {k: v for k, v in dict(err).items() if k in ("type", "loc", "msg")}
        item["loc"] = [str(part) for part in item.get("loc", ())]
        out.append(item)
    return out


def error_parts(exc: BaseException) -> tuple[int, str, Any] | None:
    """(status, reason, detail) of the exceptions the API turns into answers; None for bugs."""
    if isinstance(exc, ApiError):
        return exc.status, exc.reason, exc.detail
    if isinstance(exc, AuthError):
        return exc.status, exc.reason, exc.message
    if isinstance(exc, NotFound):
        return 404, "not_found", exc.message
    if isinstance(exc, UsageError):
        return 422, "invalid_request", exc.message
    if isinstance(exc, StoreError):
        return 503, "store_error", exc.message
    return None


def _payload(payload: dict[str, Any]) -> str:
    text = dumps_json(payload)
    if len(text) > MAX_PAYLOAD_BYTES:
        raise ApiError(422, "invalid_request", f"event payload over {MAX_PAYLOAD_BYTES} bytes")
    return text


class Ingestor:
    """Validates and stores one ingest batch; shared by the fast path and the FastAPI routes."""

    def __init__(self, store: Store, authz: Authorizer) -> None:
        self.store = store
        self.authz = authz

    async def handle(self, run_id: str, kind: str, token: str | None, body: bytes) -> bytes:
        """Store the batch in ``body``; returns the JSON acknowledgement (after commit)."""
        if self.authz.write_run_token(token, run_id) is None:
            raise NotFound(f"run {run_id} not found")
        try:
            batch: Any = MODELS[kind].model_validate_json(body)
        except ValidationError as exc:
            raise ApiError(422, "invalid_request", clean_errors(exc.errors(include_url=False))) from None
        now = time.time()
        rank = batch.rank
        rows: list[tuple[Any, ...]]
        if kind == "metrics":
            rows = [
                (run_id, rank, m.name, m.step, m.epoch, now if m.t is None else m.t, m.value)
                for m in batch.metrics
            ]
        elif kind == "logs":
            rows = [
                (run_id, rank, ln.stream, ln.seq, now if ln.t is None else ln.t, ln.text)
                for ln in batch.lines
            ]
        else:
            rows = [
                (run_id, rank, e.kind, _payload(e.payload), now if e.t is None else e.t) for e in batch.events
            ]
        writer = self.store.writer
        if writer is None:
            raise StoreError("store is read-only")
        accepted, duplicate = await writer.ingest_async(kind, run_id, rank, batch.session, batch.seq, rows)
        return b'{"accepted":%d,"duplicate":%s}' % (accepted, b"true" if duplicate else b"false")


class IngestFastPath:
    """ASGI middleware answering the three ingest routes directly; everything else goes on to ``app``."""

    def __init__(self, app: Any, ingestor: Ingestor) -> None:
        self.app = app
        self.ingestor = ingestor

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            path: str = scope["path"]
            if path.startswith(_PREFIX) and path.endswith(":batch"):
                run_id, _, suffix = path[len(_PREFIX) :].partition("/")
                kind = _SUFFIXES.get(suffix)
                if kind is not None and run_id and "/" not in run_id and len(run_id) <= 64:
                    await self._serve(kind, run_id, scope, receive, send)
                    return
        await self.app(scope, receive, send)

    async def _serve(self, kind: str, run_id: str, scope: dict[str, Any], receive: Any, send: Any) -> None:
        token: str | None = None
        length: int | None = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                scheme, _, rest = value.decode("latin-1").partition(" ")
                token = rest.strip() if scheme.lower() == "bearer" and rest.strip() else None
            elif name == b"content-length":
                try:
                    length = int(value)
                except ValueError:
                    length = -1
        try:
            if length is not None and (length < 0 or length > MAX_BODY_BYTES):
                if length < 0:
                    raise ApiError(400, "bad_request", "invalid Content-Length")
                raise ApiError(413, "body_too_large", f"body over {MAX_BODY_BYTES} bytes")
            body = await _read_body(receive)
            status, content = 200, await self.ingestor.handle(run_id, kind, token, body)
        except Exception as exc:
            parts = error_parts(exc)
            if parts is None:
                raise
            status, reason, detail = parts
            content = orjson.dumps({"error": reason, "detail": detail})
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(content)).encode())]
        if status == 401:
            headers.append((b"www-authenticate", b"Bearer"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": content})


async def _read_body(receive: Any) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ApiError(400, "bad_request", "client disconnected")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise ApiError(413, "body_too_large", f"body over {MAX_BODY_BYTES} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)
