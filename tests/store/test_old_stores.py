"""Stores written by earlier versions open, migrate and report: copies of two real H200 stores
(``tests/fixtures/stores/h200-2026-11-27``, recorded with main at c8d4d0f) read through the CLI
as a user would, and every figure reads in its unit (never ``0.0s``, ``5.15e-05 kWh``,
``$0.0000`` or ``0M``)."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from mlbench_tui.store.migrations import MIGRATIONS, applied

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "stores" / "h200-2026-11-27"
NOT_HUMAN = ("e-0", "e+0", "0.0s", "$0.0000", " 0M", "kWh ")


def copy_store(name: str, tmp_path: Path) -> dict[str, str]:
    home = tmp_path / name
    shutil.copytree(FIXTURES / name, home)
    env = {**os.environ, "MLBENCH_HOME": str(home)}
    for variable in ("MLBENCH_SERVER_URL", "MLBENCH_DB"):
        env.pop(variable, None)
    return env


def mlbench(env: dict[str, str], *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "mlbench_tui", *args], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    return proc.stdout


def readable(text: str) -> None:
    for pattern in NOT_HUMAN:
        assert pattern not in text, pattern


@pytest.fixture
def suite(tmp_path: Path) -> dict[str, str]:
    return copy_store("suite", tmp_path)


@pytest.fixture
def holdout(tmp_path: Path) -> dict[str, str]:
    return copy_store("holdout", tmp_path)


def test_an_old_store_opens_and_ends_at_the_current_schema(suite: dict[str, str]) -> None:
    table = mlbench(suite, "status")
    assert len(table.splitlines()) == 10  # a header and the nine runs
    with sqlite3.connect(Path(suite["MLBENCH_HOME"]) / "mlbench.db") as conn:
        assert applied(conn) == [name for name, _ in MIGRATIONS]


def test_suite_status_reads_durations_and_failures(suite: dict[str, str]) -> None:
    table = mlbench(suite, "status")
    readable(table)
    assert "Prec@1 93.26 (goal >= 80.0) in 28.6 ms" in table  # read "in 0.0s"
    assert "Prec@1 97.07 (goal >= 70.0) in 0.425 s" in table
    assert (
        "Perplexity 129.3 (goal <= 90.0): rank 0 failed: AcceleratorError: CUDA error: "
        "an illegal memory access was encountered\n" in table
    )  # the reason's first line, not the CUDA advice after it
    assert "fp32 latency 24.8 us (1 rank: no bandwidth)" in table
    detail = mlbench(suite, "status", "gpu-1a-fp32-graphs-nccl-1w")
    readable(detail)
    assert "precision fp32" in detail
    assert "graphs:   CUDA graphs, captured in 0.486 s (apart from the time to accuracy)" in detail


def test_suite_results_mark_implementation_and_capture(suite: dict[str, str]) -> None:
    text = mlbench(suite, "results")
    readable(text)
    runs = text.split("\n\n")[0]
    head, *rows = runs.splitlines()
    assert head.split()[:4] == ["RUN", "STATE", "IMPL", "RESULT"]
    assert "CAPTURE" in head and "SPEEDUP" not in head and "EFFICIENCY" not in head  # one worker count
    assert "COST" not in head  # no run had a price per hour: the column is left out
    row = next(r for r in rows if r.startswith("gpu-2a-fp32-graphs-nccl-1w"))
    assert row.split()[2:4] == ["fp32", "graphs"] and "28.6 ms" in row and "0.205 s" in row
    eager = next(r for r in rows if r.startswith("gpu-2a-fp32-nccl-1w "))
    assert eager.split()[2] == "fp32" and "graphs" not in eager


def test_holdout_aggregates_leave_the_cancelled_repeat_out(holdout: dict[str, str]) -> None:
    text = mlbench(holdout, "results")
    readable(text)
    assert "(olympic mean of nccl 1w x8)" in text  # read x9: the cancelled r8 was in it
    assert text.count("left out of nccl 1w: g-race-nccl-1w-r8 (cancelled)") == 2  # fp16 and fp32
    assert "! latency spread too wide to compare (CV above 5%): nccl 1w at 4 of 4 sizes" in text
    assert "1     4      59.0            35.8% !" in text  # fp32 at one element: mean and its CV
    failed = next(line for line in text.splitlines() if line.startswith("g-model-nccl-1w"))
    assert "Prec@1 - (goal >= 70.0): rank 0 failed: ConfigError: rank 0 got GPU 0 'NVIDIA H200'" in failed
    energy = next(line for line in text.splitlines() if line.startswith("g-energy-nccl-1w"))
    assert energy.split()[:3] == ["g-energy-nccl-1w", "succeeded", "bf16"]
    assert "185 J" in energy and "0.0000154 USD" in energy and "236 MiB" in energy


def test_holdout_status_prices_energy_with_its_currency(holdout: dict[str, str]) -> None:
    detail = mlbench(holdout, "status", "g-energy-nccl-1w")
    readable(detail)
    assert (
        "energy:   185 J to accuracy (all GPUs, NVML energy counter), 0.0000154 USD at 0.300 USD/kWh"
        in detail
    )
    assert "gpu memory: peak 236 MiB allocated" in detail
    # one step time everywhere: the median after the warm-up (this store has report windows only),
    # and the rank's busy time within its step (it read "busy 19.5 ms" beside "step 9.07 ms")
    assert "step:     9.07 ms median of 44 steps in 5 report windows after a 20-step warm-up" in detail
    assert "step 9.07 ms (median)" in detail and "busy 8.95 ms" in detail
    failed = mlbench(holdout, "status", "g-model-nccl-1w")
    assert "gpu memory: peak 0 B allocated" in failed  # it failed before allocating: read "peak 0M"


def test_json_keeps_raw_si_values(holdout: dict[str, str]) -> None:
    document = json.loads(mlbench(holdout, "results", "g-energy-nccl-1w", "-o", "json"))
    (run,) = document["runs"]
    assert run["telemetry"]["energy_to_accuracy_j"] == pytest.approx(185.33, abs=0.01)
    assert run["telemetry"]["energy_cost"] == pytest.approx(1.5444e-5, rel=1e-3)
    assert run["time_to_accuracy_s"] == pytest.approx(1.2701, abs=1e-4) and run["precision"] == "bf16"
