"""``Store``: one metric store file, its single writer, its checkpointer and its read connections.

The server owns one ``Store``; tests and tools may open one directly. Writes (runs, ranks,
ingest batches) go through the ``Writer``; reads use pooled connections, which WAL lets run
beside the writer; the ``Checkpointer`` keeps the WAL bounded. Run write tokens are generated
here and kept only as sha256 hashes.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import orjson
from sqlalchemy import Connection

from mlbench_tui.errors import Conflict, NotFound, StoreError, UsageError
from mlbench_tui.lifecycle import RunState
from mlbench_tui.owners import RunOwner
from mlbench_tui.store import queries
from mlbench_tui.store.api_models import (
    BatchAck,
    MetricName,
    RankInfo,
    RankUpdate,
    RunCreate,
    RunDetail,
    RunUpdate,
)
from mlbench_tui.store.changes import Change
from mlbench_tui.store.checkpointer import Checkpointer
from mlbench_tui.store.engine import (
    FileLock,
    StoreReadOnly,
    default_db_path,
    make_engine,
    prepare,
    read_only_error,
    writable,
)
from mlbench_tui.store.write_rules import WriteRules, rank_out_of_range
from mlbench_tui.store.writer import Writer

T = TypeVar("T")

_TERMINAL = {"succeeded", "failed", "cancelled"}


def new_run_id() -> str:
    """A DNS-1123-safe run id (usable in Kubernetes object names): ``r-<12 hex>``."""
    return "r-" + secrets.token_hex(6)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def dumps_json(value: Any) -> str:
    """JSON text for a stored document; integers beyond 64 bits are refused (``UsageError``)."""
    try:
        return orjson.dumps(value).decode()
    except (orjson.JSONEncodeError, TypeError) as exc:
        raise UsageError(f"value cannot be stored as JSON: {exc}") from None


def refuse_if_under_way(conn: Connection, name: str) -> None:
    """Raise ``Conflict`` (``run_under_way``) when a run named ``name`` has not ended and its
    owner still lives: what makes two applies of one spec run each run once."""
    rows = conn.exec_driver_sql(
        "SELECT id, state, owner FROM runs"
        " WHERE name = ? AND state NOT IN ('succeeded', 'failed', 'cancelled')",
        (name,),
    ).fetchall()
    for run_id, state, owner_json in rows:
        if not owner_json:
            continue
        owner = RunOwner.model_validate_json(owner_json)
        if owner.alive():
            raise Conflict(
                f"{name} is already under way as run {run_id} ({state}), launched by {owner}",
                reason="run_under_way",
                hint=f"watch it with: mlbench status {run_id}   (or stop it: mlbench cancel {run_id})",
            )


def _check_readable(path: Path) -> None:
    """Refuse to read a store this code would first have to upgrade (it cannot, read-only)."""
    import sqlite3

    from mlbench_tui.store.engine import read_only_uri
    from mlbench_tui.store.migrations import MIGRATIONS

    try:
        with contextlib.closing(sqlite3.connect(read_only_uri(path), uri=True)) as conn:
            done = {row[0] for row in conn.execute("SELECT name FROM schema_migrations")}
    except sqlite3.Error as exc:
        raise StoreError(f"cannot read store {path}: {exc}") from exc
    missing = [name for name, _ in MIGRATIONS if name not in done]
    if missing:
        raise StoreError(
            f"store {path} cannot be written here and was made by an older mlbench (it lacks "
            f"{', '.join(missing)}), so it cannot be upgraded to be read",
            hint="copy it to a writable folder and point MLBENCH_DB (or --db) at the copy",
        )


class Store:
    """A metric store file opened for reading and (by default) writing; its writer enforces the
    write rules (``write_rules``) unless ``checks`` is False (the ingest benchmark's "before")."""

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        write: bool = True,
        pool_size: int = 8,
        checks: bool = True,
    ) -> None:
        self.path = Path(path).expanduser().resolve() if path else default_db_path().resolve()
        self._lock: FileLock | None = None
        self.read_only: StoreReadOnly | None = None if write else read_only_error(self.path, "opened to read")
        if write:
            if not writable(self.path):
                raise read_only_error(self.path)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._lock = FileLock(self.path.with_name(self.path.name + ".lock"))
            self._lock.acquire()
        try:
            self.migrations_applied = prepare(self.path) if write else []
            if not write:
                _check_readable(self.path)
            self.engine = make_engine(self.path, pool_size=pool_size, read_only=not write)
            self._token_hashes: dict[str, str] = {}
            self._name_stats: dict[str, tuple[int, queries.NameStats]] = {}
            self._name_lock = threading.Lock()
            self.writer: Writer | None = None
            self.checkpointer: Checkpointer | None = None
            if write:
                with self.engine.connect() as conn:
                    ids = [r[0] for r in conn.exec_driver_sql("SELECT id FROM runs")]
                    rules = WriteRules.load(conn) if checks else None
                self.writer = Writer(self.engine, ids, rules)
                self.writer.listeners.append(self._forget_deleted)
                self.checkpointer = Checkpointer(self.path, self.writer.write_lock)
        except BaseException:
            if self._lock:
                self._lock.release()
            raise

    @classmethod
    def for_server(cls, path: str | Path | None = None) -> Store:
        """The store as a server opens it: for writing, or for reading only where its folder or
        file cannot be written (a read-only mount): every read works, writes answer why not."""
        resolved = Path(path).expanduser().resolve() if path else default_db_path().resolve()
        if resolved.exists() and not writable(resolved):
            store = cls(resolved, write=False)
            store.read_only = read_only_error(resolved)
            return store
        return cls(resolved)

    # ---- lifecycle

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.engine.dispose()
        if self.checkpointer is not None:  # last: it folds the WAL in once nothing else writes
            self.checkpointer.close()
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def require_writer(self) -> Writer:
        """The writer, or the reason this store cannot be written (``StoreReadOnly``)."""
        if self.writer is None:
            raise self.read_only or read_only_error(self.path, "opened to read")
        return self.writer

    def read(self, fn: Callable[[Connection], T]) -> T:
        """Run a read function (see ``queries``) on a pooled connection."""
        with self.engine.connect() as conn:
            return fn(conn)

    # ---- tokens

    def check_run_token(self, run_id: str, token: str) -> bool | None:
        """True if ``token`` is the run's write token, False if not, None if the run does not exist."""
        stored = self._token_hashes.get(run_id)
        if stored is None:
            stored = self.read(lambda c: queries.token_hash(c, run_id))
            if stored is None:
                return None
            self._token_hashes[run_id] = stored
        return hmac.compare_digest(hash_token(token), stored)

    def _forget_deleted(self, changes: list[Change]) -> None:
        for change in changes:
            if change.kind == "run_deleted":
                self._token_hashes.pop(change.run_id, None)
                with self._name_lock:
                    self._name_stats.pop(change.run_id, None)

    def metric_names(self, run_id: str) -> list[MetricName]:
        """Metric names of a run, kept up to date incrementally (cheap to poll on big runs)."""
        with self._name_lock:
            after, stats = self._name_stats.get(run_id, (0, {}))
            stats = {k: list(v) for k, v in stats.items()}
        with self.engine.connect() as conn:
            top = queries.metric_name_stats(conn, run_id, after, stats)
            names = queries.metric_names(conn, run_id, stats)
        with self._name_lock:
            current = self._name_stats.get(run_id)
            if current is None or current[0] < top:
                self._name_stats[run_id] = (top, stats)
        return names

    def recent_metrics(self, since: int, window: int = 200_000) -> bool:
        """True when fewer than ``window`` metric rows (of all runs) are newer than ``since``."""
        return self.writer is not None and since > 0 and self.writer.next_id("metrics") - since < window

    # ---- write operations (each one transaction in the writer)

    @staticmethod
    def op_create_run(req: RunCreate) -> tuple[Callable[[Connection], tuple[Any, list[Change]]], str]:
        """The writer function that creates a run, and the new write token (returned once)."""
        token = secrets.token_urlsafe(32)
        plan_json, labels_json = dumps_json(req.plan), dumps_json(req.labels)
        goal_json = None if req.goal is None else dumps_json(req.goal.model_dump(mode="json"))
        owner_json = None if req.owner is None else req.owner.model_dump_json()

        def fn(conn: Connection) -> tuple[Any, list[Change]]:
            if req.exclusive:
                refuse_if_under_way(conn, req.name)
            now = time.time()
            run_id = new_run_id()
            while queries.run_exists(conn, run_id):
                run_id = new_run_id()
            conn.exec_driver_sql(
                "INSERT INTO runs (id, name, spec_name, spec_hash, spec_text, plan, task, backend, workers,"
                " repeat, goal, state, target_kind, handle, created, labels, token_hash, updated, owner)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?, ?, ?, ?)",
                (
                    run_id,
                    req.name,
                    req.spec_name,
                    req.spec_hash,
                    req.spec_text,
                    plan_json,
                    req.task,
                    req.backend,
                    req.workers,
                    req.repeat,
                    goal_json,
                    req.target_kind,
                    req.handle,
                    now,
                    labels_json,
                    hash_token(token),
                    now,
                    owner_json,
                ),
            )
            conn.exec_driver_sql(
                "INSERT INTO ranks (run_id, rank, state, updated) VALUES (?, ?, 'pending', ?)",
                [(run_id, r, now) for r in range(req.workers)],
            )
            detail = queries.get_run(conn, run_id)
            return detail, [Change("run", run_id, [(detail,)])]

        return fn, token

    @staticmethod
    def op_update_run(run_id: str, upd: RunUpdate) -> Callable[[Connection], tuple[Any, list[Change]]]:
        data = upd.model_dump(exclude_unset=True)
        documents: dict[str, str | None] = {}
        if "result" in data:
            documents["result"] = None if data["result"] is None else dumps_json(data["result"])
        if "labels" in data:  # null clears the labels
            documents["labels"] = dumps_json(data["labels"] or {})
        if "launch" in data:
            documents["launch"] = None if data["launch"] is None else dumps_json(data["launch"])

        def fn(conn: Connection) -> tuple[Any, list[Change]]:
            current = queries.get_run(conn, run_id)
            if current is None:
                raise NotFound(f"run {run_id} not found")
            fields: dict[str, Any] = dict(documents)
            now = time.time()
            state = upd.state.value if data.get("state") is not None and upd.state else None
            if state is not None and current.state is RunState.CANCELLED and state not in _TERMINAL:
                state = None  # a cancel that came before its launcher's "running" stays a cancel
            if state is not None:
                fields["state"] = state
                if state == "running" and current.started is None and "started" not in data:
                    fields["started"] = now
                if state in _TERMINAL and current.finished is None and "finished" not in data:
                    fields["finished"] = now
            for key in ("started", "finished"):
                if key in data:
                    value = data[key]
                    fields[key] = value.timestamp() if value is not None else None
            for key in ("handle", "error", "spool"):
                if key in data:
                    fields[key] = data[key]
            if fields:
                fields["updated"] = now
                assignments = ", ".join(f"{k} = ?" for k in fields)
                conn.exec_driver_sql(
                    f"UPDATE runs SET {assignments} WHERE id = ?", (*fields.values(), run_id)
                )
            detail = queries.get_run(conn, run_id)
            return detail, [Change("run", run_id, [(detail,)])]

        return fn

    @staticmethod
    def op_delete_run(run_id: str) -> Callable[[Connection], tuple[Any, list[Change]]]:
        def fn(conn: Connection) -> tuple[Any, list[Change]]:
            if not queries.run_exists(conn, run_id):
                raise NotFound(f"run {run_id} not found")
            conn.exec_driver_sql(
                "DELETE FROM metrics INDEXED BY ix_metrics_series_step"
                " WHERE series IN (SELECT id FROM series WHERE run_id = ?)",
                (run_id,),
            )
            for table in ("series", "logs", "events", "ranks", "batches", "runs"):
                column = "id" if table == "runs" else "run_id"
                conn.exec_driver_sql(f"DELETE FROM {table} WHERE {column} = ?", (run_id,))
            return None, [Change("run_deleted", run_id)]

        return fn

    @staticmethod
    def op_update_rank(
        run_id: str, rank: int, upd: RankUpdate
    ) -> Callable[[Connection], tuple[Any, list[Change]]]:
        many = Store.op_update_ranks(run_id, [(rank, upd)])

        def fn(conn: Connection) -> tuple[Any, list[Change]]:
            infos, changes = many(conn)
            return infos[0], changes

        return fn

    @staticmethod
    def op_update_ranks(
        run_id: str, updates: Sequence[tuple[int, RankUpdate]]
    ) -> Callable[[Connection], tuple[Any, list[Change]]]:
        """Set the states of many ranks in one transaction; the answer lists each rank once."""

        def fn(conn: Connection) -> tuple[Any, list[Change]]:
            row = conn.exec_driver_sql("SELECT workers FROM runs WHERE id = ?", (run_id,)).first()
            if row is None:
                raise NotFound(f"run {run_id} not found")
            outside = [rank for rank, _ in updates if rank >= row[0]]
            if outside:
                raise rank_out_of_range(run_id, outside[0], int(row[0]))
            now = time.time()
            for rank, upd in updates:
                data = upd.model_dump(exclude_unset=True)
                if data.get("state") is not None:
                    data["state"] = upd.state.value if upd.state else None
                elif "state" in data:
                    del data["state"]
                data["updated"] = now
                conn.exec_driver_sql(
                    "INSERT OR IGNORE INTO ranks (run_id, rank, state, updated) VALUES (?, ?, 'pending', ?)",
                    (run_id, rank, now),
                )
                assignments = ", ".join(f"{k} = ?" for k in data)
                conn.exec_driver_sql(
                    f"UPDATE ranks SET {assignments} WHERE run_id = ? AND rank = ?",
                    (*data.values(), run_id, rank),
                )
            wanted = sorted({rank for rank, _ in updates})
            rows = conn.exec_driver_sql(
                f"SELECT {queries.RANK_COLUMNS} FROM ranks WHERE run_id = ?"
                " AND rank IN (SELECT value FROM json_each(?)) ORDER BY rank",
                (run_id, orjson.dumps(wanted).decode()),
            ).fetchall()
            infos = [queries.rank_info(row) for row in rows]
            return infos, [Change("rank", run_id, [(info,)]) for info in infos]

        return fn

    # ---- blocking conveniences (threads, tests, tools)

    def create_run(self, req: RunCreate) -> tuple[RunDetail, str]:
        fn, token = self.op_create_run(req)
        detail: RunDetail = self.require_writer().call(fn)
        return detail, token

    def update_run(self, run_id: str, upd: RunUpdate) -> RunDetail:
        detail: RunDetail = self.require_writer().call(self.op_update_run(run_id, upd))
        return detail

    def delete_run(self, run_id: str) -> None:
        self.require_writer().call(self.op_delete_run(run_id))

    def update_rank(self, run_id: str, rank: int, upd: RankUpdate) -> RankInfo:
        info: RankInfo = self.require_writer().call(self.op_update_rank(run_id, rank, upd))
        return info

    def ingest_metrics(
        self, run_id: str, rank: int, seq: int, rows: list[tuple[Any, ...]], session: str = ""
    ) -> BatchAck:
        """Store metric rows ``(name, step, epoch, t, value)`` of one batch (blocking until committed)."""
        accepted, duplicate = self.require_writer().ingest("metrics", run_id, rank, session, seq, rows)
        return BatchAck(accepted=accepted, duplicate=duplicate)

    def get_run(self, run_id: str) -> RunDetail:
        detail = self.read(lambda c: queries.get_run(c, run_id))
        if detail is None:
            raise NotFound(f"run {run_id} not found")
        return detail
