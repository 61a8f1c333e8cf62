"""The single writer on a real SQLite file: group commit, multi-row inserts, rollbacks undone."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable

import pytest

from mlbench_tui.errors import NotFound
from mlbench_tui.store import queries
from mlbench_tui.store import writer as writer_module
from mlbench_tui.store.api_models import RunCreate, RunUpdate
from mlbench_tui.store.linger import LINGER_MIN_RATE, RATE_WINDOW_S, ArrivalRate
from mlbench_tui.store.store import Store


def test_concurrent_writers_are_group_committed(store: Store) -> None:
    run, _ = store.create_run(RunCreate(name="r", workers=8))
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


def test_arrival_rate_is_that_of_the_last_complete_window() -> None:
    rate = ArrivalRate()
    for i in range(300):  # 1,000 requests per second for 0.3 s: busy
        rate.add(i / 1000)
    assert rate.rate >= LINGER_MIN_RATE
    rate.add(10.0)  # after a quiet spell: the spell ends one long window of few arrivals
    assert rate.rate < LINGER_MIN_RATE / 10
    for i in range(1, 10):  # 10 per second: a lightly loaded server writes at once
        rate.add(10.0 + i * RATE_WINDOW_S)
    assert 0 < rate.rate < LINGER_MIN_RATE


def test_a_lingering_loop_commits_every_request_once_in_arrival_order(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Requests that arrive while a busy server's group waits join it: none lost, ids in arrival order."""
    monkeypatch.setattr(writer_module, "LINGER_MIN_RATE", 0.0)  # every group lingers
    run, _ = store.create_run(RunCreate(name="busy", workers=16))
    writer = store.writer
    assert writer is not None
    sent: list[tuple[int, int]] = []  # (rank, step) in arrival order

    async def rank(r: int) -> list[tuple[int, bool]]:
        acks = []
        for seq in range(20):
            rows = [("loss", seq * 10 + i, None, 1.0, float(r)) for i in range(3)]
            sent.extend((r, row[1]) for row in rows)
            params = writer.series.params(run.id, r, rows)
            acks.append(writer.ingest_metrics_async(run.id, r, "s", seq, params))
            await asyncio.sleep(0)  # the next request comes in a later loop iteration
        return list(await asyncio.gather(*acks))

    async def serve() -> list[list[tuple[int, bool]]]:
        writer.attach_loop(asyncio.get_running_loop())
        try:
            return list(await asyncio.gather(*(rank(r) for r in range(16))))
        finally:
            await writer.drain()
            writer.attach_loop(None)

    acks = asyncio.run(serve())
    assert all(ack == (3, False) for per_rank in acks for ack in per_rank)
    got = sqlite3.connect(store.path).execute("SELECT rank, step FROM metrics_v ORDER BY id").fetchall()
    assert got == sent


def test_a_lingering_group_is_written_once_the_clients_waiting_on_it_have_all_sent(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Clients that each wait for their answer before sending again (16 of them) would otherwise
    wait out every linger: a group as large as the recent ones is written at once."""
    run, _ = store.create_run(RunCreate(name="closed-loop", workers=16))
    writer = store.writer
    assert writer is not None

    async def send(r: int, seq: int) -> None:
        params = writer.series.params(run.id, r, [("loss", seq, None, 1.0, float(r))])
        assert await writer.ingest_metrics_async(run.id, r, "s", seq, params) == (1, False)

    async def client(r: int) -> None:
        for seq in range(1, 10):
            await send(r, seq)

    async def serve() -> None:
        writer.attach_loop(asyncio.get_running_loop())
        try:
            await asyncio.gather(*(send(r, 0) for r in range(16)))  # one group of 16, at once
            monkeypatch.setattr(writer_module, "LINGER_MIN_RATE", 0.0)  # from now on every group
            monkeypatch.setattr(writer_module, "LINGER_S", 3600.0)  # lingers an hour but for its early end
            await asyncio.wait_for(asyncio.gather(*(client(r) for r in range(16))), 120)
        finally:
            writer.attach_loop(None)

    asyncio.run(serve())
    assert sqlite3.connect(store.path).execute("SELECT count(*) FROM metrics_v").fetchone() == (160,)


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
    with writer.write_lock:  # the writer takes the first job, then waits here; the rest queue up
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


def test_a_loop_write_waits_out_another_connections_lock_without_stalling_the_loop(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While another connection (an sqlite3 shell) holds the store's write lock, a server's write
    waits in the loop, which keeps serving; it lands once the lock is let go, and past the wait it
    is answered that the store stayed locked, naming the holder."""
    from mlbench_tui.store.engine import StoreLocked

    monkeypatch.setattr(writer_module, "BUSY_TIMEOUT_MS", 1000)
    run, _ = store.create_run(RunCreate(name="locked", workers=1))
    writer = store.writer
    assert writer is not None
    holder = sqlite3.connect(store.path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")

    def send(seq: int) -> asyncio.Future[tuple[int, bool]]:
        params = writer.series.params(run.id, 0, [("loss", seq, None, 1.0, 1.0)])
        return writer.ingest_metrics_async(run.id, 0, "s", seq, params)

    async def ticks_until(fut: asyncio.Future[tuple[int, bool]]) -> int:
        ticks = 0
        while not fut.done():
            await asyncio.sleep(0.005)  # other work the loop does meanwhile
            ticks += 1
        return ticks

    async def serve() -> None:
        writer.attach_loop(asyncio.get_running_loop())
        try:
            refused = send(0)
            assert await ticks_until(refused) > 1  # the loop went on while the write waited
            with pytest.raises(StoreLocked, match="stayed locked by"):
                refused.result()
            monkeypatch.setattr(writer_module, "BUSY_TIMEOUT_MS", 600_000)  # however slow this machine
            landing = send(1)
            for _ in range(3):
                await asyncio.sleep(0.005)
            assert not landing.done()  # waiting, not refused
            holder.execute("ROLLBACK")
            assert await asyncio.wait_for(landing, 60) == (1, False)
        finally:
            writer.attach_loop(None)

    asyncio.run(serve())
    assert sqlite3.connect(store.path).execute("SELECT step FROM metrics_v").fetchall() == [(1,)]


def test_a_thread_write_waits_for_another_connections_lock_then_lands(store: Store) -> None:
    """The writer thread's groups (spool imports, writes without a server loop) wait for a lock
    another connection holds, rather than being refused at once, and land once it is let go."""
    run, _ = store.create_run(RunCreate(name="locked-thread", workers=1))
    holder = sqlite3.connect(store.path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    outcome: list[object] = []

    def write() -> None:
        try:
            outcome.append(store.ingest_metrics(run.id, 0, 0, [("loss", 1, None, 1.0, 1.0)]).accepted)
        except BaseException as exc:
            outcome.append(exc)

    writing = threading.Thread(target=write, daemon=True)
    writing.start()
    writing.join(1.0)
    assert writing.is_alive() and not outcome, outcome  # waiting, not refused
    holder.execute("ROLLBACK")
    writing.join(60)
    assert outcome == [1]
