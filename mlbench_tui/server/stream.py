"""Live streams (Server-Sent Events) fed by the store's writer, not by polling.

Every write passes through the single writer, so after each commit it hands the committed rows
to ``Hub.publish`` (one call per group transaction). The hub hops once onto the event loop,
encodes each change to SSE bytes once, and fans them out to the subscribers of that run (or of
the run list). No database query per client per tick. A subscriber that falls behind gets a
``resync`` event and should refetch from its cursors.

A subscriber may ask for coalesced metrics (``coalesce`` seconds): instead of one ``metrics``
event per committed batch it gets one ``metrics_summary`` event per interval with, per (name,
rank), the last point and the min/max since the previous summary. The committed rows are only
appended (by reference) to the run's pending list and summarised once per interval for all such
subscribers; nothing is kept when no coalesced subscriber listens. Logs, events and run changes
are sent as they come.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from mlbench_tui.store.db import Change

QUEUE_MAX = 2048
KEEPALIVE_S = 15.0
MIN_COALESCE_S = 0.05
MAX_COALESCE_S = 60.0

_METRIC_KEYS = ("id", "run_id", "rank", "name", "step", "epoch", "t", "value")
_LOG_KEYS = ("id", "run_id", "rank", "stream", "seq", "t", "text")
_EVENT_KEYS = ("id", "run_id", "rank", "kind", "payload", "t")


def sse(event: str, data: Any, event_id: str | None = None) -> bytes:
    """One SSE message (``event:``/``id:``/``data:`` lines); data is JSON on one line."""
    head = f"event: {event}\n"
    if event_id is not None:
        head += f"id: {event_id}\n"
    return head.encode() + b"data: " + orjson.dumps(data) + b"\n\n"


def _rows(keys: tuple[str, ...], rows: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        item = dict(zip(keys, row, strict=True))
        item.pop("run_id", None)
        if "payload" in item and isinstance(item["payload"], str):
            item["payload"] = orjson.loads(item["payload"])
        out.append(item)
    return out


def summarise(chunks: Iterable[list[tuple[Any, ...]]]) -> tuple[int, list[dict[str, Any]]]:
    """(cursor, series) of metric rows: per (name, rank) one bucket with the last point and min/max.

    ``series`` items have the shape of ``MetricSeries`` (one element per column), so a client
    folds them in like a downsampled page; the cursor is the highest row id summarised.
    """
    groups: dict[tuple[str, int], list[tuple[Any, ...]]] = {}
    cursor = 0
    for rows in chunks:
        if not rows:
            continue
        for row in rows:
            key = (row[3], row[2])
            group = groups.get(key)
            if group is None:
                groups[key] = [row]
            else:
                group.append(row)
        cursor = max(cursor, rows[-1][0])
    series = []
    for (name, rank), group in groups.items():
        values = [row[7] for row in group]
        if None in values:
            values = [v for v in values if v is not None]
        last = group[-1]
        lo, hi = (min(values), max(values)) if values else (None, None)
        series.append(
            {
                "name": name,
                "rank": rank,
                "step": [last[4]],
                "epoch": [last[5]],
                "t": [last[6]],
                "value": [last[7]],
                "min": [lo],
                "max": [hi],
                "count": len(group),
            }
        )
    return cursor, series


def encode_summary(chunks: Iterable[list[tuple[Any, ...]]]) -> tuple[str, int, bytes] | None:
    """The ``metrics_summary`` event of metric rows (None when there are none)."""
    cursor, series = summarise(chunks)
    if not series:
        return None
    return "metrics", cursor, sse("metrics_summary", {"cursor": cursor, "series": series})


def encode_change(change: Change) -> tuple[str, int, bytes] | None:
    """(kind, cursor, bytes) of a committed change, as sent on a run's stream."""
    if change.kind == "metrics":
        cursor = change.rows[-1][0]
        return (
            "metrics",
            cursor,
            sse("metrics", {"cursor": cursor, "points": _rows(_METRIC_KEYS, change.rows)}),
        )
    if change.kind == "logs":
        cursor = change.rows[-1][0]
        return "logs", cursor, sse("logs", {"cursor": cursor, "lines": _rows(_LOG_KEYS, change.rows)})
    if change.kind == "events":
        cursor = change.rows[-1][0]
        return "events", cursor, sse("events", {"cursor": cursor, "events": _rows(_EVENT_KEYS, change.rows)})
    if change.kind == "run":
        return "run", 0, sse("run", change.rows[0][0].model_dump(mode="json"))
    if change.kind == "run_deleted":
        return "run_deleted", 0, sse("run_deleted", {"id": change.run_id})
    if change.kind == "rank":
        return "rank", 0, sse("rank", change.rows[0][0].model_dump(mode="json"))
    return None


@dataclass(eq=False)
class Subscriber:
    """One open stream: a bounded queue of (kind, cursor, bytes)."""

    run_id: str | None
    coalesce: float | None = None  # seconds between metric summaries; None: every batch as it comes
    queue: asyncio.Queue[tuple[str, int, bytes] | None] = field(
        default_factory=lambda: asyncio.Queue(maxsize=QUEUE_MAX)
    )
    lagged: bool = False

    def offer(self, item: tuple[str, int, bytes] | None) -> None:
        try:
            self.queue.put_nowait(item)
        except asyncio.QueueFull:
            self.lagged = True


@dataclass(eq=False)
class _Coalescer:
    """Metric rows of one run waiting for the next summary of the subscribers sharing ``interval``."""

    run_id: str
    interval: float
    subs: set[Subscriber] = field(default_factory=set)
    pending: list[list[tuple[Any, ...]]] = field(default_factory=list)
    handle: asyncio.TimerHandle | None = None


class Hub:
    """Fan-out of committed changes to stream subscribers; lives on the server's event loop."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._by_run: dict[str, set[Subscriber]] = {}
        self._runs_list: set[Subscriber] = set()
        self._per_row: dict[str, int] = {}  # run -> subscribers taking every metrics batch
        self._coalescers: dict[str, dict[float, _Coalescer]] = {}

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    @property
    def subscribers(self) -> int:
        return len(self._runs_list) + sum(len(s) for s in self._by_run.values())

    def publish(self, changes: list[Change]) -> None:
        """Writer-thread entry: one hop to the loop per committed group, nothing if nobody listens."""
        loop = self._loop
        if loop is None or (not self._runs_list and not self._by_run):
            return
        wanted = [
            c
            for c in changes
            if c.run_id in self._by_run or (self._runs_list and c.kind in ("run", "run_deleted"))
        ]
        if wanted:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._dispatch, wanted)

    def _dispatch(self, changes: list[Change]) -> None:
        for change in changes:
            if change.kind == "metrics":
                coalescers = self._coalescers.get(change.run_id)
                if coalescers:
                    for co in coalescers.values():
                        self._pend(co, change.rows)
                if not self._per_row.get(change.run_id):
                    continue
                encoded = encode_change(change)
                if encoded is not None:
                    for sub in self._by_run.get(change.run_id, ()):
                        if sub.coalesce is None:
                            sub.offer(encoded)
                continue
            encoded = encode_change(change)
            if encoded is None:
                continue
            for sub in self._by_run.get(change.run_id, ()):
                sub.offer(encoded)
            if change.kind in ("run", "run_deleted"):
                for sub in self._runs_list:
                    sub.offer(encoded)

    def _pend(self, co: _Coalescer, rows: list[tuple[Any, ...]]) -> None:
        co.pending.append(rows)  # by reference: the summary is computed once per interval
        if co.handle is None and self._loop is not None:
            co.handle = self._loop.call_later(co.interval, self._summarise, co)

    def _summarise(self, co: _Coalescer) -> None:
        co.handle = None
        pending, co.pending = co.pending, []
        encoded = encode_summary(pending)
        if encoded is not None:
            for sub in co.subs:
                sub.offer(encoded)

    def subscribe(self, run_id: str | None, coalesce: float | None = None) -> Subscriber:
        """A new stream; ``coalesce`` (run streams only) asks for one metrics summary per interval."""
        sub = Subscriber(run_id, coalesce if run_id is not None else None)
        if run_id is None:
            self._runs_list.add(sub)
            return sub
        self._by_run.setdefault(run_id, set()).add(sub)
        if sub.coalesce is None:
            self._per_row[run_id] = self._per_row.get(run_id, 0) + 1
        else:
            by_interval = self._coalescers.setdefault(run_id, {})
            co = by_interval.get(sub.coalesce)
            if co is None:
                co = by_interval[sub.coalesce] = _Coalescer(run_id, sub.coalesce)
            co.subs.add(sub)
        return sub

    def unsubscribe(self, sub: Subscriber) -> None:
        if sub.run_id is None:
            self._runs_list.discard(sub)
            return
        subs = self._by_run.get(sub.run_id)
        if subs is None or sub not in subs:
            return
        subs.discard(sub)
        if not subs:
            del self._by_run[sub.run_id]
        if sub.coalesce is None:
            left = self._per_row.get(sub.run_id, 0) - 1
            if left > 0:
                self._per_row[sub.run_id] = left
            else:
                self._per_row.pop(sub.run_id, None)
            return
        by_interval = self._coalescers.get(sub.run_id, {})
        co = by_interval.get(sub.coalesce)
        if co is not None:
            co.subs.discard(sub)
            if not co.subs:
                if co.handle is not None:
                    co.handle.cancel()
                del by_interval[sub.coalesce]
                if not by_interval:
                    self._coalescers.pop(sub.run_id, None)

    def close_all(self) -> None:
        """Ask every open stream to end (server shutdown)."""
        for sub in list(self._runs_list) + [s for subs in self._by_run.values() for s in subs]:
            sub.offer(None)


async def follow(
    hub: Hub, sub: Subscriber, backlog: list[bytes], cursors: dict[str, int], keepalive: float = KEEPALIVE_S
) -> AsyncIterator[bytes]:
    """The byte stream of one subscriber: backlog first, then live changes newer than the cursors."""
    try:
        for chunk in backlog:
            yield chunk
        while True:
            if sub.lagged:
                sub.lagged = False
                yield sse("resync", {"reason": "client too slow; refetch from your cursors"})
            try:
                item = await asyncio.wait_for(sub.queue.get(), timeout=keepalive)
            except TimeoutError:
                yield b": keepalive\n\n"
                continue
            if item is None:
                return
            kind, cursor, data = item
            if cursor and cursor <= cursors.get(kind, 0):
                continue  # already sent in the backlog
            if kind == "run_deleted" and sub.run_id is not None:
                yield data
                return
            yield data
    finally:
        hub.unsubscribe(sub)
