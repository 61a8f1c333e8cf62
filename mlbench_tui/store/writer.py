"""The store's single writer: group commit, ack after commit, ids as cursors, change notifications.

Every write goes through one ``Writer`` that owns the only write connection. Requests are queued;
the writer drains as many as are waiting into one transaction (group commit), commits, and only
then resolves each request's future, so an acknowledged batch is on disk. The writer assigns row
ids and series ids itself, so ids are read cursors and live-stream positions without a round trip.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, Table, insert

from mlbench_tui.errors import Conflict, MlbenchError, NotFound, StoreError
from mlbench_tui.store.changes import Change, MetricChunk
from mlbench_tui.store.engine import BUSY_TIMEOUT_MS, WRITER, is_busy, storage_error
from mlbench_tui.store.linger import LINGER_MIN_RATE, LINGER_S, PEAK_GROUPS, ArrivalRate
from mlbench_tui.store.series import SeriesCatalog
from mlbench_tui.store.write_jobs import STOP, CallJob, IngestJob, Job, MetricJob, resolve
from mlbench_tui.store.write_rules import WriteRules

# A group transaction stops growing at this many rows or requests, to bound ack latency.
MAX_GROUP_ROWS = 50_000
MAX_GROUP_JOBS = 512

# Metric rows are inserted in multi-row VALUES statements of this many rows, and the rest of a
# group in one statement of exactly its size; each row binds its ``MetricChunk.FIELDS`` and the
# statement its first id. Statements of every size up to METRIC_CHUNK stay compiled in the
# connection's statement cache (``engine.STATEMENT_CACHE``).
METRIC_CHUNK = 128
METRIC_WIDTH = MetricChunk.WIDTH

# While another process holds the store's lock, a group retries this often for up to busy_timeout
# (the writer's connection never sleeps in SQLite's busy wait, which would stall the server's
# loop and every read it serves), then is answered that the store stayed locked.
LOCK_RETRY_S = 0.025


class _LockedElsewhere(Exception):
    """The group could not begin: another process holds the store's write lock (retry later)."""


def written_tables() -> dict[str, Table]:
    """The tables the writer inserts rows into, by what the rows are. Rows handed to it hold their
    columns in table order: metric rows ``("id", *MetricChunk.FIELDS)``, log and event rows all
    but the leading id, batch receipts and series whole."""
    from mlbench_tui.store import tables  # the models: only where a store is written

    return {
        "metrics": tables.Metric.__table__,  # type: ignore[attr-defined]
        "logs": tables.LogLine.__table__,  # type: ignore[attr-defined]
        "events": tables.Event.__table__,  # type: ignore[attr-defined]
        "batches": tables.BatchReceipt.__table__,  # type: ignore[attr-defined]
        "series": tables.Series.__table__,  # type: ignore[attr-defined]
    }


def _chunk_sql(metrics: Table, rows: int) -> str:
    """``INSERT INTO metrics ... VALUES`` of ``rows`` rows; ?1 is the first id, the rest count up."""
    values = []
    for i in range(rows):
        first = 2 + METRIC_WIDTH * i
        row_id = "?1" if i == 0 else f"?1+{i}"
        values.append(f"({row_id},{','.join(f'?{first + k}' for k in range(METRIC_WIDTH))})")
    columns = ", ".join(c.name for c in metrics.columns)
    return f"INSERT INTO {metrics.name} ({columns}) VALUES {','.join(values)}"


@dataclass
class _Group:
    """What a group transaction changed in the writer's memory, to undo it on rollback."""

    next_id: dict[str, int]
    runs_changed: list[tuple[str, bool]] = field(default_factory=list)  # (run id, added) in order
    series_written: list[tuple[int, str, str]] = field(default_factory=list)  # (id, run id, name)
    metric_params: list[Any] = field(default_factory=list)
    metric_start: int = 0
    undo_rules: list[Callable[[], None]] = field(default_factory=list)  # in the order applied


class Writer:
    """The single writer thread: group commit, ack after commit, change notifications."""

    def __init__(self, engine: Engine, known_runs: Iterable[str], rules: WriteRules | None = None) -> None:
        self._engine = engine
        self.rules = rules  # None: store whatever a valid token sends (the benchmark's "before")
        self._path = Path(engine.url.database or "")
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._runs: set[str] = set(known_runs)
        self._next_id: dict[str, int] = {}
        self._insert_sql: dict[str, str] = {}
        self._chunk_sql: dict[int, str] = {}  # rows -> INSERT of that many rows, built on first use
        self.listeners: list[Callable[[list[Change]], None]] = []
        self._conn = engine.connect()
        self._conn.exec_driver_sql("PRAGMA wal_autocheckpoint=0")  # the store's Checkpointer does it
        self._conn.commit()
        # The DB-API connection under ``_conn``, for the small per-batch receipt statement (the
        # bulk rows go through Core). Same connection, so same transaction.
        raw = self._conn.connection.driver_connection
        assert isinstance(raw, sqlite3.Connection)
        self._raw: sqlite3.Connection = raw
        self._tables = written_tables()
        for kind, written in self._tables.items():
            self._insert_sql[kind] = str(insert(written).compile(dialect=engine.dialect))
        receipt = insert(self._tables["batches"]).prefix_with("OR IGNORE")  # a retried batch: no row
        self._receipt_sql = str(receipt.compile(dialect=engine.dialect))
        for kind in ("metrics", "logs", "events"):
            top = self._conn.exec_driver_sql(f"SELECT max(id) FROM {self._tables[kind].name}").scalar()
            self._next_id[kind] = int(top or 0) + 1
        self.series = SeriesCatalog(self._conn.exec_driver_sql("SELECT id, run_id, name FROM series"))
        self._conn.rollback()
        self._conn.info[WRITER] = True  # from here on its transactions write: BEGIN IMMEDIATE
        self._raw.execute("PRAGMA busy_timeout=0")  # a held lock is waited for here (LOCK_RETRY_S)
        self.write_lock = threading.Lock()  # held while a group is written: holding it pauses writes
        self._inline_loop: asyncio.AbstractEventLoop | None = None
        self._inline_thread: int | None = None
        self._pending: collections.deque[Job] = collections.deque()
        self._drain_scheduled = False
        self._arrivals = ArrivalRate()  # of the loop's requests: a busy server lingers
        self._groups: collections.deque[int] = collections.deque(maxlen=PEAK_GROUPS)  # recent sizes
        self._lingering: asyncio.TimerHandle | None = None
        self._locked_since: float | None = None  # loop time the loop's writes began to wait on a lock
        self._thread = threading.Thread(target=self._loop, name="mlbench-store-writer", daemon=True)
        self._closed = False
        self._thread.start()

    # ---- submission (any thread)

    def attach_loop(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """Run async jobs of ``loop`` inside that loop (None: back to the writer thread).

        A server's requests then commit in its event loop: every request that arrived in one loop
        iteration is written in one transaction, with no thread hand-off per request. Jobs from
        other threads still go through the writer thread; ``write_lock`` keeps the two apart.
        """
        self._inline_loop = loop
        self._inline_thread = threading.get_ident() if loop is not None else None

    def ingest_async(
        self,
        kind: str,
        run_id: str,
        rank: int,
        session: str,
        seq: int,
        rows: list[tuple[Any, ...]],
        by_run_token: bool = False,
    ) -> asyncio.Future[Any]:
        """Queue a log or event batch from a loop; resolves to ``(accepted, duplicate)`` after commit."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        job = IngestJob(fut, loop, kind, run_id, rank, session, seq, rows, by_run_token)
        self._submit_async(job, loop)
        return fut

    def ingest_metrics_async(
        self, run_id: str, rank: int, session: str, seq: int, params: list[Any], by_run_token: bool = False
    ) -> asyncio.Future[Any]:
        """Queue a metric batch (``MetricChunk`` layout); resolves to ``(accepted, duplicate)``."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        self._submit_async(MetricJob(fut, loop, run_id, rank, session, seq, params, by_run_token), loop)
        return fut

    def _submit_async(self, job: Job, loop: asyncio.AbstractEventLoop) -> None:
        if loop is not self._inline_loop or self._closed:
            self._put(job)
            return
        self._pending.append(job)
        self._arrivals.add(loop.time())
        self._schedule_drain(loop, linger=True)
        if self._lingering is not None and len(self._pending) >= max(self._groups, default=MAX_GROUP_JOBS):
            self._lingering.cancel()  # as large as the recent groups: write it now
            self._lingering = None
            loop.call_soon(self._drain_inline)

    def _schedule_drain(self, loop: asyncio.AbstractEventLoop, *, linger: bool = False) -> None:
        if not self._drain_scheduled:
            self._drain_scheduled = True
            if linger and self._busy():  # the loop reads what arrives meanwhile
                self._lingering = loop.call_later(LINGER_S, self._drain_inline)
            else:
                loop.call_soon(self._drain_inline)

    def _busy(self) -> bool:
        return self._arrivals.rate >= LINGER_MIN_RATE

    def _drain_inline(self) -> None:
        """Write and commit the loop's pending requests as one group transaction, in the loop.

        Requests that arrive meanwhile wait in their sockets and form the next group. The commit
        runs here too: a thread would have to wait for the busy loop's GIL to hand it back.
        """
        self._drain_scheduled = False
        self._lingering = None
        loop = self._inline_loop
        if not self._pending or loop is None:
            return
        if not self.write_lock.acquire(blocking=False):  # the writer thread is busy with a sync job
            loop.call_later(0.001, self._schedule_drain, loop)
            return
        try:
            jobs: list[Job] = []
            rows = 0
            while self._pending and rows < MAX_GROUP_ROWS and len(jobs) < MAX_GROUP_JOBS:
                job = self._pending.popleft()
                jobs.append(job)
                rows += job.size()
            self._groups.append(len(jobs))
            try:
                self._run_group(jobs, locked_retry=self._lock_wait_left(loop))
            except _LockedElsewhere:
                self._pending.extendleft(reversed(jobs))  # first in line, as they came
                self._drain_scheduled = True  # arrivals meanwhile do not retry sooner
                loop.call_later(LOCK_RETRY_S, self._drain_inline)
                return
            self._locked_since = None
        finally:
            self.write_lock.release()
        if self._pending:
            self._schedule_drain(loop)

    def _lock_wait_left(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Whether the loop's writes may still wait for a lock another process holds: they wait
        as long as SQLite's busy_timeout would, then answer that the store stayed locked."""
        now = loop.time()
        if self._locked_since is None:
            self._locked_since = now
        return now - self._locked_since < BUSY_TIMEOUT_MS / 1000

    async def drain(self) -> None:
        """Wait until the loop's pending writes are committed (server shutdown)."""
        while self._pending:
            await asyncio.sleep(0.005)

    def ingest(
        self, kind: str, run_id: str, rank: int, session: str, seq: int, rows: list[tuple[Any, ...]]
    ) -> tuple[int, bool]:
        """Store one batch and wait for its commit (threads); returns ``(accepted, duplicate)``.

        Metric rows are ``(name, step, epoch, t, value)``; log and event rows are full table rows
        without the id.
        """
        result: tuple[int, bool] = self.submit(kind, run_id, rank, session, seq, rows).result()
        return result

    def submit(
        self, kind: str, run_id: str, rank: int, session: str, seq: int, rows: list[tuple[Any, ...]]
    ) -> concurrent.futures.Future[Any]:
        """Queue one batch (rows as ``ingest`` takes them) from a thread without waiting; the
        future resolves to ``(accepted, duplicate)`` after commit. Many queued at once share
        group transactions (a spool import)."""
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        job: Job
        if kind == "metrics":
            if run_id not in self._runs:  # before handing out series ids for it
                raise NotFound(f"run {run_id} not found")
            job = MetricJob(fut, None, run_id, rank, session, seq, self.series.params(run_id, rank, rows))
        else:
            job = IngestJob(fut, None, kind, run_id, rank, session, seq, rows)
        self._put(job)
        return fut

    def submit_metrics(
        self, run_id: str, rank: int, session: str, seq: int, params: list[Any]
    ) -> concurrent.futures.Future[Any]:
        """``submit`` for a metric batch already in the ``MetricChunk`` layout (series ids from
        ``series``, which hands them out only for a run the writer knows)."""
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._put(MetricJob(fut, None, run_id, rank, session, seq, params))
        return fut

    def run_ended(self, run_id: str) -> bool:
        """Whether ``run_id`` has ended (as of the last applied write); False without write rules."""
        return self.rules is not None and self.rules.ended(run_id)

    def call(self, fn: Callable[[Connection], tuple[Any, list[Change]]]) -> Any:
        """Run ``fn(conn)`` in the writer's transaction and return its result (blocking)."""
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._put(CallJob(fut, None, fn))
        return fut.result()

    def call_async(self, fn: Callable[[Connection], tuple[Any, list[Change]]]) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        self._submit_async(CallJob(fut, loop, fn), loop)
        return fut

    def _put(self, job: Job) -> None:
        if self._closed:
            raise StoreError("the store is closed")
        self._queue.put(job)

    def next_id(self, kind: str) -> int:
        """The id the next stored row of ``kind`` will get (a store-wide high-water mark)."""
        return self._next_id[kind]

    def has_run(self, run_id: str) -> bool:
        return run_id in self._runs

    def close(self, timeout: float = 10.0) -> None:
        """Finish queued work, then stop the thread and close the connection."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(STOP)
        self._thread.join(timeout)
        with contextlib.suppress(Exception):
            self._conn.info.pop(WRITER, None)  # back in the pool it reads like any other
            self._conn.close()

    # ---- writer thread

    def _loop(self) -> None:
        stop = False
        while not stop:
            job = self._queue.get()
            if job is STOP:
                break
            jobs = [job]
            rows = job.size()
            while rows < MAX_GROUP_ROWS and len(jobs) < MAX_GROUP_JOBS:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is STOP:
                    stop = True
                    break
                jobs.append(nxt)
                rows += nxt.size()
            with self.write_lock:
                self._run_group_waiting(jobs)

    def _run_group_waiting(self, jobs: list[Job]) -> None:
        """``_run_group`` in the writer thread, which may sleep while another process holds the lock."""
        started = time.monotonic()
        while True:
            try:
                self._run_group(jobs, locked_retry=time.monotonic() - started < BUSY_TIMEOUT_MS / 1000)
                return
            except _LockedElsewhere:
                time.sleep(LOCK_RETRY_S)

    def _run_group(self, jobs: list[Job], *, locked_retry: bool = False) -> None:
        """Write ``jobs`` in one transaction and resolve them; with ``locked_retry``, a group that
        cannot begin because another process holds the lock raises ``_LockedElsewhere`` instead
        (without it, and in the one-per-transaction retries, such a group is answered at once)."""
        group = self._new_group()
        results: list[tuple[Any, BaseException | None]] = []
        changes: list[Change] = []
        try:
            with self._conn.begin():
                for job in jobs:
                    results.append(self._apply(job, changes, group))
                self._flush_metrics(group)
        except Exception as exc:
            self._undo(group)
            if locked_retry and is_busy(exc):
                raise _LockedElsewhere from exc
            if len(jobs) == 1:
                failure = storage_error(exc, self._path) or exc  # a full disk says so, not "500"
                resolve(jobs, [(None, failure)], self._inline_thread)
                return
            for job in jobs:  # isolate the failing request: retry one per transaction
                self._run_group([job])
            return
        self._committed(changes)
        resolve(jobs, results, self._inline_thread)
        self._notify(changes)

    def _new_group(self) -> _Group:
        return _Group(dict(self._next_id))

    def _undo(self, group: _Group) -> None:
        """Forget a rolled-back group: ids, runs, and series rows it would have written."""
        self._next_id = group.next_id
        for run_id, added in reversed(group.runs_changed):
            if added:
                self._runs.discard(run_id)
            else:
                self._runs.add(run_id)
        group.runs_changed = []
        for undo in reversed(group.undo_rules):
            undo()
        group.undo_rules = []
        group.metric_params = []
        if group.series_written:
            self.series.put_back(group.series_written)
            group.series_written = []

    def _committed(self, changes: list[Change]) -> None:
        for change in changes:
            if change.kind == "run_deleted":
                self.series.forget(change.run_id)

    def _notify(self, changes: list[Change]) -> None:
        if changes:
            for listener in list(self.listeners):
                with contextlib.suppress(Exception):
                    listener(changes)

    def _flush_metrics(self, group: _Group) -> None:
        """Insert the group's buffered metric rows: an ``executemany`` over ``METRIC_CHUNK``-row
        VALUES statements, then one statement for the rest (one statement for a typical group)."""
        params = group.metric_params
        if not params:
            return
        group.metric_params = []
        n = len(params) // METRIC_WIDTH
        start = group.metric_start
        full = n // METRIC_CHUNK
        if full:
            width = METRIC_CHUNK * METRIC_WIDTH
            chunks = [(start + k * METRIC_CHUNK, *params[k * width : (k + 1) * width]) for k in range(full)]
            self._conn.exec_driver_sql(self._metric_sql(METRIC_CHUNK), chunks)
        rest = n - full * METRIC_CHUNK
        if rest:
            done = full * METRIC_CHUNK
            self._conn.exec_driver_sql(self._metric_sql(rest), (start + done, *params[done * METRIC_WIDTH :]))

    def _metric_sql(self, rows: int) -> str:
        sql = self._chunk_sql.get(rows)
        if sql is None:
            sql = self._chunk_sql[rows] = _chunk_sql(self._tables["metrics"], rows)
        return sql

    def _apply(self, job: Job, changes: list[Change], group: _Group) -> tuple[Any, BaseException | None]:
        if isinstance(job, MetricJob):
            return self._apply_metrics(job, changes, group)
        self._flush_metrics(group)  # keep metric rows ahead of anything that may delete them
        conn = self._conn
        if isinstance(job, IngestJob):
            if job.run_id not in self._runs:
                return None, NotFound(f"run {job.run_id} not found")
            refused = self._refusal(job.run_id, job.rank, job.session, job.by_run_token)
            if refused is not None:
                return None, refused
            receipt = self._raw.execute(
                self._receipt_sql, (job.run_id, job.rank, job.kind, job.session, job.seq)
            )
            if receipt.rowcount == 0:
                return (0, True), None
            start = self._next_id[job.kind]
            rows = [(start + i, *row) for i, row in enumerate(job.rows)]
            self._next_id[job.kind] = start + len(rows)
            conn.exec_driver_sql(self._insert_sql[job.kind], rows)
            if job.kind == "events" and self.rules is not None:
                undo = self.rules.events_stored(job.run_id, job.rank, job.rows)
                if undo is not None:
                    group.undo_rules.append(undo)
            changes.append(Change(job.kind, job.run_id, rows))
            return (len(rows), False), None
        assert isinstance(job, CallJob) and job.fn is not None
        try:
            with conn.begin_nested():
                result, job_changes = job.fn(conn)
        except MlbenchError as exc:
            return None, exc
        for change in job_changes:
            if change.kind == "run" and change.run_id not in self._runs:
                self._runs.add(change.run_id)
                group.runs_changed.append((change.run_id, True))
            elif change.kind == "run_deleted" and change.run_id in self._runs:
                self._runs.discard(change.run_id)
                group.runs_changed.append((change.run_id, False))
            if self.rules is not None:
                self._note_run(change, group)
        changes.extend(job_changes)
        return result, None

    def _note_run(self, change: Change, group: _Group) -> None:
        """Keep the write rules' facts of a run in step with a run row just written."""
        assert self.rules is not None
        if change.kind == "run_deleted":
            group.undo_rules.append(self.rules.run_deleted(change.run_id))
        elif change.kind == "run" and change.rows:
            detail = change.rows[0][0]  # the RunDetail the store operation returned
            group.undo_rules.append(self.rules.run_changed(change.run_id, detail.workers, detail.state.value))

    def _refusal(self, run_id: str, rank: int, session: str, by_run_token: bool) -> Conflict | None:
        if self.rules is None:
            return None
        return self.rules.refusal(run_id, rank, session, by_run_token, self._session_wrote)

    def _session_wrote(self, run_id: str, rank: int, session: str) -> bool:
        found = self._raw.execute(
            "SELECT 1 FROM batches WHERE run_id = ? AND rank = ? AND session = ? LIMIT 1",
            (run_id, rank, session),
        )
        return found.fetchone() is not None

    def _apply_metrics(
        self, job: MetricJob, changes: list[Change], group: _Group
    ) -> tuple[Any, BaseException | None]:
        if job.run_id not in self._runs:
            return None, NotFound(f"run {job.run_id} not found")
        refused = self._refusal(job.run_id, job.rank, job.session, job.by_run_token)
        if refused is not None:
            return None, refused
        key = (job.run_id, job.rank, "metrics", job.session, job.seq)
        receipt = self._raw.execute(self._receipt_sql, key)
        if receipt.rowcount == 0:
            return (0, True), None
        params = job.params
        if self.series.has_unwritten(job.run_id):  # a name of this run seen for the first time
            self._write_series(job.run_id, params[::METRIC_WIDTH], group)
        n = len(params) // METRIC_WIDTH
        start = self._next_id["metrics"]
        self._next_id["metrics"] = start + n
        if not group.metric_params:
            group.metric_start = start
        group.metric_params += params
        names = self.series.names(job.run_id)
        changes.append(Change("metrics", job.run_id, metrics=MetricChunk(start, job.run_id, params, names)))
        return (n, False), None

    def _write_series(self, run_id: str, sids: list[int], group: _Group) -> None:
        for sid, name in self.series.take_unwritten(run_id, sids):
            group.series_written.append((sid, run_id, name))
            self._raw.execute(self._insert_sql["series"], (sid, run_id, name))
