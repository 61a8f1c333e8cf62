"""``StoreReader``: a store file read in this process answers as the server's read routes do, and
declines (None) where only a server can answer first."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from mlbench_tui.errors import NotFound
from mlbench_tui.server.serve import EmbeddedServer
from mlbench_tui.store.reader import StoreReader
from mlbench_tui.store.store import Store

STORE = Path(__file__).resolve().parents[1] / "fixtures" / "report" / "store.sqlite3"


def test_reads_the_same_runs_and_metric_pages_as_the_server_beside_it(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    shutil.copyfile(STORE, path)
    # The server holds the store's writer: the reader reads beside it (WAL).
    with EmbeddedServer(path, record=False) as server, server.info.client() as client:
        assert StoreReader.open(path) is None  # results of older rules: the server recomputes them first
        client.list_runs()  # ... when they are read, and stores them
        reader = StoreReader.open(path)
        assert reader is not None
        with reader:
            runs = reader.list_runs()
            assert len(runs) == 16 and runs == client.list_runs()
            assert reader.list_runs(spec_name="report-train", limit=3) == client.list_runs(
                spec_name="report-train", limit=3
            )
            run_id = next(run.id for run in runs if run.spec_name == "report-train")
            assert reader.get_run(run_id) == client.get_run(run_id)
            for kwargs in ({"points": 50}, {"names": "train_loss", "rank": 0}, {"limit": 100, "since": 10}):
                page = reader.metrics(run_id, **kwargs)  # type: ignore[arg-type]
                assert page.series and page == client.metrics(run_id, **kwargs)  # type: ignore[arg-type]
            assert reader.events(run_id) == client.events(run_id)
            assert reader.events(run_id, kind="run_start") == client.events(run_id, kind="run_start")
            assert reader.events(run_id, kind="run_start").events  # the report's clock reads these
            for source in (reader, client):  # one NotFound, from the file and from the server
                with pytest.raises(NotFound, match="run r-000000000000 not found"):
                    source.get_run("r-000000000000")


def test_declines_a_missing_file_an_outdated_schema_and_a_foreign_database(tmp_path: Path) -> None:
    missing = tmp_path / "missing.db"
    assert StoreReader.open(missing) is None
    assert not missing.exists()  # reading never creates a store

    outdated = tmp_path / "outdated.db"
    Store(outdated).close()
    with sqlite3.connect(outdated) as db:
        db.execute("DELETE FROM schema_migrations WHERE name = (SELECT max(name) FROM schema_migrations)")
    assert StoreReader.open(outdated) is None  # a server upgrades it first

    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as db:
        db.execute("CREATE TABLE t (x)")
    assert StoreReader.open(foreign) is None
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database" * 100)
    assert StoreReader.open(garbage) is None

    current = tmp_path / "current.db"
    Store(current).close()
    reader = StoreReader.open(current)
    assert reader is not None
    with reader:
        assert reader.list_runs() == []
