"""``mlbench results`` of a 0a sweep: latency and bus bandwidth per message size, by backend and
world size with repeats aggregated, as a table and as JSON (the recorded 16-run store)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

STORE = Path(__file__).resolve().parents[1] / "fixtures" / "report" / "store.sqlite3"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    shutil.copyfile(STORE, tmp_path / "store.db")
    env = {**os.environ, "MLBENCH_DB": str(tmp_path / "store.db"), "MLBENCH_HOME": str(tmp_path / "home")}
    env.pop("MLBENCH_SERVER_URL", None)
    return env


def results(env: dict[str, str], *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "mlbench_tui", "results", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_sweep_table_per_size_backend_and_world_size(env: dict[str, str]) -> None:
    text = results(env, "report-allreduce")
    runs, fp16, fp32 = text.split("\n\n")  # no repeat scores: a sweep has no goal to score
    head, *rows = runs.splitlines()
    assert len(rows) == 8 and "REACHED" not in head  # no run has a goal: the column is left out
    # each run's row says what it measured; the figures are the per-size tables that follow
    assert "report-allreduce-gloo-2w-r0  succeeded  fp16 16 sizes, fp32 16 sizes (tables below)" in runs
    assert "report-allreduce-mpi-4w-r1   succeeded  fp32 16 sizes (tables below)" in runs
    assert "peak" not in runs and "GB/s" not in runs
    head, *lines = fp32.splitlines()[1:]
    rows = [line for line in lines if line[0].isdigit()]  # the notes under the table name spreads
    assert fp32.splitlines()[0] == (
        "all-reduce fp32: p50 latency and bus bandwidth per message size "
        "(olympic mean of gloo 2w x2, gloo 4w x2, mpi 2w x2, mpi 4w x2)"
    )
    columns = [c.strip() for c in head.split("  ") if c.strip()]
    assert columns[:2] == ["SIZE", "BYTES"]
    assert columns[2:] == [
        f"{config} {figure}"
        for config in ("gloo 2w", "gloo 4w", "mpi 2w", "mpi 4w")
        for figure in ("P50 us", "CV", "BUSBW")
    ]  # two repeats each: the latency's coefficient of variation beside its olympic mean
    assert len(rows) == 16  # the spec's 16 sizes
    assert rows[0].split()[:2] == ["1", "4"] and rows[-1].split()[:2] == ["1000000", "4000000"]
    assert "mpi" not in fp16.splitlines()[1]  # Open MPI has no fp16 reduction: gloo only


def test_sweep_json_carries_every_figure_with_its_spread(env: dict[str, str]) -> None:
    document = json.loads(results(env, "report-allreduce", "-o", "json"))
    curves = {(c["backend"], c["workers"], c["dtype"]): c for c in document["allreduce"]}
    assert sorted(curves) == [
        ("gloo", 2, "fp16"), ("gloo", 2, "fp32"), ("gloo", 4, "fp16"), ("gloo", 4, "fp32"),
        ("mpi", 2, "fp32"), ("mpi", 4, "fp32"),
    ]  # fmt: skip
    point = curves[("mpi", 2, "fp32")]["points"][-1]
    assert point["size"] == 1_000_000 and point["runs"] == 2
    busbw = point["busbw_gbps"]
    assert busbw["low"] <= busbw["mean"] <= busbw["high"]
    assert busbw["mean"] == pytest.approx((busbw["low"] + busbw["high"]) / 2)  # two repeats
    assert set(point) == {"size", "bytes", "runs", "latency_p50_s", "latency_p99_s", "busbw_gbps"}


def test_training_runs_have_no_sweep_tables(env: dict[str, str]) -> None:
    text = results(env, "report-train")
    assert "all-reduce" not in text
    assert json.loads(results(env, "report-train", "-o", "json"))["allreduce"] == []
