"""The ingest hot path: ``POST /v1/runs/{id}/{metrics,logs,events}:batch``.

``Ingestor`` turns one request (token, body) into positional rows for the store's writer and
returns the acknowledgement after commit. ``IngestFastPath`` is the outermost ASGI layer: it
serves exactly these three routes without FastAPI's routing, dependency and middleware machinery;
everything else goes on to FastAPI, whose routes of the same paths stay for the OpenAPI document
and behave identically (same ``Ingestor``, same body reader, same error map).

Metric batches, the bulk of the traffic, are decoded by msgspec, cheaper than pydantic: its
struct is derived from the wire contract's one declaration of ``MetricBatch`` (``mlbench_worker.wire``,
``store.wire_models``), as is the API's pydantic model. msgspec is stricter than pydantic (no lax
coercions such as ``"step": 1.0``); whatever it refuses is parsed again by pydantic, which then
accepts it or produces the usual 422 reasons, so the API answers exactly as the wire model says.
A metric name's pattern (no control characters) is checked once per new name, not per metric.
"""

from __future__ import annotations

import re
import time
from typing import Any

import msgspec
from mlbench_worker import wire
from pydantic import BaseModel, ValidationError
from starlette.types import ASGIApp, Receive, Scope, Send

from mlbench_tui.errors import NotFound
from mlbench_tui.server.auth import Access, Authorizer
from mlbench_tui.server.errors import ApiError, answer, clean_errors
from mlbench_tui.store.api_models import (
    MAX_BODY_BYTES,
    MAX_PAYLOAD_BYTES,
    EventBatch,
    LogBatch,
    MetricBatch,
)
from mlbench_tui.store.series import SeriesCatalog
from mlbench_tui.store.store import Store, dumps_json
from mlbench_tui.store.wire_models import msgspec_struct
from mlbench_tui.store.writer import Writer

MODELS: dict[str, type[BaseModel]] = {"metrics": MetricBatch, "logs": LogBatch, "events": EventBatch}
_PREFIX = "/v1/runs/"
_SUFFIXES = {"metrics:batch": "metrics", "logs:batch": "logs", "events:batch": "events"}


_FAST_METRICS = msgspec.json.Decoder(msgspec_struct(wire.MetricBatch, skip_patterns=frozenset({"name"})))
_CONTROL = re.compile(r"[\x00-\x1f]")  # wire.MetricName allows none


def fast_metric_batch(body: bytes) -> Any | None:
    """The batch decoded by msgspec, or None where pydantic must decide."""
    try:
        return _FAST_METRICS.decode(body)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None


def fast_metric_parts(rank: int, seq: int, session: str, items: bytes) -> Any | None:
    """``fast_metric_batch`` for a batch whose rank, seq and session were decoded already and whose
    metrics are still JSON (a spool line): the items are spliced into one body, not re-encoded,
    and the whole batch is checked by the one decoder."""
    head = b'{"rank":%d,"seq":%d,"session":%s,"metrics":' % (rank, seq, msgspec.json.encode(session))
    return fast_metric_batch(head + items + b"}")


def valid_name(name: str) -> bool:
    """``wire.MetricName``'s pattern (msgspec already checked the length)."""
    return _CONTROL.search(name) is None


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
        access = self.authz.write_run_token(token, run_id)
        if access is None:
            raise NotFound(f"run {run_id} not found")
        writer = self.store.require_writer()
        by_run = access is Access.RUN
        if kind == "metrics":
            rank, session, seq, params = self._metric_params(writer, run_id, body)
            accepted, duplicate = await writer.ingest_metrics_async(
                run_id, rank, session, seq, params, by_run
            )
            return b'{"accepted":%d,"duplicate":%s}' % (accepted, b"true" if duplicate else b"false")
        batch: Any = validated(kind, body)
        now = time.time()
        rank = batch.rank
        rows = log_rows(run_id, batch, now) if kind == "logs" else event_rows(run_id, batch, now)
        accepted, duplicate = await writer.ingest_async(
            kind, run_id, rank, batch.session, batch.seq, rows, by_run
        )
        return b'{"accepted":%d,"duplicate":%s}' % (accepted, b"true" if duplicate else b"false")

    def _metric_params(self, writer: Writer, run_id: str, body: bytes) -> tuple[int, str, int, list[Any]]:
        """(rank, session, seq, ``MetricChunk.params``) of a metric batch; ApiError 422 when invalid."""
        batch: Any = validated("metrics", body)
        params = metric_params(writer.series, run_id, batch, time.time(), body)
        return batch.rank, batch.session, batch.seq, params


def metric_params(
    catalog: SeriesCatalog, run_id: str, batch: Any, now: float, body: bytes | None = None
) -> list[Any]:
    """``MetricChunk.params`` of a decoded metric batch (either decoder's); ApiError 422 for a name
    the wire model refuses (with pydantic's reasons when the request ``body`` is given).

    A name the store's series catalog knows needs no check, so a steady stream of batches
    costs one dict lookup per metric beyond decoding; a new name is checked once.
    """
    ids = catalog.ids(run_id)
    rank = batch.rank
    params: list[Any] = []
    add = params.extend
    for m in batch.metrics:
        name = m.name
        sid = ids.get(name)
        if sid is None:
            if not valid_name(name):
                if body is not None:
                    _validate(MetricBatch, body)  # raises with pydantic's reasons
                raise ApiError(422, "invalid_request", f"invalid metric name {name!r}")
            sid = catalog.id(run_id, name)
            ids = catalog.ids(run_id)
        t = m.t
        add((sid, rank, m.step, m.epoch, now if t is None else t, m.value))
    return params


def log_rows(run_id: str, batch: Any, now: float) -> list[tuple[Any, ...]]:
    """The ``logs`` rows (without id) of a validated log batch; lines without a time get ``now``."""
    rank = batch.rank
    return [(run_id, rank, ln.stream, ln.seq, now if ln.t is None else ln.t, ln.text) for ln in batch.lines]


def event_rows(run_id: str, batch: Any, now: float) -> list[tuple[Any, ...]]:
    """The ``events`` rows (without id) of a validated event batch (payloads as JSON text)."""
    rank = batch.rank
    return [(run_id, rank, e.kind, _payload(e.payload), now if e.t is None else e.t) for e in batch.events]


def validated(kind: str, body: bytes) -> Any:
    """The batch in ``body`` (a ``metrics:batch``, ``logs:batch`` or ``events:batch`` request
    body) as the API accepts it; ApiError 422 with pydantic's reasons otherwise."""
    if kind == "metrics":
        fast = fast_metric_batch(body)
        return fast if fast is not None else _validate(MetricBatch, body)
    return _validate(MODELS[kind], body)


def _validate(model: type[BaseModel], body: bytes) -> Any:
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        raise ApiError(422, "invalid_request", clean_errors(exc.errors(include_url=False))) from None


class IngestFastPath:
    """ASGI middleware answering the three ingest routes directly; everything else goes on to ``app``."""

    def __init__(self, app: ASGIApp, ingestor: Ingestor) -> None:
        self.app = app
        self.ingestor = ingestor

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            path: str = scope["path"]
            if path.startswith(_PREFIX) and path.endswith(":batch"):
                run_id, _, suffix = path[len(_PREFIX) :].partition("/")
                kind = _SUFFIXES.get(suffix)
                if kind is not None and run_id and "/" not in run_id and len(run_id) <= 64:
                    await self._serve(kind, run_id, scope, receive, send)
                    return
        await self.app(scope, receive, send)

    async def _serve(self, kind: str, run_id: str, scope: Scope, receive: Receive, send: Send) -> None:
        token: str | None = None
        length: bytes | None = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                scheme, _, rest = value.decode("latin-1").partition(" ")
                token = rest.strip() if scheme.lower() == "bearer" and rest.strip() else None
            elif name == b"content-length":
                length = value
        headers = [(b"content-type", b"application/json")]
        try:
            check_length(length)
            body = await read_body(receive)
            status, content = 200, await self.ingestor.handle(run_id, kind, token, body)
            headers.append((b"content-length", str(len(content)).encode()))
        except Exception as exc:
            status, content, headers = answer(exc)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": content})


def check_length(value: bytes | str | None) -> None:
    """Refuse a request whose ``Content-Length`` is invalid (400) or over ``MAX_BODY_BYTES`` (413)."""
    if value is None:
        return
    try:
        length = int(value)
    except ValueError:
        length = -1
    if length < 0:
        raise ApiError(400, "bad_request", "invalid Content-Length")
    if length > MAX_BODY_BYTES:
        raise ApiError(413, "body_too_large", f"body over {MAX_BODY_BYTES} bytes")


async def read_body(receive: Receive) -> bytes:
    """The request body, refused (413) as soon as it passes ``MAX_BODY_BYTES``."""
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
