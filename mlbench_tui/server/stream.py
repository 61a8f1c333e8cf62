"""Live streams (Server-Sent Events) fed by the store's writer, not by polling.

Every write passes through the single writer, so after each commit it hands the committed rows
to ``Hub.publish`` (one call per group transaction). The hub hops once onto the event loop,
encodes each change to SSE bytes once, and fans them out to the subscribers of that run (or of
the run list). No database query per client per tick. A subscriber that falls behind gets a
``resync`` event and should refetch from its cursors.

A subscriber may ask for coalesced metrics (``coalesce`` seconds): instead of one ``metrics``
event per committed batch it gets one ``metrics_summary`` event per interval with, per (name,
rank), the last point and the min/max since the previous summary. A committed metrics change
is only queued by reference (its ``MetricChunk``: rows are never built) and once per interval
``summarise`` folds the queued batches for all subscribers sharing that interval and metric
names. Replays, and changes made from rows, are summarised in SQL instead
(``queries.metric_summary``, off the event loop). Nothing is done for a run nobody watches, or
while nothing changes. Logs, events and run changes are sent as they come.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from mlbench_tui.store.changes import Change, MetricChunk

log = logging.getLogger("mlbench.server")

QUEUE_MAX = 2048
KEEPALIVE_S = 15.0
MIN_KEEPALIVE_S = 0.2  # a run stream's client may ask for keepalives this often, at most
MAX_KEEPALIVE_S = 60.0
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


def summarise(chunks: list[MetricChunk], names: tuple[str, ...] = ()) -> tuple[int, list[dict[str, Any]]]:
    """(cursor, series) of stored metric batches: per (name, rank) the last point, the min/max of
    the values and the count, in ``MetricsSummary``'s shape (only ``names`` when given); the
    cursor is the highest row id folded in.

    The work per row is C-level slicing and zipping plus one pass per metric and rank present in
    a batch, less than the same summary in SQL, whose GROUP BY sorts every row.
    """
    wanted = set(names)
    acc: dict[tuple[int, int], list[Any]] = {}  # (series, rank) -> [lo, hi, count, point, name]
    cursor = 0
    for chunk in chunks:
        n = len(chunk)
        if not n:
            continue
        cursor = max(cursor, chunk.last_id)
        series_names = chunk.names
        values = chunk.column("value")
        ranks = chunk.column("rank")
        sids = chunk.column("series")
        groups: Any
        if len(set(ranks)) == 1:  # a batch comes from one rank: group on the series alone
            by_sid = dict(zip(sids, range(n), strict=True))  # series -> index of its last row
            if wanted:
                by_sid = {sid: i for sid, i in by_sid.items() if series_names.get(sid) in wanted}
            rank = ranks[0]
            last = {(sid, rank): i for sid, i in by_sid.items()}
            if len(by_sid) == 1 and len(set(sids)) == 1:
                groups = ((next(iter(last)), values),)
            else:
                pairs = list(zip(sids, values, strict=True))
                groups = (((sid, rank), [v for s, v in pairs if s == sid]) for sid in by_sid)
        else:
            keys = list(zip(sids, ranks, strict=True))
            last = dict(zip(keys, range(n), strict=True))
            if wanted:
                last = {key: i for key, i in last.items() if series_names.get(key[0]) in wanted}
            groups = ((key, [v for k, v in zip(keys, values, strict=True) if k == key]) for key in last)
        for key, group in groups:
            count = len(group)
            if None in group:
                group = [v for v in group if v is not None]
            lo, hi = (min(group), max(group)) if group else (None, None)
            point = chunk.point(last[key])
            entry = acc.get(key)
            if entry is None:
                acc[key] = [lo, hi, count, point, series_names.get(key[0], "")]
                continue
            if lo is not None:
                entry[0] = lo if entry[0] is None or lo < entry[0] else entry[0]
                entry[1] = hi if entry[1] is None or hi > entry[1] else entry[1]
            entry[2] += count
            entry[3] = point
    series = [
        {
            "name": name,
            "rank": rank,
            "step": [point[0]],
            "epoch": [point[1]],
            "t": [point[2]],
            "value": [point[3]],
            "min": [lo],
            "max": [hi],
            "count": count,
        }
        for (_sid, rank), (lo, hi, count, point, name) in sorted(
            acc.items(), key=lambda item: (item[1][4], item[0][1])
        )
    ]
    return cursor, series


def encode_summary(cursor: int, series: list[dict[str, Any]]) -> tuple[str, int, bytes] | None:
    """The ``metrics_summary`` event of ``queries.metric_summary``'s answer (None when empty)."""
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
    names: tuple[str, ...] = ()  # coalesced: only these metrics are summarised (empty: all)
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
    """The summaries of one run for the subscribers sharing ``interval``: rows after ``cursor``
    are summarised at the next tick when ``dirty`` (``cursor`` is None until the first
    subscriber's replay has set where live summaries start)."""

    run_id: str
    interval: float
    names: tuple[str, ...] = ()
    subs: set[Subscriber] = field(default_factory=set)
    cursor: int | None = None
    pending: list[MetricChunk] = field(default_factory=list)  # batches since the last tick, by reference
    sql: bool = False  # a change came without parameters: read the next summary from the store
    dirty: bool = False
    busy: bool = False  # a summary is being read
    ticked: float = 0.0  # loop time of the last summary tick
    handle: asyncio.TimerHandle | None = None


# (run_id, after, names) -> (cursor, series): see queries.metric_summary
Summary = Callable[[str, int, tuple[str, ...]], tuple[int, list[dict[str, Any]]]]


class Hub:
    """Fan-out of committed changes to stream subscribers; lives on the server's event loop."""

    def __init__(self, summary: Summary) -> None:
        self._summary = summary  # blocking (a store read): called in the summary thread
        self._reader = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="mlbench-summary")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._by_run: dict[str, set[Subscriber]] = {}
        self._runs_list: set[Subscriber] = set()
        self._per_row: dict[str, int] = {}  # run -> subscribers taking every metrics batch
        self._coalescers: dict[str, dict[tuple[float, tuple[str, ...]], _Coalescer]] = {}

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._loop_thread = threading.get_ident()

    @property
    def subscribers(self) -> int:
        return len(self._runs_list) + sum(len(s) for s in self._by_run.values())

    def publish(self, changes: list[Change]) -> None:
        """Writer entry: one hop to the loop per committed group, nothing if nobody listens."""
        loop = self._loop
        if loop is None or (not self._runs_list and not self._by_run):
            return
        wanted = [
            c
            for c in changes
            if c.run_id in self._by_run or (self._runs_list and c.kind in ("run", "run_deleted"))
        ]
        if wanted:
            if threading.get_ident() == self._loop_thread:  # committed in the loop (inline writer)
                loop.call_soon(self._dispatch, wanted)
                return
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._dispatch, wanted)

    def _dispatch(self, changes: list[Change]) -> None:
        for change in changes:
            if change.kind == "metrics":
                coalescers = self._coalescers.get(change.run_id)
                if coalescers:
                    chunk = change.metrics
                    for co in coalescers.values():
                        if chunk is None:
                            co.sql = True
                        else:
                            co.pending.append(chunk)
                        self._mark(co)
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

    def _mark(self, co: _Coalescer, *, beat: bool = False) -> None:
        """Schedule a summary ``interval`` after the first change; while the run keeps reporting
        (``beat``) one interval after the previous tick, not after its read, so clients get a
        steady 1/interval updates a second."""
        co.dirty = True
        if co.handle is None and not co.busy and self._loop is not None:
            delay = co.interval - (self._loop.time() - co.ticked) if beat else co.interval
            co.handle = self._loop.call_later(max(0.0, delay), self._summarise, co)

    def _summarise(self, co: _Coalescer) -> None:
        """Interval tick: fold the batches queued since the last one (or, when a change came
        without its ``MetricChunk``, read the summary of the rows after the cursor in SQL, off the loop)."""
        co.handle = None
        loop = self._loop
        if not co.subs or loop is None:
            return
        after = co.cursor
        if after is None:  # the first subscriber's replay has not said where to start yet
            co.handle = loop.call_later(co.interval, self._summarise, co)
            return
        co.dirty, co.ticked = False, loop.time()
        pending, co.pending = co.pending, []
        if not co.sql:
            # Batches the replay already covered are skipped (a batch across it is kept whole).
            fresh = [c for c in pending if c.last_id > after]
            cursor, series = summarise(fresh, co.names)
            co.cursor = max(after, cursor)
            encoded = encode_summary(co.cursor, series)
            if encoded is not None:
                for sub in co.subs:
                    sub.offer(encoded)
            return
        co.sql, co.busy = False, True
        try:
            done = loop.run_in_executor(self._reader, self._summary, co.run_id, after, co.names)
        except RuntimeError:  # shutting down
            co.busy = False
            return
        done.add_done_callback(lambda f: self._summarised(co, after, f))

    def _summarised(self, co: _Coalescer, after: int, done: asyncio.Future[Any]) -> None:
        co.busy = False
        if done.cancelled() or done.exception() is not None:
            if done.exception() is not None:
                log.warning("metrics summary of run %s failed: %s", co.run_id, done.exception())
        else:
            cursor, series = done.result()
            co.cursor = max(co.cursor or 0, cursor)
            encoded = encode_summary(cursor, series)
            if encoded is not None:
                for sub in co.subs:
                    sub.offer(encoded)
        if co.dirty and co.subs:
            self._mark(co, beat=True)

    def start_summaries(self, sub: Subscriber, cursor: int) -> None:
        """Live summaries for ``sub`` cover rows after ``cursor`` (its replay covered the rest)."""
        co = self._coalescers.get(sub.run_id or "", {}).get((sub.coalesce or 0.0, sub.names))
        if co is not None and co.cursor is None:
            co.cursor = cursor

    def subscribe(
        self, run_id: str | None, coalesce: float | None = None, names: tuple[str, ...] = ()
    ) -> Subscriber:
        """A new stream; ``coalesce`` (run streams only) asks for one metrics summary per interval,
        of the metrics in ``names`` only when given (what the client's visible widgets need)."""
        sub = Subscriber(run_id, coalesce if run_id is not None else None)
        if sub.coalesce is not None:
            sub.names = tuple(sorted(set(names)))
        if run_id is None:
            self._runs_list.add(sub)
            return sub
        self._by_run.setdefault(run_id, set()).add(sub)
        if sub.coalesce is None:
            self._per_row[run_id] = self._per_row.get(run_id, 0) + 1
        else:
            by_interval = self._coalescers.setdefault(run_id, {})
            key = (sub.coalesce, sub.names)
            co = by_interval.get(key)
            if co is None:
                co = by_interval[key] = _Coalescer(run_id, sub.coalesce, sub.names)
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
        key = (sub.coalesce, sub.names)
        co = by_interval.get(key)
        if co is not None:
            co.subs.discard(sub)
            if not co.subs:
                if co.handle is not None:
                    co.handle.cancel()
                del by_interval[key]
                if not by_interval:
                    self._coalescers.pop(sub.run_id, None)

    def close_all(self) -> None:
        """Ask every open stream to end (server shutdown)."""
        for sub in list(self._runs_list) + [s for subs in self._by_run.values() for s in subs]:
            sub.offer(None)
        self._reader.shutdown(wait=False, cancel_futures=True)


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
