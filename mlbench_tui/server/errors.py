"""The API's error answers: one map from exceptions to ``(status, reason, detail)``, one JSON shape.

Both the FastAPI routes (``install``) and the ingest fast path (``answer``) refuse with this map,
so every refusal is ``{"error": reason, "detail": ...}`` (``ErrorBody``), a 401 also carries
``WWW-Authenticate: Bearer``, and an unexpected exception is a logged 500 of the same shape.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from mlbench_tui.errors import Conflict, NotFound, StoreError, UsageError
from mlbench_tui.locks import LockHeld
from mlbench_tui.server.auth import AuthError
from mlbench_tui.server.reads import ReadAborted
from mlbench_tui.store.engine import StoreFull, StoreLocked, StoreReadOnly

log = logging.getLogger("mlbench.server")


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


def error_parts(exc: BaseException) -> tuple[int, str, Any]:
    """``(status, reason, detail)`` of the answer to ``exc``; 500 for anything unexpected."""
    if isinstance(exc, ApiError):
        return exc.status, exc.reason, exc.detail
    if isinstance(exc, AuthError):
        return exc.status, exc.reason, exc.message
    if isinstance(exc, NotFound):
        return 404, "not_found", exc.message
    if isinstance(exc, UsageError):
        return 422, "invalid_request", exc.message
    if isinstance(exc, Conflict):
        return exc.status, exc.reason, exc.message
    if isinstance(exc, ReadAborted):
        return 503, exc.reason, exc.message
    if isinstance(exc, StoreError | LockHeld):
        return _store_answer(exc)
    if isinstance(exc, RequestValidationError):
        return 422, "invalid_request", clean_errors(exc.errors())
    if isinstance(exc, StarletteHTTPException):
        reason = {400: "invalid_body", 404: "not_found", 405: "method_not_allowed"}.get(
            exc.status_code, "http_error"
        )
        return exc.status_code, reason, exc.detail
    return 500, "internal_error", "internal server error (see the server log)"


def _store_answer(exc: StoreError | LockHeld) -> tuple[int, str, Any]:
    """A store that cannot do this now: full (507), read-only, locked or failing (503); the
    detail says what to do."""
    text = f"{exc.message} (hint: {exc.hint})" if exc.hint else exc.message
    if isinstance(exc, StoreFull):
        return 507, "disk_full", text
    if isinstance(exc, StoreReadOnly):
        return 503, "store_read_only", text
    if isinstance(exc, StoreLocked | LockHeld):
        return 503, "store_locked", text
    return 503, "store_error", text


def answer(exc: BaseException) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
    """Status, JSON body and headers of the answer to ``exc`` (logged when it is a 500)."""
    status, reason, detail = error_parts(exc)
    if status == 500:
        log.error("unhandled error", exc_info=exc)
    body = orjson.dumps({"error": reason, "detail": detail})
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    return status, body, headers


async def _respond(_request: Request, exc: Exception) -> Response:
    status, body, headers = answer(exc)
    return Response(body, status_code=status, headers={k.decode(): v.decode() for k, v in headers})


HANDLED = (
    ApiError,
    AuthError,
    Conflict,
    NotFound,
    StoreError,
    UsageError,
    RequestValidationError,
    StarletteHTTPException,
    Exception,
)


def install(app: FastAPI) -> None:
    """Answer every exception a route raises through the map."""
    for cls in HANDLED:
        app.add_exception_handler(cls, _respond)
