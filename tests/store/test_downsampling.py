"""``metrics(points=N)`` on a real store: buckets of equal steps per rank, computed in SQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mlbench_tui.store import queries
from mlbench_tui.store.api_models import RunCreate
from mlbench_tui.store.store import Store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "m.db")
    yield s
    s.close()


def test_buckets_per_rank_keep_extremes_and_the_last_point(store: Store) -> None:
    run, _ = store.create_run(RunCreate(name="r", workers=2))
    for rank in (0, 1):
        rows = [("loss", i, i / 100, 1000.0 + i, float(rank)) for i in range(1000)]
        if rank == 1:
            rows[437] = ("loss", 437, 4.37, 1437.0, 99.0)
            rows[901] = ("loss", 901, 9.01, 1901.0, None)
        store.ingest_metrics(run.id, rank, 1, rows)
    store.ingest_metrics(run.id, 0, 2, [("lr", i, None, 1.0, 0.1) for i in range(5)])
    page = store.read(lambda c: queries.metrics(c, run.id, names=["loss"], points=10))
    assert page.downsampled and [(s.name, s.rank) for s in page.series] == [("loss", 0), ("loss", 1)]
    r0, r1 = page.series
    assert r0.step == [99 + 100 * b for b in range(10)]  # equal steps: 100 per bucket, last one kept
    assert r0.t[-1] == 1999.0 and r0.epoch[-1] == 9.99 and r0.value == [0.0] * 10
    assert r1.max is not None and r1.min is not None
    assert r1.max[4] == 99.0 and r1.min[4] == 1.0 and r1.value[4] == 1.0  # the spike survives
    assert r1.max[9] == 1.0 and r1.value[9] == 1.0  # a missing value is no extreme
    cursor = store.read(lambda c: queries.metrics(c, run.id, names=["loss"])).cursor
    assert page.cursor == cursor

    small = store.read(lambda c: queries.metrics(c, run.id, names=["lr"], points=10))
    assert small.series[0].step == [0, 1, 2, 3, 4] and small.series[0].min == [0.1] * 5  # fewer: as is
    one = store.read(lambda c: queries.metrics(c, run.id, names=["loss"], rank=1, points=4))
    assert [s.rank for s in one.series] == [1] and one.series[0].max == [1.0, 99.0, 1.0, 1.0]


def test_rows_without_step_are_bucketed_by_arrival_and_since_is_honoured(store: Store) -> None:
    run, _ = store.create_run(RunCreate(name="r"))
    store.ingest_metrics(run.id, 0, 1, [("val", None, float(i), 10.0 + i, float(i)) for i in range(100)])
    page = store.read(lambda c: queries.metrics(c, run.id, points=10))
    (series,) = page.series
    assert len(series.value) == 10 and series.value[-1] == 99.0 and series.epoch[-1] == 99.0
    assert series.min == [float(10 * b) for b in range(10)] and series.max == series.value
    store.ingest_metrics(run.id, 0, 2, [("val", None, 100.0, 110.0, 100.0)])
    newer = store.read(lambda c: queries.metrics(c, run.id, since=page.cursor, points=10))
    assert newer.series[0].value == [100.0] and newer.cursor > page.cursor
