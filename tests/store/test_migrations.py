"""Named migrations: an older store file upgrades in place; a newer one is refused."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from mlbench_tui.errors import StoreError
from mlbench_tui.store import queries, schema
from mlbench_tui.store.api_models import RankUpdate
from mlbench_tui.store.migrations import MIGRATIONS
from mlbench_tui.store.store import Store, hash_token
from mlbench_tui.store.tables import TABLES

# The store layout of migration 0001 as an older mlbench wrote it, with data in it.
OLD_SCHEMA = """
CREATE TABLE schema_migrations (name VARCHAR NOT NULL PRIMARY KEY, applied FLOAT NOT NULL);
INSERT INTO schema_migrations VALUES ('0001_initial', 1700000000.0);
CREATE TABLE runs (
    id VARCHAR(32) NOT NULL PRIMARY KEY, name VARCHAR NOT NULL, spec_name VARCHAR NOT NULL DEFAULT '',
    spec_hash VARCHAR NOT NULL DEFAULT '', spec_text VARCHAR NOT NULL DEFAULT '',
    plan VARCHAR NOT NULL DEFAULT '{}', task VARCHAR NOT NULL DEFAULT '', backend VARCHAR NOT NULL DEFAULT '',
    workers INTEGER NOT NULL DEFAULT 1, repeat INTEGER NOT NULL DEFAULT 0, goal VARCHAR,
    state VARCHAR NOT NULL DEFAULT 'pending', target_kind VARCHAR NOT NULL DEFAULT 'local', handle VARCHAR,
    created FLOAT NOT NULL, started FLOAT, finished FLOAT, result VARCHAR, error VARCHAR,
    token_hash VARCHAR NOT NULL, updated FLOAT NOT NULL);
CREATE INDEX ix_runs_name ON runs (name);
CREATE INDEX ix_runs_state ON runs (state);
CREATE TABLE metrics (id INTEGER NOT NULL PRIMARY KEY, run_id VARCHAR NOT NULL, rank INTEGER NOT NULL,
    name VARCHAR NOT NULL, step INTEGER, epoch FLOAT, t FLOAT NOT NULL, value FLOAT);
CREATE INDEX ix_metrics_run_name_step ON metrics (run_id, name, step);
CREATE TABLE logs (id INTEGER NOT NULL PRIMARY KEY, run_id VARCHAR NOT NULL, rank INTEGER NOT NULL,
    stream VARCHAR NOT NULL DEFAULT 'stdout', seq INTEGER, t FLOAT NOT NULL, text VARCHAR NOT NULL);
CREATE INDEX ix_logs_run ON logs (run_id);
CREATE TABLE events (id INTEGER NOT NULL PRIMARY KEY, run_id VARCHAR NOT NULL, rank INTEGER,
    kind VARCHAR NOT NULL, payload VARCHAR NOT NULL DEFAULT '{}', t FLOAT NOT NULL);
CREATE INDEX ix_events_run ON events (run_id);
"""


def _old_store(path: Path) -> None:
    db = sqlite3.connect(path)
    db.executescript(OLD_SCHEMA)
    db.execute(
        "INSERT INTO runs (id, name, state, created, token_hash, updated, goal)"
        " VALUES ('r-0123456789ab', 'old-run', 'succeeded', 1700000000.0, ?, 1700000000.0, ?)",
        (hash_token("old-token"), '{"metric": "val_global_Prec@1", "target": 80}'),
    )
    db.executemany(
        "INSERT INTO metrics (id, run_id, rank, name, step, t, value)"
        " VALUES (?, 'r-0123456789ab', 0, 'loss', ?, 1.0, ?)",
        [(i + 1, i, 1.0 / (i + 1)) for i in range(5)],
    )
    # a second metric and rank, and a run with the same metric name, interleaved by id
    db.executemany(
        "INSERT INTO metrics (id, run_id, rank, name, step, epoch, t, value) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (10, "r-0123456789ab", 1, "lr", 0, 0.5, 2.0, 0.1),
            (11, "r-ba9876543210", 0, "loss", 7, None, 3.0, None),
            (12, "r-0123456789ab", 1, "lr", 1, 1.0, 4.0, 0.05),
        ],
    )
    db.commit()
    db.close()


def test_older_store_upgrades_in_place_and_keeps_data(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _old_store(path)
    with Store(path) as store:
        assert store.migrations_applied == [
            "0002_ranks_batches_labels",
            "0003_metric_series",
            "0004_run_launch",
            "0005_run_owner_spool",
        ]
        run = store.get_run("r-0123456789ab")
        assert run.launch is None  # stored before launch milestones: none known
        assert (
            run.name == "old-run"
            and run.labels == {}
            and run.goal is not None  # stored without kind and direction: a custom 'max' goal
            and (run.goal.metric, run.goal.target, run.goal.direction) == ("val_global_Prec@1", 80, "max")
        )
        page = store.read(lambda c: queries.metrics(c, run.id))
        assert [(s.name, s.rank, s.step) for s in page.series] == [
            ("loss", 0, [0, 1, 2, 3, 4]),
            ("lr", 1, [0, 1]),
        ]
        assert page.series[1].epoch == [0.5, 1.0] and page.cursor == 12
        # every row keeps its id (the read cursor) and reads back the same through metrics_v
        db = sqlite3.connect(path)
        assert db.execute(
            "SELECT id, run_id, rank, name, step, epoch, t, value FROM metrics_v ORDER BY id"
        ).fetchall() == [
            *[(i + 1, "r-0123456789ab", 0, "loss", i, None, 1.0, 1.0 / (i + 1)) for i in range(5)],
            (10, "r-0123456789ab", 1, "lr", 0, 0.5, 2.0, 0.1),
            (11, "r-ba9876543210", 0, "loss", 7, None, 3.0, None),
            (12, "r-0123456789ab", 1, "lr", 1, 1.0, 4.0, 0.05),
        ]
        assert db.execute("SELECT count(*) FROM series").fetchone() == (3,)
        plan = " ".join(
            str(row[-1])
            for row in db.execute("EXPLAIN QUERY PLAN SELECT id FROM metrics WHERE series = 1 AND step > 2")
        )
        assert "ix_metrics_series_step" in plan
        db.close()
        # features of the new schema work on the upgraded file
        assert store.ingest_metrics(run.id, 0, 1, [("loss", 5, None, 2.0, 0.1)]).accepted == 1
        assert store.ingest_metrics(run.id, 0, 1, [("loss", 5, None, 2.0, 0.1)]).duplicate
        assert store.update_rank(run.id, 0, RankUpdate(state="succeeded")).rank == 0
        assert store.read(lambda c: queries.metrics(c, run.id, since=12)).series[0].value == [0.1]
        assert store.ingest_metrics(run.id, 0, 2, [("lr", 6, None, 2.0, 0.2)]).accepted == 1  # known series
        assert store.read(lambda c: queries.metrics(c, run.id, names=["lr"], rank=0)).series[0].step == [6]
        assert store.check_run_token(run.id, "old-token") is True
    names = [r[0] for r in sqlite3.connect(path).execute("SELECT name FROM schema_migrations ORDER BY name")]
    assert names == [name for name, _ in MIGRATIONS]
    with Store(path) as again:  # reopening applies nothing
        assert again.migrations_applied == []


def test_migrated_schema_matches_the_table_models(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    Store(path).close()
    db = sqlite3.connect(path)
    for table in TABLES:
        columns = {row[1] for row in db.execute(f"PRAGMA table_info({table.name})")}
        assert columns == {c.name for c in table.columns}, table.name
        indexes = {
            row[1]
            for row in db.execute(f"PRAGMA index_list({table.name})")
            if not row[1].startswith("sqlite_")
        }
        assert {i.name for i in table.indexes} <= indexes, table.name


def test_a_store_upgraded_from_the_first_layout_has_the_schema_of_a_new_one(tmp_path: Path) -> None:
    """The frozen migrations and the table models describe the same schema: column types, NOT
    NULL, defaults, keys, indexes and views (a new store is created from the models)."""
    old, new = tmp_path / "old.db", tmp_path / "new.db"
    _old_store(old)
    Store(old).close()
    Store(new).close()
    upgraded, created = sqlite3.connect(old), sqlite3.connect(new)
    assert schema.describe(upgraded) == schema.describe(created)
    assert schema.differences(upgraded) == []


def test_a_sqlite_file_of_something_else_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE notes (text VARCHAR)")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="not an mlbench store"):
        Store(path)
    tables = [row[0] for row in sqlite3.connect(path).execute("SELECT name FROM sqlite_master")]
    assert tables == ["notes"]


def test_store_from_a_newer_mlbench_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    Store(path).close()
    db = sqlite3.connect(path)
    db.execute("INSERT INTO schema_migrations VALUES ('0099_from_the_future', 2000000000.0)")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="newer mlbench"):
        Store(path)


def test_ingested_rows_follow_the_table_models_column_order() -> None:
    """Rows are built positionally (ingest parser, writer); the inserts take the tables' order."""
    from mlbench_tui.store.changes import MetricChunk
    from mlbench_tui.store.writer import written_tables

    columns = {kind: tuple(c.name for c in table.columns) for kind, table in written_tables().items()}
    assert columns == {
        "metrics": ("id", *MetricChunk.FIELDS),
        "logs": ("id", "run_id", "rank", "stream", "seq", "t", "text"),
        "events": ("id", "run_id", "rank", "kind", "payload", "t"),
        "batches": ("run_id", "rank", "kind", "session", "seq"),
        "series": ("id", "run_id", "name"),
    }


def test_server_import_path_avoids_sqlmodel() -> None:
    import subprocess
    import sys

    code = "import sys, mlbench_tui.server.app, mlbench_tui.server.serve; print('sqlmodel' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
