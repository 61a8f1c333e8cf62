"""The store file: SQLite in WAL mode, its SQLAlchemy engine, schema preparation, the writer lock.

Every connection gets the same pragmas: WAL with ``synchronous=NORMAL`` keeps committed data
across a crash of the server process (``kill -9``); only an operating-system crash or power loss
can lose the last transactions. An advisory lock file (``<db>.lock``) keeps a second writer
process off the same store.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.pool import NullPool, QueuePool

from mlbench_tui.errors import StoreError

# Statements of every size up to this many stay compiled in a connection's statement cache
# (the writer's multi-row metric inserts, see ``writer.METRIC_CHUNK``).
STATEMENT_CACHE = 256


def default_db_path() -> Path:
    """Where the store lives: ``MLBENCH_DB``, else the settings file's ``store``, else the data dir."""
    from mlbench_tui.settings import load_settings

    return load_settings().store_path


def _on_connect(dbapi_conn: sqlite3.Connection, _record: Any) -> None:
    # Let SQLAlchemy emit BEGIN itself (pysqlite's implicit transactions break SAVEPOINT).
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.execute("PRAGMA foreign_keys=OFF")
    cur.execute("PRAGMA cache_size=-32000")
    cur.execute("PRAGMA temp_store=MEMORY")
    cur.close()


def _begin(conn: Connection) -> None:
    # BEGIN straight on the DB-API connection: Core's execution machinery costs more than the
    # statement itself for a small transaction.
    conn.connection.driver_connection.execute("BEGIN")  # type: ignore[union-attr]


def make_engine(path: Path, *, pool_size: int = 8) -> Engine:
    """A SQLAlchemy engine on ``path`` with WAL pragmas applied to every connection."""
    engine = create_engine(
        f"sqlite:///{path}",
        connect_args={"check_same_thread": False, "timeout": 30, "cached_statements": STATEMENT_CACHE},
        poolclass=QueuePool if pool_size else NullPool,
        pool_size=pool_size or 5,
        max_overflow=16,
    )
    event.listen(engine, "connect", _on_connect)
    event.listen(engine, "begin", _begin)
    return engine


def raw_connect(path: Path) -> sqlite3.Connection:
    """A plain ``sqlite3`` connection with the store's pragmas (migrations, checkpoints)."""
    conn = sqlite3.connect(str(path), timeout=30, isolation_level=None)
    _on_connect(conn, None)
    return conn


def prepare(path: Path) -> list[str]:
    """Create the store file if needed and bring its schema up to date; returns applied migrations."""
    from mlbench_tui.store import migrations  # the table models: only where a store is opened to write

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = raw_connect(path)
    except (OSError, sqlite3.Error) as exc:
        raise StoreError(f"cannot open store {path}: {exc}", hint="check --db / MLBENCH_DB") from exc
    try:
        return migrations.migrate(conn, str(path))
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{path} is not a usable mlbench store: {exc}") from exc
    finally:
        conn.close()


class StoreLocked(StoreError):
    """Another process already writes this store."""


class FileLock:
    """An exclusive advisory lock (``flock``) held for the writer's lifetime."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> None:
        import fcntl

        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            raise StoreLocked(
                f"store {self.path.with_suffix('')} is in use by another mlbench server",
                hint="use that server (mlbench finds it through its state file) or stop it",
            ) from exc
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
