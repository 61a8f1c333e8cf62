"""The schema comes from the table models: stores written before keep opening, drift is refused."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from mlbench_tui.errors import StoreError
from mlbench_tui.store import queries, schema
from mlbench_tui.store.api_models import RunUpdate
from mlbench_tui.store.store import Store

FIXTURE = Path(__file__).parent.parent / "fixtures" / "store" / "store-0003.sqlite3"


def test_a_store_written_before_the_schema_came_from_the_models_opens_and_keeps_working(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.db"
    shutil.copyfile(FIXTURE, path)
    with Store(path) as store:
        assert store.migrations_applied == ["0004_run_launch", "0005_run_owner_spool"]
        runs = {r.name: r for r in store.read(lambda c: queries.list_runs(c))}
        done, running = runs["fixture-done"], runs["fixture-running"]
        assert done.launch is None and store.get_run(done.id).launch is None  # no milestones then
        assert (done.state.value, done.labels) == ("succeeded", {"team": "a"})
        assert done.result is not None  # its result document, written before RunResult, reads back
        stored = store.read(
            lambda c: c.exec_driver_sql("SELECT result FROM runs WHERE id = ?", (done.id,)).scalar()
        )
        assert stored == '{"tta_s":12.5}'  # and stays as it was
        assert store.get_run(done.id).ranks[1].host == "node-1"
        page = store.read(lambda c: queries.metrics(c, done.id, names=["loss"], rank=1))
        assert page.series[0].step == [0, 1, 2, 3, 4] and page.series[0].epoch[1] == 0.1
        assert [n.name for n in store.metric_names(done.id)] == ["loss", "lr"]
        assert [ln.text for ln in store.read(lambda c: queries.logs(c, done.id)).lines] == [
            "line 0",
            "line 1",
            "line 2",
        ]
        assert store.read(lambda c: queries.events(c, done.id)).events[0].payload == {"epoch": 0}
        # its receipts, series and ids go on where they were
        again = [("loss", 0, None, 100.0, 1.0)]
        assert store.ingest_metrics(done.id, 1, 1, again, session="host-1.1").duplicate
        top = store.read(lambda c: queries.metrics(c, running.id)).cursor
        ack = store.ingest_metrics(
            running.id, 0, 8, [("loss", 2, None, 201.0, 0.5), ("acc", 2, None, 201.0, 0.9)]
        )
        assert ack.accepted == 2
        newer = store.read(lambda c: queries.metrics(c, running.id, since=top))
        assert sorted((s.name, s.step) for s in newer.series) == [("acc", [2]), ("loss", [2])]
        assert newer.cursor == top + 2  # ids go on from the stored ones
        assert store.update_run(running.id, RunUpdate(state="failed")).finished is not None
        store.delete_run(done.id)
    db = sqlite3.connect(path)
    assert sorted(db.execute("SELECT run_id, name FROM series")) == [
        (running.id, "acc"),
        (running.id, "loss"),
    ]
    assert schema.differences(db) == []


def test_a_store_whose_schema_was_changed_outside_mlbench_is_refused_with_the_differences(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.db"
    Store(path).close()
    db = sqlite3.connect(path)
    db.execute("CREATE INDEX my_own_index ON logs (rank, t)")  # someone's own index: left alone
    db.commit()
    Store(path).close()
    db.execute("DROP INDEX ix_metrics_series_step")
    db.execute("ALTER TABLE runs ADD COLUMN custodian VARCHAR NOT NULL DEFAULT 'me'")
    db.commit()
    db.close()
    with pytest.raises(StoreError) as err:
        Store(path)
    assert "index ix_metrics_series_step is missing" in err.value.message
    assert "table runs: column custodian is not in the table models" in err.value.message
