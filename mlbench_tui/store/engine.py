"""The store file: SQLite in WAL mode, its SQLAlchemy engine, schema preparation, the writer lock.

Every connection gets the same pragmas: WAL with ``synchronous=NORMAL`` keeps committed data
across a crash of the server process (``kill -9``); only an operating-system crash or power loss
can lose the last transactions. An advisory lock file (``<db>.lock``) keeps a second writer
process off the same store.
"""

from __future__ import annotations

import contextlib
import errno
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
BUSY_TIMEOUT_MS = 30_000  # the longest any statement waits for another process's lock


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
    cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    cur.execute("PRAGMA foreign_keys=OFF")
    cur.execute("PRAGMA cache_size=-32000")
    cur.execute("PRAGMA temp_store=MEMORY")
    cur.close()


WRITER = "mlbench_writer"  # a connection's ``info`` key: its transactions take the write lock first


def _begin(conn: Connection) -> None:
    # BEGIN straight on the DB-API connection: Core's execution machinery costs more than the
    # statement itself for a small transaction. The writer's transactions begin IMMEDIATE: a
    # deferred one that has read and then writes is refused at once while another process holds
    # the lock (SQLite skips the busy handler on that upgrade), instead of waiting busy_timeout.
    verb = "BEGIN IMMEDIATE" if conn.info.get(WRITER) else "BEGIN"
    conn.connection.driver_connection.execute(verb)  # type: ignore[union-attr]


def _on_connect_read_only(dbapi_conn: sqlite3.Connection, _record: Any) -> None:
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    cur.execute("PRAGMA cache_size=-32000")
    cur.execute("PRAGMA temp_store=MEMORY")
    cur.close()


def read_only_uri(path: Path) -> str:
    """The SQLite URI that reads ``path`` without writing anything beside it: ``mode=ro`` (which
    reads a WAL beside the file, kept by a writer elsewhere), or ``immutable=1`` where SQLite
    cannot open it so (a read-only folder without the WAL's shared-memory file: nothing writes it)."""
    uri = f"{path.resolve().as_uri()}?mode=ro"
    try:
        with contextlib.closing(sqlite3.connect(uri, uri=True)) as probe:
            probe.execute("SELECT 1 FROM sqlite_master LIMIT 1").close()
    except sqlite3.OperationalError:
        wal = path.with_name(path.name + "-wal")
        if not wal.exists() and not os.access(path.parent, os.W_OK):
            return f"{path.resolve().as_uri()}?immutable=1"
    return uri


def make_engine(path: Path, *, pool_size: int = 8, read_only: bool = False) -> Engine:
    """A SQLAlchemy engine on ``path`` with WAL pragmas applied to every connection; with
    ``read_only`` it never writes the file or creates anything beside it (``read_only_uri``)."""
    pool: dict[str, Any] = {
        "poolclass": QueuePool if pool_size else NullPool,
        "pool_size": pool_size or 5,
        "max_overflow": 16,
    }
    if read_only:
        uri = read_only_uri(path)

        def connect() -> sqlite3.Connection:
            return sqlite3.connect(
                uri, uri=True, check_same_thread=False, timeout=30, cached_statements=STATEMENT_CACHE
            )

        engine = create_engine("sqlite://", creator=connect, **pool)
    else:
        engine = create_engine(
            f"sqlite:///{path}",
            connect_args={"check_same_thread": False, "timeout": 30, "cached_statements": STATEMENT_CACHE},
            **pool,
        )
    event.listen(engine, "connect", _on_connect_read_only if read_only else _on_connect)
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
        known = storage_error(exc, path)
        raise known or StoreError(f"cannot open store {path}: {exc}", hint="check --db / MLBENCH_DB") from exc
    try:
        return migrations.migrate(conn, str(path))
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{path} is not a usable mlbench store: {exc}") from exc
    finally:
        conn.close()


class StoreLocked(StoreError):
    """Another process already writes this store."""


class StoreFull(StoreError):
    """The disk (or quota) of the store's folder is full: nothing more can be written until
    space is freed; everything stored so far stays."""


class StoreReadOnly(StoreError):
    """The store's folder or file cannot be written (a read-only mount, no permission): it is
    served for reading only."""


def full_error(folder: Path) -> StoreFull:
    return StoreFull(
        f"no space left in {folder}: the store cannot write more",
        hint=f"free space on the disk of {folder}; what was stored is kept, and writing resumes "
        "once there is room (ranks keep unsent data in their spool meanwhile)",
    )


def read_only_error(path: Path, why: str = "its folder is read-only") -> StoreReadOnly:
    return StoreReadOnly(
        f"store {path} is open for reading only ({why}): it cannot record runs",
        hint="read it with status, results, logs, report and the TUI; to run benchmarks, point "
        "MLBENCH_DB (or --db) at a store in a writable folder",
    )


_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_READ_ONLY_ERRNOS = (errno.EROFS, errno.EACCES, errno.EPERM)


def storage_error(exc: BaseException, path: Path) -> StoreError | None:
    """The ``StoreFull``/``StoreReadOnly``/``StoreLocked`` that ``exc`` (raised writing the store
    at ``path``) means, or None for any other failure. SQLite says ``SQLITE_FULL`` (13) for a full
    disk, ``SQLITE_READONLY`` (8) for a file it cannot write and ``SQLITE_BUSY`` (5) for a lock
    another process kept past the wait; SQLAlchemy wraps them (``orig``)."""
    orig = getattr(exc, "orig", None) or exc
    if isinstance(orig, OSError) and orig.errno in _FULL_ERRNOS:
        return full_error(path.parent)
    if isinstance(orig, OSError) and orig.errno in _READ_ONLY_ERRNOS:
        return read_only_error(path, orig.strerror or "not writable")
    if isinstance(orig, sqlite3.Error):
        code = getattr(orig, "sqlite_errorcode", None)
        text = str(orig).lower()
        if (code is not None and code & 0xFF == sqlite3.SQLITE_FULL) or "disk is full" in text:
            return full_error(path.parent)
        if (code is not None and code & 0xFF == sqlite3.SQLITE_READONLY) or "readonly database" in text:
            return read_only_error(path, "SQLite cannot write it")
        if is_busy(orig):
            return locked_error(path)
    return None


def is_busy(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite's ``SQLITE_BUSY``: another connection holds the lock wanted."""
    orig = getattr(exc, "orig", None) or exc
    code = getattr(orig, "sqlite_errorcode", None)
    return isinstance(orig, sqlite3.Error) and (
        (code is not None and code & 0xFF == sqlite3.SQLITE_BUSY) or "database is locked" in str(orig).lower()
    )


def locked_error(path: Path) -> StoreLocked:
    """Another process held the store's SQLite lock past the wait (``busy_timeout``)."""
    from mlbench_tui.locks import describe, holder

    shm = path.with_name(path.name + "-shm")  # in WAL mode SQLite locks its shared-memory file
    who = describe(holder(shm, ("POSIX",)) or holder(path, ("POSIX",)))
    return StoreLocked(
        f"store {path} stayed locked by {who} for longer than {BUSY_TIMEOUT_MS // 1000} s",
        hint="another program holds a transaction open on it (an sqlite3 shell?); end it, then retry",
    )


def writable(path: Path) -> bool:
    """Whether a store at ``path`` can be written here: its folder (or the nearest existing
    folder above it) and the file itself, when it exists, accept writes."""
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not os.access(folder, os.W_OK):
        return False
    try:
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return False
    except OSError:
        return False
    return not path.exists() or os.access(path, os.W_OK)


class FileLock:
    """An exclusive advisory lock (``flock``) held for the writer's lifetime."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> None:
        import fcntl

        from mlbench_tui.locks import describe, holder

        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise storage_error(exc, self.path) or StoreError(f"cannot lock {self.path}: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            who = describe(holder(self.path))
            raise StoreLocked(
                f"store {self.path.with_suffix('')} is in use by another mlbench server: {who}",
                hint="use that server (mlbench finds it through its state file) or stop it",
            ) from exc
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
