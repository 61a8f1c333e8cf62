"""Feeds: the loops that run in Textual thread workers, read the server, and post messages.

``RunsFeed`` polls the run list (and the goal metric of unfinished runs) once a second.
``RunFeed`` loads one run, then follows its Server-Sent Event stream opened with
``coalesce=interval`` (one min/max/last bucket per metric, rank and interval: all a chart can
show) and posts one ``RunChanged`` per interval however fast the run reports. Both survive a
server that goes away: they report it, retry with backoff and resume from their cursors.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from textual.message import Message

from mlbench_tui.errors import MlbenchError, NotFound
from mlbench_tui.plan import GoalPlan
from mlbench_tui.server.client import KEEPALIVE, ServerUnreachable
from mlbench_tui.spec.tasks import sweep_of
from mlbench_tui.store.api_models import EventOut, LogLineOut, RankInfo, RunDetail, RunInfo
from mlbench_tui.tui.messages import (
    ConnectionChanged,
    RunBatch,
    RunChanged,
    RunGone,
    RunSlow,
    RunsUpdated,
    SeriesDelta,
)

CHART_POINTS = 2000  # buckets per series fetched when a run screen opens (min/max kept)
BAND_POINTS = 400  # buckets of a percentile band across ranks (each reads every rank's value)
LOG_LINES = 5000  # log lines read when a run screen opens (the latest), and per rank-set filter
COMPACT_ABOVE = 64  # a series delta longer than this is sent to the screen as buckets...
COMPACT_BUCKETS = 16  # ...this many per update (min/max/last kept): UI work stays flat under load
BACKOFF = (0.5, 1.0, 2.0, 4.0, 5.0)
MIN_COALESCE_S = 0.05  # the server's lower bound for ``coalesce`` (shorter intervals: every point)
QUIET_PROBE_S = 20.0  # no stream traffic for this long: probe the server (keepalives are every 15 s)

Post = Callable[[Message], object]
Cancelled = Callable[[], bool]
HISTORY_TIMEOUT_S = 35.0  # a run screen's first read: the history of its charts (server deadline 30 s)
STREAM_TICK_S = 1.0  # keepalives asked of a run stream when quiet: a closed reader stops this soon

if TYPE_CHECKING:
    from mlbench_tui.server.client import MlbenchClient


@dataclass(frozen=True)
class StreamParams:
    """Where a run's stream resumes (cursors) and what it summarises."""

    metrics_since: int
    logs_since: int
    events_since: int
    coalesce: float | None = None
    names: tuple[str, ...] = ()


@dataclass(frozen=True)
class HistoryPlan:
    """What a run screen reads when it opens; its live stream summarises the same metrics.

    ``series``: every rank's history of these (None: of every metric); ``one_rank``: only rank
    ``rank``'s history, for a run too wide to chart each rank; ``bands``: p50, p90 and max
    across ranks; ``latest``: each rank's latest value, for the rank table."""

    series: list[str] | None = field(default_factory=list)
    one_rank: list[str] = field(default_factory=list)
    bands: list[str] = field(default_factory=list)
    latest: list[str] = field(default_factory=list)
    rank: int = 0

    @property
    def names(self) -> list[str] | None:
        """The metrics the stream summarises (None: every metric)."""
        if self.series is None:
            return None
        return list(dict.fromkeys([*self.series, *self.one_rank, *self.bands, *self.latest]))


class Backoff:
    """0.5 s, 1 s, 2 s, 4 s, then 5 s between retries; ``reset`` after a success."""

    def __init__(self) -> None:
        self.attempt = 0

    def next(self) -> float:
        delay = BACKOFF[min(self.attempt, len(BACKOFF) - 1)]
        self.attempt += 1
        return delay

    def reset(self) -> None:
        self.attempt = 0


def _describe(exc: MlbenchError) -> str:
    return exc.message


def sleep_until(deadline: float, cancelled: Cancelled, wake: threading.Event | None = None) -> None:
    """Sleep until ``deadline`` (monotonic) in short slices, returning early when cancelled or woken."""
    while not cancelled():
        left = deadline - time.monotonic()
        if left <= 0:
            return
        if wake is not None:
            if wake.wait(min(left, 0.1)):
                wake.clear()
                return
        else:
            time.sleep(min(left, 0.1))


def compact(delta: SeriesDelta, buckets: int) -> SeriesDelta:
    """``delta`` as ``buckets`` equal-count buckets: last step/epoch/time/value, and min/max.

    A run reporting thousands of points per second then costs the screen the same as a slow one;
    the extremes survive, so a spike still shows on the chart.
    """
    n = len(delta)
    out = SeriesDelta(delta.name, delta.rank, mins=[], maxs=[])
    assert out.mins is not None and out.maxs is not None
    values = delta.values
    lows = delta.mins if delta.mins is not None else values
    highs = delta.maxs if delta.maxs is not None else values
    for b in range(buckets):
        lo, hi = b * n // buckets, (b + 1) * n // buckets
        if hi <= lo:
            continue
        last = hi - 1
        out.steps.append(delta.steps[last])
        out.epochs.append(delta.epochs[last])
        out.ts.append(delta.ts[last])
        out.values.append(values[last])
        out.mins.append(_extreme(min, lows[lo:hi]))
        out.maxs.append(_extreme(max, highs[lo:hi]))
    return out


def _extreme(pick: Callable[[list[float]], float], raw: list[float | None]) -> float | None:
    chunk = [v for v in raw if v is not None] if None in raw else cast("list[float]", raw)
    return pick(chunk) if chunk else None


def add_bucket(
    delta: SeriesDelta,
    step: int | None,
    epoch: float | None,
    t: float,
    value: float | None,
    low: float | None,
    high: float | None,
) -> None:
    """Append one min/max/last bucket to ``delta`` (its plain points become one-point buckets)."""
    if delta.mins is None or delta.maxs is None:
        delta.mins, delta.maxs = list(delta.values), list(delta.values)
    delta.steps.append(step)
    delta.epochs.append(epoch)
    delta.ts.append(t)
    delta.values.append(value)
    delta.mins.append(low)
    delta.maxs.append(high)


class RunsFeed:
    """Polls ``GET /v1/runs`` and the goal metric of unfinished runs; posts ``RunsUpdated``."""

    MAX_GOAL_RUNS = 50

    def __init__(self, client: MlbenchClient, post: Post, status: Post, *, interval: float = 1.0) -> None:
        self.client = client
        self.post = post
        self.status = status
        self.interval = interval
        self.wake = threading.Event()
        self.paused = threading.Event()  # set while nobody looks at the run list (another screen on top)
        self._goal_points: dict[str, list[tuple[float, float]]] = {}
        self._goal_cursor: dict[str, int] = {}
        self._finished: set[str] = set()

    def run(self, cancelled: Cancelled) -> None:
        backoff = Backoff()
        client = self.client
        connected: bool | None = None
        while not cancelled():
            if self.paused.is_set():
                sleep_until(time.monotonic() + self.interval, cancelled, self.wake)
                continue
            try:
                runs = client.list_runs()
                if connected:  # the first list is painted before any per-run request
                    self._update_goal_points(client, runs)
            except MlbenchError as exc:
                delay = backoff.next()
                connected = False
                self.status(ConnectionChanged(False, _describe(exc), delay))
                sleep_until(time.monotonic() + delay, cancelled, self.wake)
                continue
            backoff.reset()
            if connected is not True:
                connected = True
                self.status(ConnectionChanged(True))
            live = {r.id for r in runs}
            for gone in [k for k in self._goal_points if k not in live]:
                self._goal_points.pop(gone, None)
                self._goal_cursor.pop(gone, None)
            self.post(RunsUpdated(runs, {k: list(v) for k, v in self._goal_points.items()}))
            if any(run.id not in self._goal_cursor for run, _ in self._pending_goal_runs(runs)):
                # Fill in goal progress right after the first paint, then on the normal beat.
                sleep_until(time.monotonic() + min(self.interval, 0.05), cancelled, self.wake)
            else:
                sleep_until(time.monotonic() + self.interval, cancelled, self.wake)

    def _pending_goal_runs(self, runs: list[RunInfo]) -> list[tuple[RunInfo, GoalPlan]]:
        """Runs (with their goal) whose goal progress needs points: unfinished ones, and finished
        ones once, when their stored result does not already say how far they got."""
        out = []
        for run in runs[: self.MAX_GOAL_RUNS]:
            if run.goal is None or run.id in self._finished:
                continue
            if run.state.is_terminal() and run.result is not None and run.result.best_value is not None:
                continue
            out.append((run, run.goal))
        return out

    def _update_goal_points(self, client: Any, runs: list[RunInfo]) -> None:
        """Fetch new goal-metric points of runs still going (and once more when they finish)."""
        for run, goal in self._pending_goal_runs(runs):
            if run.state.is_terminal():
                self._finished.add(run.id)
            page = client.metrics(run.id, [goal.metric], since=self._goal_cursor.get(run.id, 0))
            self._goal_cursor[run.id] = page.cursor
            points = self._goal_points.setdefault(run.id, [])
            ranks = sorted({s.rank for s in page.series})
            for series in page.series:
                if ranks and series.rank != ranks[0]:
                    continue  # a global metric: every rank reports the same value
                points.extend((t, v) for t, v in zip(series.t, series.value, strict=True) if v is not None)
            points.sort()


class _StreamReader:
    """Reads one run's SSE stream on a daemon thread into a queue.

    The server sends it a keepalive every ``STREAM_TICK_S`` when the run is quiet, so after
    ``close()`` the reader stops within that time and closes its response: the server sees the
    client leave, and closing a screen or the app never waits for it.
    """

    END = object()

    def __init__(self, client: MlbenchClient, run_id: str, params: StreamParams) -> None:
        self._client = client
        self._run_id = run_id
        self._params = params
        self._closed = threading.Event()
        self.queue: queue.Queue[Any] = queue.Queue()
        self.thread = threading.Thread(target=self._read, name="mlbench-tui-stream", daemon=True)
        self.thread.start()

    def _read(self) -> None:
        p = self._params
        events = self._client.stream(
            self._run_id,
            metrics_since=p.metrics_since,
            logs_since=p.logs_since,
            events_since=p.events_since,
            coalesce=p.coalesce,
            names=p.names,
            keepalive=STREAM_TICK_S,
        )
        try:
            with contextlib.closing(events):
                for event in events:
                    if self._closed.is_set():
                        return
                    if event.kind != KEEPALIVE:
                        self.queue.put(event)
            self.queue.put(self.END)
        except MlbenchError as exc:
            if not self._closed.is_set():
                self.queue.put(exc)

    def close(self) -> None:
        self._closed.set()


class _Resync(Exception):
    """The server says we fell behind: refetch from the cursors."""


class RunFeed:
    """Loads one run and follows its stream; posts one ``RunChanged`` per ``interval`` at most."""

    def __init__(
        self,
        client: MlbenchClient,
        run_id: str,
        post: Post,
        status: Post,
        *,
        interval: float = 0.25,
        chart_points: int = CHART_POINTS,
        coalesce: bool = True,
        history: Callable[[RunDetail], HistoryPlan] | None = None,
    ) -> None:
        self.client = client
        self.run_id = run_id
        self.post = post
        self.status = status
        self.interval = interval
        self.chart_points = chart_points
        self.history = history  # what the screen shows of the run's history (None: every metric)
        self.names: list[str] | None = None  # the metrics the stream summarises (None: all)
        self._exact_after = 0  # cursor of the sweep points read exactly so far
        self._restart = threading.Event()
        self.coalesce = coalesce and interval >= MIN_COALESCE_S  # metric summaries, not every point
        self.cursors = {"metrics": 0, "logs": 0, "events": 0}
        self.wake = threading.Event()
        self.loaded = False  # the history was read (the stream goes on from its cursors)
        self.loads = 0  # how many times the run was (re)loaded: 1 plus resyncs and reconnects

    def run(self, cancelled: Cancelled) -> None:
        backoff = Backoff()
        was_down = False
        while not cancelled():
            try:
                self._load(self.client)
                if was_down:
                    self.status(ConnectionChanged(True))
                    was_down = False
                backoff.reset()
                self._follow(cancelled)
                return
            except _Resync:
                continue
            except NotFound:
                self.post(RunGone(self.run_id))
                return
            except MlbenchError as exc:
                delay = backoff.next()
                if getattr(exc, "timed_out", False) or getattr(exc, "status", 0) >= 500:
                    # The server is up but slow (a big run under ingest) or failing this read:
                    # the screen shows a loading state; the connection banner is for "gone".
                    self.post(RunSlow(self.run_id, _describe(exc), delay))
                else:
                    was_down = True
                    self.status(ConnectionChanged(False, _describe(exc), delay))
                sleep_until(time.monotonic() + delay, cancelled, self.wake)

    def _load(self, client: MlbenchClient) -> None:
        """The run first, posted alone (the screen paints it at once), then what the screen
        shows of its history (``HistoryPlan``): the latest log lines and every rank's latest
        figures, then charts downsampled by the server and percentile bands across ranks. After
        a reconnect, only the run: the stream resumes from the cursors.

        Only what the screen shows is read: on a run with millions of rows, every series of the
        run (or the full metric-name statistics) would cost the server seconds under ingest.
        """
        self.loads += 1
        batch = RunBatch(initial=not self.loaded)
        batch.run = client.get_run(self.run_id)  # a result other rules stored comes recomputed
        self.post(RunChanged(self.run_id, batch))
        if self.loaded:
            return
        plan = self.history(batch.run) if self.history is not None else HistoryPlan(series=None)
        if self.names is None:
            self.names = plan.names
        # the latest log lines (not the first ones: a long run has more than a view keeps)
        logs = client.logs(self.run_id, limit=LOG_LINES, tail=True)
        self.cursors["logs"] = logs.cursor
        ranks = RunBatch(lines=logs.lines)
        if plan.latest:  # the store's newest metric id when read: the stream goes on from there
            ranks.latest = client.latest(self.run_id, plan.latest)
        self.post(RunChanged(self.run_id, ranks))
        # the whole history of a run of millions of rows takes the server seconds to bucket
        # (the server stops a read at 30 s itself)
        charts, read = read_charts(client, self.run_id, plan, self.chart_points, HISTORY_TIMEOUT_S)
        self.cursors["metrics"] = ranks.latest.cursor if ranks.latest is not None else min(read, default=0)
        if not charts.is_empty():
            self.post(RunChanged(self.run_id, charts))
        self.loaded = True

    def show(self, names: list[str]) -> None:
        """Summarise these metrics from now on (the screen shows new charts): reopens the stream
        from the cursors, so nothing is lost and the server keeps summarising only what is shown."""
        if self.coalesce and sorted(names) != sorted(self.names or ()):
            self.names = list(names)
            self._restart.set()

    def _follow(self, cancelled: Cancelled) -> None:
        params = StreamParams(
            metrics_since=self.cursors["metrics"],
            logs_since=self.cursors["logs"],
            events_since=self.cursors["events"],
            coalesce=self.interval if self.coalesce else None,
            names=tuple(self.names or ()) if self.coalesce else (),
        )
        self._restart.clear()
        reader = _StreamReader(self.client, self.run_id, params)
        try:
            self._drain(reader, self.client, cancelled)
        finally:
            reader.close()

    def _exact_points(self, batch: RunBatch, series: Any, before: int) -> set[str]:
        """Sweep metrics (all-reduce by message size) whose summary folded several points: read
        those points instead (every size is its own point of the curve, not a step of a trend).
        Returns the names read; on failure, none (their summary buckets are shown instead)."""
        names = {
            s["name"]
            for s in series
            if sweep_of(s["name"]) is not None and int(s.get("count") or 0) > len(s["t"])
        }
        if not names:
            return set()
        try:
            page = self.client.metrics(self.run_id, sorted(names), since=max(before, self._exact_after))
        except MlbenchError:
            return set()
        self._exact_after = max(self._exact_after, page.cursor)
        for m in page.series:
            delta = batch.delta(m.name, m.rank)
            for step, epoch, t, value in zip(m.step, m.epoch, m.t, m.value, strict=True):
                add_bucket(delta, step, epoch, t, value, value, value)
        return names

    def _drain(self, reader: _StreamReader, client: MlbenchClient, cancelled: Cancelled) -> None:
        last_traffic = time.monotonic()
        while not cancelled():
            if self._restart.is_set():  # the screen shows other metrics: reopen for them
                raise _Resync()
            deadline = time.monotonic() + self.interval
            batch = RunBatch()
            try:
                while True:
                    timeout = deadline - time.monotonic()
                    if timeout <= 0:
                        break
                    try:
                        item = reader.queue.get(timeout=min(timeout, 0.1))
                    except queue.Empty:
                        if cancelled():
                            return
                        continue
                    last_traffic = time.monotonic()
                    if item is _StreamReader.END:
                        raise ServerUnreachable("the server closed the stream")
                    if isinstance(item, BaseException):
                        raise item
                    if self._apply(item, batch):
                        self._flush(batch)
                        batch = RunBatch()
                        self.post(RunGone(self.run_id))
                        return
                    if item.kind == "metrics_summary":
                        # The server sends one per interval: show it now, not at the end of our
                        # own window, whose phase drifts against the server's.
                        break
            finally:
                # What was folded in has moved the cursors: deliver it even when the stream broke.
                self._flush(batch)
            if time.monotonic() - last_traffic > QUIET_PROBE_S:
                client.health()  # raises when the server is gone; the stream may just be quiet
                last_traffic = time.monotonic()

    def _flush(self, batch: RunBatch) -> None:
        if not batch.is_empty():
            for key, delta in batch.series.items():
                if len(delta) > COMPACT_ABOVE:
                    batch.series[key] = compact(delta, COMPACT_BUCKETS)
            self.post(RunChanged(self.run_id, batch))

    def _apply(self, event: Any, batch: RunBatch) -> bool:
        """Fold one stream event into ``batch``; True when the run was deleted."""
        kind, data = event.kind, event.data
        if kind == "run":
            batch.run = RunDetail.model_validate(data)
        elif kind == "rank":
            batch.ranks.append(RankInfo.model_validate(data))
        elif kind == "metrics":
            series = batch.series
            for p in data.get("points", ()):
                key = (p["name"], p["rank"])
                delta = series.get(key)
                if delta is None:
                    delta = series[key] = SeriesDelta(p["name"], int(p["rank"]))
                delta.steps.append(p.get("step"))
                delta.epochs.append(p.get("epoch"))
                delta.ts.append(p["t"])
                delta.values.append(p.get("value"))
            self.cursors["metrics"] = max(self.cursors["metrics"], int(data.get("cursor") or 0))
        elif kind == "metrics_summary":
            before = self.cursors["metrics"]
            self.cursors["metrics"] = max(before, int(data.get("cursor") or 0))
            sweeps = self._exact_points(batch, data.get("series", ()), before)
            for s in data.get("series", ()):
                name, rank = s["name"], int(s["rank"])
                if name in sweeps:
                    continue
                delta = batch.delta(name, rank)
                for i, t in enumerate(s["t"]):
                    add_bucket(delta, s["step"][i], s["epoch"][i], t, s["value"][i], s["min"][i], s["max"][i])
        elif kind == "logs":
            batch.lines.extend(LogLineOut.model_validate(line) for line in data.get("lines", ()))
            self.cursors["logs"] = max(self.cursors["logs"], int(data.get("cursor") or 0))
        elif kind == "events":
            batch.events.extend(EventOut.model_validate(e) for e in data.get("events", ()))
            self.cursors["events"] = max(self.cursors["events"], int(data.get("cursor") or 0))
        elif kind == "run_deleted":
            return True
        elif kind == "resync":
            raise _Resync()
        return False


def read_charts(
    client: Any, run_id: str, plan: HistoryPlan, points: int = CHART_POINTS, timeout: float | None = None
) -> tuple[RunBatch, list[int]]:
    """The chart history ``plan`` asks for (``series``, ``one_rank``, ``bands``: a request each,
    downsampled by the server), and the cursor of each read."""
    charts = RunBatch()
    cursors: list[int] = []
    reads: list[tuple[list[str] | None, int | None]] = []
    if plan.series is None or plan.series:
        reads.append((plan.series, None))
    if plan.one_rank:
        reads.append((plan.one_rank, plan.rank))
    for names, rank in reads:
        page = client.metrics(run_id, names, rank=rank, points=points, timeout=timeout)
        cursors.append(page.cursor)
        for m in page.series:
            charts.series[(m.name, m.rank)] = SeriesDelta(
                m.name, m.rank, list(m.step), list(m.epoch), list(m.t), list(m.value), m.min, m.max
            )
    if plan.bands:
        charts.bands = client.bands(run_id, plan.bands, points=BAND_POINTS)
        cursors.append(charts.bands.cursor)
    return charts, cursors


def fetch_history(
    client: MlbenchClient, run_id: str, plan: HistoryPlan, points: int = CHART_POINTS
) -> RunBatch:
    """Every point so far of what ``plan`` charts, downsampled (new charts, a rank on demand)."""
    return read_charts(client, run_id, plan, points)[0]
