"""A store never serves a figure today's rules would not print: a result computed by other rules
(here, a real H200 store recorded before GPU utilisation needed 60 readings, which stored "0%"
under a panel that climbs to 51%) is recomputed from the run's stored metrics and events when it
is read, stored, and says which version did it; ``mlbench results --recompute`` forces it."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from mlbench_tui.errors import MlbenchError
from mlbench_tui.results.provenance import rules_digest
from mlbench_tui.server.serve import EmbeddedServer
from mlbench_tui.store.api_models import RunCreate
from mlbench_tui.store.reader import StoreReader

SUITE = Path(__file__).resolve().parents[1] / "fixtures" / "stores" / "h200-2026-11-27" / "suite"
RUN = "r-bd7119eb5cb2"  # gpu-1a-fp32-nccl-1w: one 1 s utilisation sample inside its 1.4 s of training


def stored(db: Path, run_id: str) -> dict[str, object]:
    with sqlite3.connect(db) as conn:
        (text,) = conn.execute("SELECT result FROM runs WHERE id = ?", (run_id,)).fetchone()
    return dict(json.loads(text))


@pytest.fixture
def home(tmp_path: Path) -> Path:
    shutil.copytree(SUITE, tmp_path / "suite")
    return tmp_path / "suite"


def test_a_stale_result_is_recomputed_when_read_and_stored_once(home: Path) -> None:
    db = home / "mlbench.db"
    before = stored(db, RUN)
    assert before["telemetry"]["mean_gpu_util"] == 0.0  # type: ignore[index]  # what the old rules stored
    assert "computed_by" not in before
    assert StoreReader.open(db) is None  # the file alone would serve it stale: a server must read it
    with EmbeddedServer(db, record=False) as server, server.info.client() as client:
        result = client.get_run(RUN).result
        assert result is not None and result.telemetry is not None
        assert result.telemetry.mean_gpu_util is None  # today's rule: below 60 readings, no figure
        assert result.telemetry.gpu_util_note == "n/a: 1 reading in 1.4 s"
        assert result.computed_by is not None
        assert (result.computed_by.rules, result.computed_by.recomputed_from) == (rules_digest(), "")
        assert result.reached and result.time_to_accuracy_s == pytest.approx(1.37, abs=0.005)  # kept
        listed = {run.id: run.result for run in client.list_runs()}  # the list recomputes the others
        assert all(
            r is not None and r.computed_by and r.computed_by.rules == rules_digest() for r in listed.values()
        )
        assert listed[RUN] == result
        after = stored(db, RUN)
        assert after["computed_by"]["rules"] == rules_digest()  # type: ignore[index]
        assert client.get_run(RUN).result == result  # stored: read again, not recomputed again
        failed = client.get_run("r-adc198d54238")  # the failed 3a graphs run keeps its state and reason
        assert failed.state.value == "failed" and failed.result is not None
        assert failed.result.message and "illegal memory access" in failed.result.message
    reader = StoreReader.open(db)  # every result is current now: the file itself answers
    assert reader is not None
    with reader:
        assert reader.get_run(RUN).result == result


def test_recompute_forces_it_and_refuses_a_run_without_a_result(home: Path) -> None:
    with EmbeddedServer(home / "mlbench.db", record=False) as server, server.info.client() as client:
        client.get_run(RUN)  # recomputed once already
        again = client.recompute_result(RUN).result
        assert again is not None and again.computed_by is not None
        assert again.computed_by.recomputed_from == rules_digest()  # it replaced a result of today's rules
        pending = client.create_run(RunCreate(name="pending")).run
        with pytest.raises(MlbenchError, match="has not ended"):
            client.recompute_result(pending.id)


def test_the_cli_says_which_version_recomputed(home: Path) -> None:
    env = {**os.environ, "MLBENCH_HOME": str(home), "COLUMNS": "200"}
    for variable in ("MLBENCH_SERVER_URL", "MLBENCH_DB"):
        env.pop(variable, None)

    def mlbench(*args: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, "-m", "mlbench_tui", *args], env=env, capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
        return proc

    detail = mlbench("status", "gpu-1a-fp32-nccl-1w").stdout
    assert "gpu util: n/a: 1 reading in 1.4 s\n" in detail and "util 0%" not in detail
    assert f"computed: mlbench 0.1.0, result rules {rules_digest()} (recomputed" in detail
    forced = mlbench("results", "--recompute")
    assert f"recomputed 9 result(s) with mlbench 0.1.0, result rules {rules_digest()}" in forced.stderr
    row = next(line for line in forced.stdout.splitlines() if line.startswith("gpu-1a-fp32-nccl-1w "))
    assert "n/a: 1 reading in 1.4 s" in row  # the GPU UTIL column, as status says it
