"""Named schema migrations, recorded in the store's ``schema_migrations`` table.

A new store is created from the table models (``schema.create``) and records every migration as
applied. Each migration is frozen SQL: once released it never changes, so an older store file
upgrades in place by running the migrations it has not seen, in order, and ends with the models'
schema (checked after every upgrade, and by a test from the first layout on). A store that records
a migration this code does not know was written by a newer mlbench and is refused rather than
corrupted. A change to the models comes with a new migration that makes the same change.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable, Iterator

from mlbench_tui.errors import StoreError

# 0001: the first store layout (runs, metrics, logs, events).
_M0001 = """
CREATE TABLE IF NOT EXISTS runs (
    id VARCHAR(32) NOT NULL PRIMARY KEY,
    name VARCHAR NOT NULL,
    spec_name VARCHAR NOT NULL DEFAULT '',
    spec_hash VARCHAR NOT NULL DEFAULT '',
    spec_text VARCHAR NOT NULL DEFAULT '',
    plan VARCHAR NOT NULL DEFAULT '{}',
    task VARCHAR NOT NULL DEFAULT '',
    backend VARCHAR NOT NULL DEFAULT '',
    workers INTEGER NOT NULL DEFAULT 1,
    repeat INTEGER NOT NULL DEFAULT 0,
    goal VARCHAR,
    state VARCHAR NOT NULL DEFAULT 'pending',
    target_kind VARCHAR NOT NULL DEFAULT 'local',
    handle VARCHAR,
    created FLOAT NOT NULL,
    started FLOAT,
    finished FLOAT,
    result VARCHAR,
    error VARCHAR,
    token_hash VARCHAR NOT NULL,
    updated FLOAT NOT NULL
);
CREATE INDEX IF NOT EXISTS ix_runs_name ON runs (name);
CREATE INDEX IF NOT EXISTS ix_runs_state ON runs (state);
CREATE TABLE IF NOT EXISTS metrics (
    id INTEGER NOT NULL PRIMARY KEY,
    run_id VARCHAR NOT NULL,
    rank INTEGER NOT NULL,
    name VARCHAR NOT NULL,
    step INTEGER,
    epoch FLOAT,
    t FLOAT NOT NULL,
    value FLOAT
);
CREATE INDEX IF NOT EXISTS ix_metrics_run_name_step ON metrics (run_id, name, step);
CREATE TABLE IF NOT EXISTS logs (
    id INTEGER NOT NULL PRIMARY KEY,
    run_id VARCHAR NOT NULL,
    rank INTEGER NOT NULL,
    stream VARCHAR NOT NULL DEFAULT 'stdout',
    seq INTEGER,
    t FLOAT NOT NULL,
    text VARCHAR NOT NULL
);
CREATE INDEX IF NOT EXISTS ix_logs_run ON logs (run_id);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER NOT NULL PRIMARY KEY,
    run_id VARCHAR NOT NULL,
    rank INTEGER,
    kind VARCHAR NOT NULL,
    payload VARCHAR NOT NULL DEFAULT '{}',
    t FLOAT NOT NULL
);
CREATE INDEX IF NOT EXISTS ix_events_run ON events (run_id);
"""

# 0002: per-rank states, idempotent batch receipts, run labels.
_M0002 = """
CREATE TABLE IF NOT EXISTS ranks (
    run_id VARCHAR NOT NULL,
    rank INTEGER NOT NULL,
    state VARCHAR NOT NULL DEFAULT 'pending',
    host VARCHAR,
    pid INTEGER,
    pod VARCHAR,
    exit_code INTEGER,
    message VARCHAR,
    updated FLOAT NOT NULL,
    PRIMARY KEY (run_id, rank)
);
CREATE TABLE IF NOT EXISTS batches (
    run_id VARCHAR NOT NULL,
    rank INTEGER NOT NULL,
    kind VARCHAR NOT NULL,
    session VARCHAR NOT NULL DEFAULT '',
    seq INTEGER NOT NULL,
    PRIMARY KEY (run_id, rank, kind, session, seq)
) WITHOUT ROWID;
ALTER TABLE runs ADD COLUMN labels VARCHAR NOT NULL DEFAULT '{}';
"""

# 0003: metric rows refer to an interned (run_id, name) series instead of repeating both strings;
# the index becomes (series, step). Row ids (read cursors) are kept as they were. ``metrics_v``
# spells rows out with run_id and name for ad-hoc readers (sqlite3 shell, exports).
_M0003 = """
CREATE TABLE series (
    id INTEGER NOT NULL PRIMARY KEY,
    run_id VARCHAR NOT NULL,
    name VARCHAR NOT NULL
);
INSERT INTO series (run_id, name) SELECT run_id, name FROM metrics GROUP BY run_id, name ORDER BY min(id);
CREATE UNIQUE INDEX ix_series_run_name ON series (run_id, name);
CREATE TABLE metrics_0003 (
    id INTEGER NOT NULL PRIMARY KEY,
    series INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    step INTEGER,
    epoch FLOAT,
    t FLOAT NOT NULL,
    value FLOAT
);
INSERT INTO metrics_0003 (id, series, rank, step, epoch, t, value)
    SELECT m.id, s.id, m.rank, m.step, m.epoch, m.t, m.value
    FROM metrics AS m JOIN series AS s ON s.run_id = m.run_id AND s.name = m.name ORDER BY m.id;
DROP TABLE metrics;
ALTER TABLE metrics_0003 RENAME TO metrics;
CREATE INDEX ix_metrics_series_step ON metrics (series, step);
CREATE VIEW metrics_v AS
    SELECT m.id AS id, s.run_id AS run_id, m.rank AS rank, s.name AS name, m.step AS step,
        m.epoch AS epoch, m.t AS t, m.value AS value
    FROM metrics AS m JOIN series AS s ON s.id = m.series
"""

# 0004: when the target reached each step of launching a run (LaunchMilestones as JSON); null
# in a run stored before, which reads as "no milestones".
_M0004 = """
ALTER TABLE runs ADD COLUMN launch VARCHAR
"""

# 0005: who owns a run (the apply that launches it) and where its ranks spool unsent batches.
_M0005 = """
ALTER TABLE runs ADD COLUMN owner VARCHAR;
ALTER TABLE runs ADD COLUMN spool VARCHAR;
"""

Migration = tuple[str, Callable[[sqlite3.Connection], None]]


def _script(sql: str) -> Callable[[sqlite3.Connection], None]:
    def apply(conn: sqlite3.Connection) -> None:
        for statement in sql.split(";"):
            if statement.strip():
                conn.execute(statement)

    return apply


MIGRATIONS: list[Migration] = [
    ("0001_initial", _script(_M0001)),
    ("0002_ranks_batches_labels", _script(_M0002)),
    ("0003_metric_series", _script(_M0003)),
    ("0004_run_launch", _script(_M0004)),
    ("0005_run_owner_spool", _script(_M0005)),
]


def applied(conn: sqlite3.Connection) -> list[str]:
    """Names of the migrations this store file records, in the order they were applied."""
    return [row[0] for row in conn.execute("SELECT name FROM schema_migrations ORDER BY applied, name")]


def migrate(conn: sqlite3.Connection, path: str = "") -> list[str]:
    """Bring ``conn``'s store to the models' schema; return the migrations recorded on the way.

    An empty file gets the models' schema in one transaction. Otherwise each migration the store
    has not seen runs in its own transaction together with its ``schema_migrations`` row, so a
    crash mid-upgrade leaves the store at the previous, consistent version; the result is then
    checked against the models (``schema.check``).
    """
    where = path or "(memory)"
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not tables:
        return _create(conn, where)
    if "schema_migrations" not in tables:
        raise StoreError(
            f"{where} is a SQLite database but not an mlbench store",
            hint="point --db / MLBENCH_DB at an mlbench store, or at a new file",
        )
    done = applied(conn)
    known = [name for name, _ in MIGRATIONS]
    unknown = [name for name in done if name not in known]
    if unknown:
        raise StoreError(
            f"store {where} was written by a newer mlbench (migrations {', '.join(unknown)})",
            hint="upgrade mlbench-tui, or point --db / MLBENCH_DB at another store",
        )
    new: list[str] = []
    for name, apply in MIGRATIONS:
        if name in done:
            continue
        with _transaction(conn, f"migration {name}", where):
            apply(conn)
            _record(conn, name)
        new.append(name)
    from mlbench_tui.store import schema  # the table models: only where a store is migrated

    schema.check(conn, where)
    return new


def _create(conn: sqlite3.Connection, where: str) -> list[str]:
    from mlbench_tui.store import schema

    with _transaction(conn, "the initial schema", where):
        schema.create(conn)
        for name, _ in MIGRATIONS:
            _record(conn, name)
    return [name for name, _ in MIGRATIONS]


def _record(conn: sqlite3.Connection, name: str) -> None:
    conn.execute("INSERT INTO schema_migrations (name, applied) VALUES (?, ?)", (name, time.time()))


@contextlib.contextmanager
def _transaction(conn: sqlite3.Connection, what: str, where: str) -> Iterator[None]:
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except Exception as exc:
        conn.execute("ROLLBACK")
        raise StoreError(f"could not apply {what} to {where}: {exc}") from exc
