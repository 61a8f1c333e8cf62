"""Task 0a across runs: curves read from a run's metrics, repeats aggregated size by size."""

from __future__ import annotations

import pytest

from mlbench_tui.results.allreduce import SweepRun, aggregate, run_curves, sweep_json, sweep_tables
from mlbench_tui.results.time_to_accuracy import MetricPoint


def points(dtype: str, figure: str, values: dict[int, float], rank: int = 0) -> list[MetricPoint]:
    return [MetricPoint(f"allreduce_{dtype}_{figure}", v, rank, size) for size, v in values.items()]


def test_run_curves_reads_rank_zero_per_dtype_and_size() -> None:
    metrics = [
        *points("fp32", "busbw", {1: 0.01, 100: 1.0}),
        *points("fp32", "latency_p50", {1: 1e-4, 100: 2e-4}),
        *points("fp32", "latency_p99", {1: 3e-4}),
        *points("fp32", "busbw", {1: 99.0}, rank=1),  # other ranks time the same collective: ignored
        *points("fp16", "algbw", {1: 5.0}),  # not a figure the sweep tables show
        MetricPoint("train_loss", 1.0, 0, 1),
    ]
    curves = run_curves(metrics)
    assert list(curves) == ["fp32"]
    small, large = curves["fp32"]
    assert (small.size, small.busbw_gbps, small.latency_p50_s, small.latency_p99_s) == (1, 0.01, 1e-4, 3e-4)
    assert (large.size, large.busbw_gbps, large.latency_p99_s) == (100, 1.0, None)


def run(backend: str, workers: int, busbw: dict[int, float], framework: str = "pytorch") -> SweepRun:
    return SweepRun(framework, backend, workers, run_curves(points("fp32", "busbw", busbw)))


def test_aggregate_olympic_mean_per_size_with_min_and_max() -> None:
    curves = aggregate(
        [
            run("gloo", 2, {8: 1.0, 64: 2.0}),
            run("gloo", 2, {8: 3.0, 64: 2.5}),
            run("gloo", 2, {8: 100.0}),  # an outlier repeat: dropped by the olympic mean
            run("mpi", 2, {8: 4.0}),
        ]
    )
    assert [(c.label, c.dtype, c.runs) for c in curves] == [("gloo 2w", "fp32", 3), ("mpi 2w", "fp32", 1)]
    small, large = curves[0].points
    assert (small.size, small.bytes, small.runs) == (8, 32, 3)
    assert small.busbw_gbps is not None
    assert (small.busbw_gbps.mean, small.busbw_gbps.low, small.busbw_gbps.high) == (3.0, 1.0, 100.0)
    assert large.runs == 2 and large.busbw_gbps is not None
    assert large.busbw_gbps.mean == pytest.approx(2.25)
    assert large.latency_p50_s is None
    assert curves[0].best_busbw is small


def test_aggregate_keeps_frameworks_and_world_sizes_apart() -> None:
    curves = aggregate(
        [run("gloo", 2, {8: 1.0}), run("gloo", 4, {8: 1.0}), run("gloo", 2, {8: 1.0}, "tensorflow")]
    )
    assert [c.label for c in curves] == ["gloo 2w", "gloo 4w", "tensorflow gloo 2w"]


def test_sweep_tables_one_per_dtype_a_row_per_size_and_columns_per_configuration() -> None:
    gloo = run_curves(
        [*points("fp32", "busbw", {8: 0.5, 64: 1.25}), *points("fp32", "latency_p50", {8: 2e-4, 64: 1.5e-3})]
    )
    mpi = run_curves([*points("fp32", "busbw", {8: 2.0}), *points("fp16", "busbw", {8: 1.0})])
    curves = aggregate([SweepRun("pytorch", "gloo", 2, gloo), SweepRun("pytorch", "mpi", 4, mpi)])
    fp16, fp32 = sweep_tables(curves).split("\n\n")
    assert fp32.splitlines() == [
        "all-reduce fp32: p50 latency and bus bandwidth per message size "
        "(one run each of gloo 2w, mpi 4w)",  # no olympic mean of one run
        "SIZE  BYTES  gloo 2w P50 us  gloo 2w BUSBW  mpi 4w BUSBW",  # mpi measured no latency: no column
        "8     32     200             500 MB/s       2.00 GB/s",  # in a unit that reads 1 or more
        "64    256    1500            1.25 GB/s      -",
    ]
    assert fp16.splitlines()[2] == "8     16     1.00 GB/s"
    (document,) = [c for c in sweep_json(curves) if c["backend"] == "gloo"]
    assert document["points"][1]["busbw_gbps"] == {"mean": 1.25, "low": 1.25, "high": 1.25, "cv": None}
    assert document["points"][1]["bytes"] == 256
