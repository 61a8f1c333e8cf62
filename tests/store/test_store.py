"""The store on a real SQLite file: runs, idempotent ingest, cursors, downsampling, one writer."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mlbench_tui.errors import NotFound
from mlbench_tui.store import queries
from mlbench_tui.store.api_models import RankUpdate, RunCreate, RunUpdate
from mlbench_tui.store.checkpointer import Checkpointer
from mlbench_tui.store.engine import StoreLocked, default_db_path
from mlbench_tui.store.store import Store, hash_token


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "m.db")
    yield s
    s.close()


def test_default_path_honours_home_and_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLBENCH_HOME", str(tmp_path / "home"))
    assert default_db_path() == tmp_path / "home" / "mlbench.db"
    monkeypatch.setenv("MLBENCH_DB", str(tmp_path / "x.db"))
    assert default_db_path() == tmp_path / "x.db"


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


def test_ingest_is_idempotent_per_rank_session_seq(store: Store) -> None:
    run, _ = store.create_run(RunCreate(name="r"))
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


def test_concurrent_writers_are_group_committed(store: Store) -> None:
    run, _ = store.create_run(RunCreate(name="r"))
    errors: list[BaseException] = []

    def send(rank: int) -> None:
        try:
            for seq in range(50):
                store.ingest_metrics(run.id, rank, seq, [("x", seq, None, 1.0, 1.0)] * 20)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=send, args=(r,)) for r in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    count = sqlite3.connect(store.path).execute("SELECT count(*) FROM metrics").fetchone()[0]
    assert count == 8 * 50 * 20


def test_second_writer_on_same_file_is_refused(store: Store) -> None:
    with pytest.raises(StoreLocked):
        Store(store.path)
    reader = Store(store.path, write=False)
    try:
        assert reader.read(lambda c: queries.list_runs(c)) == []
    finally:
        reader.close()


def test_wal_mode_and_not_a_store(tmp_path: Path) -> None:
    s = Store(tmp_path / "w.db")
    s.close()
    assert sqlite3.connect(tmp_path / "w.db").execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"this is not sqlite" * 100)
    from mlbench_tui.errors import StoreError

    with pytest.raises(StoreError, match="not a database"):
        Store(bad)


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


def test_wal_is_checkpointed_in_the_background_and_truncated_on_close(tmp_path: Path) -> None:
    path = tmp_path / "wal.db"
    store = Store(path)
    assert store.writer is not None and store.writer._checkpointer is not None
    store.writer._checkpointer.wal_bytes = 2 * 1024 * 1024
    run, _ = store.create_run(RunCreate(name="wal"))
    for seq in range(60):  # ~6 MB of WAL: more than the checkpointer's threshold
        store.ingest_metrics(run.id, 0, seq, [("loss", seq * 1000 + i, None, 1.0, 0.5) for i in range(1000)])
    deadline = time.monotonic() + 10
    while path.stat().st_size < 1_000_000 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert path.stat().st_size >= 1_000_000, "the WAL was not folded into the database while open"
    store.close()
    wal = path.with_name("wal.db-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    assert sqlite3.connect(path).execute("SELECT count(*) FROM metrics").fetchone() == (60_000,)


def test_batches_of_any_size_store_every_row_once_with_consecutive_ids(store: Store) -> None:
    """Rows go in as multi-row chunks of several sizes; each size and remainder must land exactly."""
    run, _ = store.create_run(RunCreate(name="sizes", workers=2))
    seen: list[tuple[object, ...]] = []
    assert store.writer is not None
    store.writer.listeners.append(
        lambda changes: seen.extend(r for c in changes if c.kind == "metrics" for r in c.rows)
    )
    expected = []
    for seq, n in enumerate([1, 2, 3, 7, 8, 9, 31, 32, 33, 77, 100, 127, 128, 129, 171, 257]):
        rows = [(f"m{i % 3}", seq * 1000 + i, None if i % 2 else 0.5, 10.0 + i, float(i)) for i in range(n)]
        assert store.ingest_metrics(run.id, seq % 2, seq, rows).accepted == n
        expected += [(run.id, seq % 2, *row) for row in rows]
    db = sqlite3.connect(store.path)
    got = db.execute(
        "SELECT id, run_id, rank, name, step, epoch, t, value FROM metrics_v ORDER BY id"
    ).fetchall()
    assert [r[0] for r in got] == list(range(1, len(expected) + 1))
    assert [(r[1], r[2], r[3], r[4], r[6], r[7], r[5]) for r in got] == [
        (e[0], e[1], e[2], e[3], e[5], e[6], e[4]) for e in expected
    ]
    assert seen == got  # live-stream rows: the same rows, ids included
    assert db.execute("SELECT count(*) FROM series").fetchone() == (3,)  # one per (run, name)
    page = store.read(lambda c: queries.metrics(c, run.id, names=["m1"], rank=1))
    assert page.series[0].step == [e[3] for e in expected if e[2] == "m1" and e[1] == 1]


def test_a_rolled_back_batch_leaves_its_new_series_to_the_next_one(store: Store) -> None:
    run, _ = store.create_run(RunCreate(name="rollback"))
    big = 2**63  # not storable as an SQLite integer: the whole transaction fails
    with pytest.raises(OverflowError):
        store.ingest_metrics(run.id, 0, 1, [("fresh", 1, None, 1.0, 1.0), ("bad", big, None, 1.0, 1.0)])
    assert store.ingest_metrics(run.id, 0, 1, [("fresh", 1, None, 1.0, 2.0)]).accepted == 1  # seq not taken
    page = store.read(lambda c: queries.metrics(c, run.id))
    assert [(s.name, s.value) for s in page.series] == [("fresh", [2.0])]
    db = sqlite3.connect(store.path)
    assert db.execute(
        "SELECT count(*) FROM metrics AS m LEFT JOIN series AS s ON s.id = m.series WHERE s.id IS NULL"
    ).fetchone() == (0,)


def test_runs_created_or_deleted_in_a_rolled_back_group_are_known_as_committed(store: Store) -> None:
    """A group that fails is undone and its requests retried one by one; the writer's view of
    which runs exist must end up as what was committed, not as the failed group left it."""
    kept, _ = store.create_run(RunCreate(name="kept"))
    doomed, _ = store.create_run(RunCreate(name="doomed"))
    writer = store.writer
    assert writer is not None
    results: dict[str, object] = {}

    def call(key: str, fn: Callable[[], object]) -> None:
        try:
            results[key] = fn()
        except Exception as exc:
            results[key] = exc

    bad = [("x", 2**63, None, 1.0, 1.0)]  # not storable: the group's transaction fails
    with writer._lock:  # the writer takes the first job, then waits here; the rest queue up
        first = threading.Thread(
            target=call, args=("first", lambda: store.ingest_metrics(kept.id, 0, 0, bad))
        )
        first.start()
        while not writer._queue.empty():
            time.sleep(0.001)
        threads = [
            threading.Thread(target=call, args=("new", lambda: store.create_run(RunCreate(name="new")))),
            threading.Thread(target=call, args=("delete", lambda: store.delete_run(doomed.id))),
            threading.Thread(
                target=call, args=("update", lambda: store.update_run(kept.id, RunUpdate(state="running")))
            ),
            threading.Thread(target=call, args=("bad", lambda: store.ingest_metrics(kept.id, 0, 1, bad))),
        ]
        for t in threads:
            t.start()
        while writer._queue.qsize() < len(threads):
            time.sleep(0.001)
    for t in [first, *threads]:
        t.join(10)
    assert isinstance(results["bad"], OverflowError) and isinstance(results["first"], OverflowError)
    new, _token = results["new"]  # type: ignore[misc]
    assert writer.has_run(new.id) and writer.has_run(kept.id) and not writer.has_run(doomed.id)
    assert store.ingest_metrics(new.id, 0, 0, [("loss", 1, None, 1.0, 0.5)]).accepted == 1
    assert store.ingest_metrics(kept.id, 0, 2, [("loss", 1, None, 1.0, 0.5)]).accepted == 1
    with pytest.raises(NotFound):
        store.ingest_metrics(doomed.id, 0, 0, [("loss", 1, None, 1.0, 0.5)])


def _busy_store(tmp_path: Path) -> tuple[Store, Checkpointer, Callable[[int], int]]:
    """A store, its checkpointer (1 MB threshold, polled every 50 ms) and ``write(batches)``,
    each batch 1000 metric rows of one run, back to back; it returns the rows written so far."""
    store = Store(tmp_path / "busy.db")
    run, _ = store.create_run(RunCreate(name="busy"))
    assert store.writer is not None and store.writer._checkpointer is not None
    checkpointer = store.writer._checkpointer
    checkpointer.interval, checkpointer.wal_bytes = 0.05, 1024 * 1024
    time.sleep(0.3)  # the thread's first wait began with the default interval (0.25 s)
    seq = 0

    def write(batches: int) -> int:
        nonlocal seq
        for _ in range(batches):
            rows = [("loss", seq * 1000 + i, None, 1.0, 0.5) for i in range(1000)]
            store.ingest_metrics(run.id, 0, seq, rows)
            seq += 1
        return seq * 1000

    return store, checkpointer, write


def test_wal_starts_over_under_continuous_writes(tmp_path: Path) -> None:
    """A writer that never pauses never sees a fully copied WAL; the checkpointer makes it so."""
    store, checkpointer, write = _busy_store(tmp_path)
    try:
        checkpointer.restart_every = 0.0  # start over whenever the WAL reaches wal_bytes
        wal = tmp_path / "busy.db-wal"
        deadline = time.monotonic() + 20
        while checkpointer.restarts < 2 and time.monotonic() < deadline:
            write(10)
        first = wal.stat().st_size
        written = write(400)  # ~25 MB more WAL frames: without restarts the file grows by as much
        assert checkpointer.restarts >= 3
        assert wal.stat().st_size < first + 12 * 1024 * 1024, "the WAL kept growing"
        assert store.read(lambda c: c.exec_driver_sql("SELECT count(*) FROM metrics").scalar()) == written
    finally:
        store.close()


def test_writer_pauses_are_rationed_but_the_wal_stays_under_its_cap(tmp_path: Path) -> None:
    """Under heavy ingest the WAL is copied without pausing the writer (PASSIVE checkpoints) and
    starts over (a short pause of every write) only once per ``restart_every`` or at ``wal_cap``."""
    store, checkpointer, write = _busy_store(tmp_path)
    try:
        checkpointer.restart_every, checkpointer.wal_cap = 3600.0, 8 * 1024 * 1024
        wal = tmp_path / "busy.db-wal"
        done = threading.Event()
        writer = threading.Thread(target=lambda: (write(600), done.set()))  # ~45 MB of frames, nonstop
        writer.start()
        largest = 0
        while not done.wait(0.01):
            largest = max(largest, wal.stat().st_size if wal.exists() else 0)
        writer.join()
        assert checkpointer.checkpoints > checkpointer.restarts  # copied without pausing, too
        assert 1 <= checkpointer.restarts <= 8  # only at the cap (8 MB), not at every 1 MB
        assert largest < 8 * 1024 * 1024 + 8 * 1024 * 1024, "the WAL passed its cap"
        size, waiting = checkpointer.wal_state()
        assert 0 <= waiting <= size
    finally:
        store.close()


def test_the_wal_is_synced_in_small_steps_between_checkpoints(tmp_path: Path) -> None:
    """Frames reach the disk every ``sync_bytes`` as they are written, not tens of megabytes at a
    checkpoint's start (a large flush stalls the writer's appends to the same file)."""
    store, checkpointer, write = _busy_store(tmp_path)
    try:
        checkpointer.wal_bytes, checkpointer.wal_cap = 1 << 40, 1 << 40  # no checkpoint at all
        checkpointer.sync_bytes = 1024 * 1024
        deadline = time.monotonic() + 20
        while checkpointer.wal_state()[0] < 8 * 1024 * 1024 and time.monotonic() < deadline:
            write(5)
            time.sleep(checkpointer.sync_interval)  # a steady writer, not a single burst
        size, _waiting = checkpointer.wal_state()
        assert checkpointer.checkpoints == 0 and size >= 8 * 1024 * 1024
        assert checkpointer.syncs >= 4, "the WAL was not synced while it grew"
        assert size - checkpointer._synced < 4 * 1024 * 1024
    finally:
        store.close()


def test_another_process_sees_the_wal_index_in_use_while_the_store_is_open(tmp_path: Path) -> None:
    """The checkpointer reads the wal-index through a descriptor it keeps: closing one would drop
    SQLite's lock that marks the index as in use, and the next process to open the store would
    reinitialise (truncate) the index under the running server."""
    store = Store(tmp_path / "m.db")
    probe = (
        "import fcntl, sys\n"
        "with open(sys.argv[1], 'r+b') as fh:\n"
        "    try:\n"
        "        fcntl.lockf(fh, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 128)\n"  # SQLite's DMS byte
        "    except OSError:\n"
        "        sys.exit(3)\n"
    )
    try:
        run, _ = store.create_run(RunCreate(name="locks"))
        store.ingest_metrics(run.id, 0, 0, [("loss", 1, None, 1.0, 0.5)])
        assert store.writer is not None and store.writer._checkpointer is not None
        checkpointer = store.writer._checkpointer
        time.sleep(3 * checkpointer.interval)  # the thread polls the wal-index a few times first
        assert checkpointer.wal_state()[0] > 0
        shm = str(tmp_path / "m.db-shm")
        held = subprocess.run([sys.executable, "-c", probe, shm], check=False, timeout=30)
        assert held.returncode == 3, "the wal-index's in-use lock was released"
    finally:
        store.close()
