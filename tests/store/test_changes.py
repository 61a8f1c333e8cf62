"""``MetricChunk``: the writer's flat metric layout, read by name, and the rows it stands for."""

from __future__ import annotations

from mlbench_tui.store.changes import Change, MetricChunk


def test_metric_chunk_reads_columns_points_and_full_rows() -> None:
    names = {3: "loss", 4: "lr"}
    params = [3, 0, 10, 1.0, 100.0, 0.5, 4, 1, 10, None, 100.5, 0.1, 7, 1, None, 2.0, 101.0, None]
    chunk = MetricChunk(41, "r-1", params, names)
    assert len(chunk) == 3 and chunk.last_id == 43
    assert chunk.column("series") == [3, 4, 7] and chunk.column("value") == [0.5, 0.1, None]
    assert chunk.column("rank") == [0, 1, 1] and chunk.column("t") == [100.0, 100.5, 101.0]
    assert chunk.point(1) == [10, None, 100.5, 0.1]  # step, epoch, t, value
    assert chunk.rows() == [
        (41, "r-1", 0, "loss", 10, 1.0, 100.0, 0.5),
        (42, "r-1", 1, "lr", 10, None, 100.5, 0.1),
        (43, "r-1", 1, "", None, 2.0, 101.0, None),  # a series without a name yet
    ]


def test_a_metrics_change_builds_its_rows_from_its_chunk_once() -> None:
    chunk = MetricChunk(1, "r-1", [3, 0, 1, None, 5.0, 0.25], {3: "loss"})
    change = Change("metrics", "r-1", metrics=chunk)
    assert change.rows == [(1, "r-1", 0, "loss", 1, None, 5.0, 0.25)]
    assert change.rows is change.rows
    plain = Change("logs", "r-1", [(7, "r-1", 0, "stdout", 1, 5.0, "hello")])
    assert plain.metrics is None and len(plain.rows) == 1
    assert Change("run_deleted", "r-1").rows == []
