"""``MlbenchClient``: the typed HTTP client the CLI, the executors and the TUI use.

Synchronous (httpx) and thread-safe, so the Textual TUI calls it from thread workers. Answers
are the wire models of ``mlbench_tui.store.api_models``; failures raise ``ServerError`` with a
message fit for the user (connection refused, bad token, invalid request), and ``NotFound`` for
an unknown run, as the store itself does.

Every read needs a token. A client made without one takes the read token this user's server
records hold for its URL (``records.credentials_for``), so callers never handle it. A client made
with ``reattach`` survives its server going away: a request that could not reach the server asks
``reattach`` for the store's server now (found, or started again) and is sent there once more.
"""

from __future__ import annotations

import itertools
import secrets
import threading
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx
import orjson
from mlbench_worker.wire import LogIn
from mlbench_worker.wire_types import to_json
from pydantic import BaseModel, TypeAdapter

from mlbench_tui.errors import NotFound, ServerError
from mlbench_tui.store.api_models import (
    BatchAck,
    EventsPage,
    Health,
    LogsPage,
    MetricBands,
    MetricName,
    MetricsPage,
    RankInfo,
    RanksLatest,
    RankUpdate,
    RunCreate,
    RunCreated,
    RunDetail,
    RunInfo,
    RunUpdate,
    Stream,
)

M = TypeVar("M", bound=BaseModel)

_RUN_LIST = TypeAdapter(list[RunInfo])
_NAMES = TypeAdapter(list[MetricName])
_RANKS = TypeAdapter(list[RankInfo])


class ServerTimeout(ServerError):
    """The server did not answer within the client's timeout (it is up, but slow or busy)."""

    timed_out = True


class ServerUnreachable(ServerError):
    """No server answers at the client's address (never started, or stopped since)."""

    def __init__(
        self, message: str, *, hint: str | None = None, cause: httpx.HTTPError | None = None
    ) -> None:
        super().__init__(message, hint=hint)
        self.cause = cause


class ServerHTTPError(ServerError):
    """The server answered with an error status; ``status`` and ``reason`` say which."""

    def __init__(self, status: int, reason: str, message: str, *, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class StreamEvent:
    """One Server-Sent Event: ``kind`` (run, rank, metrics, logs, events, run_deleted, resync, hello)."""

    kind: str
    data: Any
    id: str | None = None


@dataclass(frozen=True)
class Attachment:
    """Where a client's server is now: its URL and the token to use there."""

    url: str
    token: str | None = field(repr=False, default=None)


def needs_tls(url: str) -> bool:
    """Whether ``url`` is served over TLS. Only then does an httpx client need its certificate
    store loaded (``verify``): loading it costs tens of ms per client, and a plain-http client
    (the default server on 127.0.0.1) never uses it; redirects are not followed."""
    return url.lower().startswith("https:")


class MlbenchClient:
    """Client of one server with one bearer token (admin, read, or a run's write token)."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        reattach: Callable[[], Attachment] | None = None,
    ) -> None:
        self._timeout = timeout
        self._reattach = reattach
        self._attach_lock = threading.Lock()
        self._session = secrets.token_hex(6)
        self._seq = itertools.count()
        self._connect(url, token if token else _recorded_token(url))

    def _connect(self, url: str, token: str | None) -> None:
        self.url = url.rstrip("/")
        self.token = token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(
            base_url=self.url, headers=headers, timeout=self._timeout, verify=needs_tls(self.url)
        )

    def reattached(self) -> bool:
        """Find the server again (``reattach``); True when it now lives elsewhere or anew."""
        if self._reattach is None:
            return False
        with self._attach_lock:
            found = self._reattach()
            if (found.url.rstrip("/"), found.token) == (self.url, self.token):
                return True  # the same server (it came back on its port) or one that answers again
            old = self._http
            self._connect(found.url, found.token)
        old.close()
        return True

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> MlbenchClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- plumbing

    def _request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        token: str | None = None,
        timeout: float | None = None,
    ) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else None
        limit = self._timeout if timeout is None else timeout
        content = None if json is None else orjson.dumps(json)
        if content is not None:
            headers = {**(headers or {}), "Content-Type": "application/json"}
        clean = {k: v for k, v in (params or {}).items() if v is not None}
        try:
            resp = self._send(method, path, content, clean, headers, limit)
        except ServerUnreachable as exc:
            if self._reattach is None or not _resendable(method, path, exc.cause):
                raise
            self.reattached()  # the store's server now (it came back, or another was started)
            resp = self._send(method, path, content, clean, headers, limit)
        if resp.status_code >= 400:
            raise _error(resp)
        return resp

    def _send(
        self,
        method: str,
        path: str,
        content: bytes | None,
        params: Mapping[str, Any],
        headers: dict[str, str] | None,
        limit: float,
    ) -> httpx.Response:
        """One request; transport failures as ``ServerTimeout`` / ``ServerUnreachable``."""
        try:
            return self._http.request(
                method, path, content=content, params=params, headers=headers, timeout=limit
            )
        except httpx.TimeoutException as exc:
            raise ServerTimeout(
                f"mlbench server at {self.url} did not answer within {limit:g} s ({exc})"
            ) from None
        except httpx.HTTPError as exc:
            raise ServerUnreachable(
                f"cannot reach mlbench server at {self.url}: {exc}",
                hint="start one with 'mlbench server', or check MLBENCH_SERVER_URL",
                cause=exc,
            ) from None

    @staticmethod
    def _model(resp: httpx.Response, model: type[M]) -> M:
        return model.model_validate_json(resp.content)

    # ---- server

    def health(self) -> Health:
        return self._model(self._request("GET", "/healthz"), Health)

    # ---- runs

    def create_run(self, req: RunCreate | Any, spec_text: str = "") -> RunCreated:
        """Register a run (a ``RunCreate`` or a ``RunPlan``); the answer holds its write token."""
        body = req if isinstance(req, RunCreate) else RunCreate.from_plan(req, spec_text)
        return self._model(self._request("POST", "/v1/runs", json=body.model_dump(mode="json")), RunCreated)

    def update_run(self, run_id: str, update: RunUpdate | None = None, **fields: Any) -> RunDetail:
        """PATCH a run: pass a ``RunUpdate`` or keyword fields (state=..., handle=..., result=...)."""
        body = update if update is not None else RunUpdate(**fields)
        payload = body.model_dump(mode="json", exclude_unset=True)
        return self._model(self._request("PATCH", f"/v1/runs/{run_id}", json=payload), RunDetail)

    def get_run(self, run_id: str) -> RunDetail:
        return self._model(self._request("GET", f"/v1/runs/{run_id}"), RunDetail)

    def list_runs(
        self, *, state: str | None = None, spec_name: str | None = None, limit: int = 500
    ) -> list[RunInfo]:
        resp = self._request(
            "GET", "/v1/runs", params={"state": state, "spec_name": spec_name, "limit": limit}
        )
        return _RUN_LIST.validate_json(resp.content)

    def recompute_result(self, run_id: str) -> RunDetail:
        """Have the server recompute a finished run's result with its version's rules."""
        return self._model(self._request("POST", f"/v1/runs/{run_id}/result:recompute"), RunDetail)

    def delete_run(self, run_id: str) -> None:
        self._request("DELETE", f"/v1/runs/{run_id}")

    def update_rank(
        self,
        run_id: str,
        rank: int,
        update: RankUpdate | None = None,
        *,
        token: str | None = None,
        **fields: Any,
    ) -> RankInfo:
        body = update if update is not None else RankUpdate(**fields)
        payload = body.model_dump(mode="json", exclude_unset=True)
        return self._model(
            self._request("PUT", f"/v1/runs/{run_id}/ranks/{rank}", json=payload, token=token), RankInfo
        )

    def update_ranks(
        self, run_id: str, updates: Sequence[tuple[int, RankUpdate]], *, token: str | None = None
    ) -> list[RankInfo]:
        """Set the states of many ranks in one request."""
        items = [
            {"rank": rank, **update.model_dump(mode="json", exclude_unset=True)} for rank, update in updates
        ]
        resp = self._request("PUT", f"/v1/runs/{run_id}/ranks", json={"ranks": items}, token=token)
        return _RANKS.validate_json(resp.content)

    # ---- ingest (a run's write token, or the admin token)

    def _batch(
        self,
        run_id: str,
        kind: str,
        key: str,
        items: list[dict[str, Any]],
        rank: int,
        seq: int | None,
        token: str | None,
    ) -> BatchAck:
        body = {
            "rank": rank,
            "seq": next(self._seq) if seq is None else seq,
            "session": self._session,
            key: items,
        }
        return self._model(
            self._request("POST", f"/v1/runs/{run_id}/{kind}:batch", json=body, token=token), BatchAck
        )

    def post_metrics(
        self,
        run_id: str,
        metrics: Iterable[Mapping[str, Any]],
        *,
        rank: int = 0,
        seq: int | None = None,
        token: str | None = None,
    ) -> BatchAck:
        """Store metric dicts ``{name, value, step?, epoch?, t?}``; NaN/inf must be sent as None."""
        return self._batch(run_id, "metrics", "metrics", [dict(m) for m in metrics], rank, seq, token)

    def post_logs(
        self,
        run_id: str,
        lines: Iterable[str | LogIn],
        *,
        rank: int = 0,
        stream: Stream = "stdout",
        seq: int | None = None,
        token: str | None = None,
    ) -> BatchAck:
        """Store log lines of one rank: texts (in ``stream``) or whole ``LogIn`` lines."""
        typed = (LogIn(text=line, stream=stream) if isinstance(line, str) else line for line in lines)
        items = [to_json(line) for line in typed]
        return self._batch(run_id, "logs", "lines", items, rank, seq, token)

    def post_events(
        self,
        run_id: str,
        events: Iterable[Mapping[str, Any]],
        *,
        rank: int = 0,
        seq: int | None = None,
        token: str | None = None,
    ) -> BatchAck:
        """Store events ``{kind, payload, t?}``."""
        return self._batch(run_id, "events", "events", [dict(e) for e in events], rank, seq, token)

    # ---- reads

    def metrics(
        self,
        run_id: str,
        names: Sequence[str] | str | None = None,
        *,
        rank: int | None = None,
        since: int = 0,
        points: int | None = None,
        limit: int | None = None,
        timeout: float | None = None,
    ) -> MetricsPage:
        """Metric series since a cursor; ``points=N`` downsamples each to N buckets (min/max/last).
        ``timeout`` overrides the client's for this read (a big run's whole history takes longer)."""
        name_list = [names] if isinstance(names, str) else list(names or [])
        params: dict[str, Any] = {
            "name": name_list or None,
            "rank": rank,
            "since": since,
            "points": points,
            "limit": limit,
        }
        resp = self._request("GET", f"/v1/runs/{run_id}/metrics", params=params, timeout=timeout)
        return self._model(resp, MetricsPage)

    def latest(self, run_id: str, names: Sequence[str]) -> RanksLatest:
        """Every rank's latest point of each of ``names`` (one request whatever the rank count)."""
        resp = self._request("GET", f"/v1/runs/{run_id}/metrics/latest", params={"name": list(names)})
        return self._model(resp, RanksLatest)

    def bands(self, run_id: str, names: Sequence[str], *, points: int = 200) -> MetricBands:
        """p50, p90 and max of each of ``names`` across ranks, in at most ``points`` buckets."""
        params = {"name": list(names), "points": points}
        return self._model(
            self._request("GET", f"/v1/runs/{run_id}/metrics/bands", params=params), MetricBands
        )

    def metric_names(self, run_id: str) -> list[MetricName]:
        return _NAMES.validate_json(self._request("GET", f"/v1/runs/{run_id}/metrics/names").content)

    def logs(
        self,
        run_id: str,
        since: int = 0,
        *,
        rank: int | None = None,
        ranks: str | None = None,
        regex: str | None = None,
        stream: str | None = None,
        limit: int = 1000,
        tail: bool = False,
    ) -> LogsPage:
        """Log lines since a cursor: the first ``limit`` (the last with ``tail``) of one rank, a
        rank set (``ranks="0-7,512"``) or all, of one stream or all, matching ``regex``."""
        params = {
            "since": since,
            "rank": rank,
            "ranks": ranks,
            "regex": regex,
            "stream": stream,
            "limit": limit,
            "tail": "true" if tail else None,
        }
        return self._model(self._request("GET", f"/v1/runs/{run_id}/logs", params=params), LogsPage)

    def events(
        self, run_id: str, since: int = 0, *, kind: str | None = None, limit: int = 1000
    ) -> EventsPage:
        params = {"since": since, "kind": kind, "limit": limit}
        return self._model(self._request("GET", f"/v1/runs/{run_id}/events", params=params), EventsPage)

    def stream(
        self,
        run_id: str | None = None,
        *,
        metrics_since: int | None = None,
        logs_since: int | None = None,
        events_since: int | None = None,
        coalesce: float | None = None,
        names: Sequence[str] = (),
        keepalive: float | None = None,
    ) -> Generator[StreamEvent, None, None]:
        """Iterate Server-Sent Events of one run (or of the run list when ``run_id`` is None).

        Blocks between events; close the generator (or break) to disconnect. Run streams begin
        with a ``run`` event; with ``*_since`` cursors they replay what was stored after them.
        With ``coalesce`` (seconds) metrics come as one ``metrics_summary`` per interval, of
        ``names`` only when given. With ``keepalive`` (seconds, run streams) the server sends a
        keepalive that often when idle, yielded as a ``keepalive`` event: a reader on another
        thread than its owner looks at least that often whether it is still wanted.
        """
        path = "/v1/stream" if run_id is None else f"/v1/runs/{run_id}/stream"
        params: dict[str, float | None] = {
            "metrics_since": metrics_since,
            "logs_since": logs_since,
            "events_since": events_since,
            "coalesce": coalesce,
            "keepalive": keepalive,
        }
        clean: dict[str, Any] = {k: v for k, v in params.items() if v is not None}
        if names:
            clean["name"] = list(names)
        try:
            with self._http.stream("GET", path, params=clean, timeout=httpx.Timeout(10.0, read=None)) as resp:
                if resp.status_code >= 400:
                    resp.read()
                    raise _error(resp)
                yield from parse_sse(resp.iter_lines(), keepalives=keepalive is not None)
        except httpx.HTTPError as exc:
            raise ServerError(f"stream from {self.url} failed: {exc}") from None


KEEPALIVE = "keepalive"


def _resendable(method: str, path: str, exc: httpx.HTTPError | None) -> bool:
    """Whether a request that failed with ``exc`` may be sent again to a re-found server: one
    that never reached a server (connection refused), or one whose repetition changes nothing
    (reads, updates, ingest batches, deduplicated by their sequence number)."""
    if isinstance(exc, httpx.ConnectError):
        return True
    return method != "POST" or path.endswith(":batch")


def _recorded_token(url: str) -> str | None:
    from mlbench_tui.server.records import credentials_for

    return credentials_for(url)


def parse_sse(lines: Iterable[str], *, keepalives: bool = False) -> Iterator[StreamEvent]:
    """Server-Sent Events from the lines of a ``text/event-stream`` body (JSON ``data``);
    comment lines are skipped, or yielded as ``keepalive`` events with ``keepalives``."""
    kind: str = "message"
    event_id: str | None = None
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield StreamEvent(kind, orjson.loads("\n".join(data)), event_id)
            kind, event_id, data = "message", None, []
            continue
        if line.startswith(":"):
            if keepalives:
                yield StreamEvent(KEEPALIVE, None)
            continue
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            kind = value
        elif field == "data":
            data.append(value)
        elif field == "id":
            event_id = value


def _error(resp: httpx.Response) -> ServerHTTPError | NotFound:
    try:
        body = resp.json()
        reason = str(body.get("error", "error"))
        detail = body.get("detail")
    except (ValueError, AttributeError):
        reason, detail = "error", resp.text[:500]
    if isinstance(detail, list):
        detail = "; ".join(
            f"{'.'.join(str(p) for p in d.get('loc', []))}: {d.get('msg', '')}"
            if isinstance(d, dict)
            else str(d)
            for d in detail
        )
    status = resp.status_code
    hint = None
    if status == 401:
        hint = "pass the server's token (MLBENCH_TOKEN, or the run token for worker writes)"
    elif status == 403:
        hint = "this token is not allowed to do that"
    if status == 404:
        return NotFound(str(detail or "not found"), hint="list runs with: mlbench status")
    message = f"server answered {status} ({reason})"
    if detail:
        message += f": {detail}"
    return ServerHTTPError(status, reason, message, hint=hint)
