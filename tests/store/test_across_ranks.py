"""Reads across ranks on a real store: every rank's latest point, percentile bands across ranks,
and the bounded work behind both (rows read do not grow with the length of the run)."""

from __future__ import annotations

import sqlite3

from mlbench_tui.store import across_ranks
from mlbench_tui.store.api_models import RunCreate
from mlbench_tui.store.store import Store


def _run(store: Store, ranks: int) -> str:
    run, _ = store.create_run(RunCreate(name="wide", workers=ranks))
    return run.id


def _rows_read(store: Store, fn: object) -> tuple[object, int]:
    """``fn(conn)``'s answer and how many virtual-machine steps SQLite ran for it (a count of
    the work done, unlike a wall-clock time)."""
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 10
        return 0

    with store.engine.connect() as conn:
        raw = conn.connection.driver_connection
        assert isinstance(raw, sqlite3.Connection)
        raw.set_progress_handler(count, 10)
        try:
            answer = fn(conn)  # type: ignore[operator]
        finally:
            raw.set_progress_handler(None, 10)
    return answer, steps


def test_latest_is_each_rank_s_highest_step_and_a_lagging_rank_is_found(store: Store) -> None:
    run_id = _run(store, 4)
    for rank in range(4):
        last = 5 if rank == 2 else 200  # rank 2 stopped reporting long ago
        rows = [("step_time", step, step / 100, 1000.0 + step, 1000.0 * rank + step) for step in range(last)]
        store.ingest_metrics(run_id, rank, 1, rows)
    store.ingest_metrics(run_id, 1, 2, [("step_time", 150, None, 5000.0, 9.0)])  # late, older step
    store.ingest_metrics(run_id, 0, 2, [("loss", None, None, 1.0, 3.0), ("loss", None, None, 2.0, 2.0)])
    page = store.read(lambda c: across_ranks.latest_by_rank(c, run_id, ["step_time", "loss", "absent"]))
    step_time, loss = page.series
    assert step_time.rank == [0, 1, 2, 3] and step_time.step == [199, 199, 4, 199]
    assert step_time.value == [199.0, 1199.0, 2004.0, 3199.0]
    assert step_time.epoch == [1.99, 1.99, 0.04, 1.99]  # the epoch of each rank's latest point
    assert (loss.name, loss.rank, loss.value, loss.step) == ("loss", [0], [2.0], [None])  # no steps: newest
    assert page.cursor == store.read(lambda c: across_ranks._top(c))


def test_latest_reads_about_the_ranks_not_the_run(store: Store) -> None:
    """The walk down the index stops once every rank was seen: ten times the history costs the
    same."""
    run_id = _run(store, 64)
    costs = []
    for steps in (50, 500):
        for rank in range(64):
            rows = [("step_time", s, None, float(s), 0.1) for s in range(steps - 50, steps)]
            store.ingest_metrics(run_id, rank, steps, rows)
        page, cost = _rows_read(store, lambda c: across_ranks.latest_by_rank(c, run_id, ["step_time"]))
        assert page.series[0].step == [steps - 1] * 64  # type: ignore[attr-defined]
        costs.append(cost)
    assert costs[1] < 1.5 * costs[0], costs


def test_bands_are_percentiles_across_ranks_step_by_step(store: Store) -> None:
    run_id = _run(store, 10)
    for rank in range(10):  # rank r takes (r + 1) ms at every step; rank 7 spikes at step 3
        rows = [("step_time", s, None, 100.0 + s, (rank + 1) / 1000) for s in range(5)]
        if rank == 7:
            rows[3] = ("step_time", 3, None, 103.0, 0.5)
        store.ingest_metrics(run_id, rank, 1, rows)
    page = store.read(lambda c: across_ranks.rank_bands(c, run_id, ["step_time"], points=100))
    (band,) = page.bands
    assert band.step == [0, 1, 2, 3, 4] and band.t == [100.0, 101.0, 102.0, 103.0, 104.0]
    assert band.ranks == [10] * 5
    assert band.p50 == [0.005, 0.005, 0.005, 0.005, 0.005]  # nearest rank: the 5th of 10
    assert band.p90 == [0.009, 0.009, 0.009, 0.01, 0.009]
    assert band.max == [0.01, 0.01, 0.01, 0.5, 0.01] and band.max_rank == [9, 9, 9, 7, 9]
    assert page.cursor == store.read(lambda c: across_ranks._top(c))


def test_downsampled_bands_read_points_times_ranks_rows(store: Store) -> None:
    """A long run's bands sample the last step of each bucket: the work stays about the same
    when the history grows tenfold."""
    run_id = _run(store, 16)
    costs = []
    for steps in (200, 2000):
        first = 0 if steps == 200 else 200
        for rank in range(16):
            rows = [("step_time", s, None, float(s), 1.0 + rank) for s in range(first, steps)]
            store.ingest_metrics(run_id, rank, steps, rows)
        page, cost = _rows_read(store, lambda c: across_ranks.rank_bands(c, run_id, ["step_time"], 20))
        (band,) = page.bands  # type: ignore[attr-defined]
        assert len(band.step) == 20 and band.step[-1] == steps - 1 and band.ranks == [16] * 20
        assert band.p50 == [8.0] * 20 and band.max == [16.0] * 20 and band.max_rank == [15] * 20
        costs.append(cost)
    assert costs[1] < 1.5 * costs[0], costs


def test_bands_of_a_metric_without_steps_bucket_time(store: Store) -> None:
    run_id = _run(store, 3)
    for rank in range(3):
        rows = [("sys/gpu_power_w", None, None, 1000.0 + t, 100.0 * (rank + 1) + t) for t in range(100)]
        store.ingest_metrics(run_id, rank, 1, rows)
    (band,) = store.read(lambda c: across_ranks.rank_bands(c, run_id, ["sys/gpu_power_w"], 4)).bands
    assert band.step == [None] * 4 and band.ranks == [3] * 4
    assert band.t == [1024.0, 1049.0, 1074.0, 1099.0]  # each rank's last sample per quarter
    assert band.p50 == [224.0, 249.0, 274.0, 299.0] and band.max == [324.0, 349.0, 374.0, 399.0]
