"""The store on a real SQLite file: runs, tokens, idempotent ingest, cursors, downsampling, names."""

from __future__ import annotations

import sqlite3

import pytest

from mlbench_tui.errors import NotFound
from mlbench_tui.store import queries
from mlbench_tui.store.api_models import RankUpdate, RunCreate, RunUpdate
from mlbench_tui.store.store import Store, hash_token


def test_run_lifecycle_ranks_and_token_hashed_at_rest(store: Store) -> None:
    run, token = store.create_run(RunCreate(name="demo-gloo-2w", workers=2, task="1a", backend="gloo"))
    assert run.id.startswith("r-") and len(run.id) == 14
    assert [r.rank for r in run.ranks] == [0, 1] and run.state.value == "pending"
    raw = sqlite3.connect(store.path).execute("SELECT token_hash FROM runs").fetchone()[0]
    assert raw == hash_token(token) and token not in raw
    assert store.check_run_token(run.id, token) is True
    assert store.check_run_token(run.id, token + "x") is False
    assert store.check_run_token("r-000000000000", token) is None

    running = store.update_run(run.id, RunUpdate(state="running", handle="local://h/" + run.id))
    assert running.started is not None and running.finished is None
    done = store.update_run(run.id, RunUpdate(state="succeeded", result={"time_to_accuracy_s": 12.5}))
    assert done.finished is not None and done.result is not None and done.result.time_to_accuracy_s == 12.5
    rank = store.update_rank(run.id, 1, RankUpdate(state="failed", exit_code=3, host="node-a", pid=42))
    assert (rank.state.value, rank.exit_code, rank.host) == ("failed", 3, "node-a")
    with pytest.raises(NotFound):
        store.update_run("r-000000000000", RunUpdate(state="failed"))


def test_a_cancel_before_the_launcher_says_running_stays_a_cancel(store: Store) -> None:
    """``mlbench cancel`` of a run whose handle is not recorded yet marks it cancelled; the
    launcher's "running" that follows records the handle and leaves the run cancelled (its watcher
    then stops the ranks), so the run is never shown running again."""
    run, _ = store.create_run(RunCreate(name="race-gloo-2w", workers=2, task="1a", backend="gloo"))
    store.update_run(run.id, RunUpdate(state="cancelled", error="cancelled by user"))
    late = store.update_run(run.id, RunUpdate(state="running", handle="local://h/" + run.id))
    assert (late.state.value, late.handle) == ("cancelled", "local://h/" + run.id)
    ended = store.update_run(run.id, RunUpdate(state="failed"))  # a final state still lands
    assert ended.state.value == "failed"


def test_ingest_is_idempotent_per_rank_session_seq(store: Store) -> None:
    run, _ = store.create_run(RunCreate(name="r", workers=2))
    rows = [("loss", i, None, 1.0, float(i)) for i in range(10)]
    assert store.ingest_metrics(run.id, 0, 7, rows).accepted == 10
    again = store.ingest_metrics(run.id, 0, 7, rows)
    assert again.duplicate and again.accepted == 0
    assert store.ingest_metrics(run.id, 1, 7, rows).accepted == 10  # other rank, same seq
    assert store.ingest_metrics(run.id, 0, 7, rows, session="b").accepted == 10  # restarted sender
    page = store.read(lambda c: queries.metrics(c, run.id, names=["loss"]))
    assert sum(len(s.value) for s in page.series) == 30
    with pytest.raises(NotFound):
        store.ingest_metrics("r-000000000000", 0, 1, rows)


def test_cursor_reads_return_only_newer_points(store: Store) -> None:
    run, _ = store.create_run(RunCreate(name="r"))
    store.ingest_metrics(run.id, 0, 1, [("loss", i, None, 1.0, 1.0) for i in range(5)])
    first = store.read(lambda c: queries.metrics(c, run.id))
    store.ingest_metrics(run.id, 0, 2, [("loss", i, None, 1.0, 2.0) for i in range(5, 8)])
    second = store.read(lambda c: queries.metrics(c, run.id, since=first.cursor))
    assert second.series[0].step == [5, 6, 7] and second.cursor > first.cursor
    empty = store.read(lambda c: queries.metrics(c, run.id, since=second.cursor))
    assert empty.series == [] and empty.cursor == second.cursor


def test_downsampling_keeps_spikes_as_min_max(store: Store) -> None:
    run, _ = store.create_run(RunCreate(name="r"))
    values = [1.0] * 1000
    values[437] = 99.0
    values[800] = None  # type: ignore[call-overload]
    store.ingest_metrics(run.id, 0, 1, [("loss", i, None, float(i), v) for i, v in enumerate(values)])
    page = store.read(lambda c: queries.metrics(c, run.id, points=10))
    (series,) = page.series
    assert page.downsampled and len(series.value) == 10
    assert series.max is not None and max(m for m in series.max if m is not None) == 99.0
    assert series.step[-1] == 999 and series.value[-1] == 1.0


def test_metric_names_logs_regex_and_events(store: Store) -> None:
    run, _ = store.create_run(RunCreate(name="r", workers=2))
    store.ingest_metrics(run.id, 0, 1, [("loss", 1, None, 1.0, 0.5), ("lr", 1, None, 1.0, 0.1)])
    store.ingest_metrics(run.id, 1, 1, [("loss", 3, None, 1.0, 0.25)])
    names = store.read(lambda c: queries.metric_names(c, run.id))
    assert [(n.name, sorted(n.ranks), n.count, n.last_step, n.last_value) for n in names] == [
        ("loss", [0, 1], 2, 3, 0.25),
        ("lr", [0], 1, 1, 0.1),
    ]
    w = store.writer
    assert w is not None
    lines = [(run.id, r, "stdout", i, 1.0, f"epoch {i} rank {r}") for r in (0, 1) for i in range(3)]
    w.ingest("logs", run.id, 0, "", 1, lines)
    page = store.read(lambda c: queries.logs(c, run.id, rank=1, regex=r"epoch [12]"))
    assert [ln.text for ln in page.lines] == ["epoch 1 rank 1", "epoch 2 rank 1"]
    limited = store.read(lambda c: queries.logs(c, run.id, limit=2))
    rest = store.read(lambda c: queries.logs(c, run.id, since=limited.cursor))
    assert len(limited.lines) == 2 and len(rest.lines) == 4
    w.ingest("events", run.id, 0, "", 1, [(run.id, 0, "epoch_end", '{"epoch": 1}', 2.0)])
    events = store.read(lambda c: queries.events(c, run.id))
    assert events.events[0].payload == {"epoch": 1}


def test_delete_removes_all_data_of_the_run_only(store: Store) -> None:
    a, _ = store.create_run(RunCreate(name="a"))
    b, _ = store.create_run(RunCreate(name="b"))
    for run in (a, b):
        store.ingest_metrics(run.id, 0, 1, [("loss", 1, None, 1.0, 1.0)])
    store.delete_run(a.id)
    db = sqlite3.connect(store.path)
    assert db.execute("SELECT DISTINCT run_id FROM metrics_v").fetchall() == [(b.id,)]
    assert db.execute("SELECT count(*) FROM metrics").fetchone() == (1,)
    assert db.execute("SELECT run_id FROM series").fetchall() == [(b.id,)]
    assert db.execute("SELECT count(*) FROM ranks WHERE run_id = ?", (a.id,)).fetchone() == (0,)
    with pytest.raises(NotFound):
        store.get_run(a.id)


def test_metric_names_stay_correct_when_polled_incrementally(store: Store) -> None:
    a, _ = store.create_run(RunCreate(name="a", workers=2))
    b, _ = store.create_run(RunCreate(name="b"))
    store.ingest_metrics(a.id, 0, 1, [("loss", i, None, 1.0, float(i)) for i in range(5)])
    first = store.metric_names(a.id)
    assert [(n.name, n.count, n.last_step) for n in first] == [("loss", 5, 4)]
    store.ingest_metrics(b.id, 0, 1, [("loss", 9, None, 1.0, 9.0)])  # other run: not counted
    store.ingest_metrics(a.id, 1, 2, [("loss", 7, None, 1.0, 0.5), ("lr", 7, None, 1.0, 0.1)])
    polled = store.metric_names(a.id)
    full = store.read(lambda c: queries.metric_names(c, a.id))
    assert polled == full
    assert [(n.name, sorted(n.ranks), n.count, n.last_step, n.last_value) for n in polled] == [
        ("loss", [0, 1], 6, 7, 0.5),
        ("lr", [1], 1, 7, 0.1),
    ]
    store.delete_run(a.id)
    assert store.metric_names(a.id) == []


def test_recent_cursor_reads_match_full_reads(store: Store) -> None:
    a, _ = store.create_run(RunCreate(name="a"))
    b, _ = store.create_run(RunCreate(name="b"))
    store.ingest_metrics(a.id, 0, 1, [("loss", i, None, 1.0, 1.0) for i in range(10)])
    cursor = store.read(lambda c: queries.metrics(c, a.id)).cursor
    store.ingest_metrics(b.id, 0, 1, [("loss", 1, None, 1.0, 1.0)])
    store.ingest_metrics(a.id, 0, 2, [("loss", 10, None, 1.0, 2.0), ("lr", 10, None, 1.0, 0.1)])
    assert store.recent_metrics(cursor)
    fast = store.read(lambda c: queries.metrics(c, a.id, since=cursor, recent=True))
    slow = store.read(lambda c: queries.metrics(c, a.id, since=cursor))
    assert fast == slow and [s.name for s in fast.series] == ["loss", "lr"]
