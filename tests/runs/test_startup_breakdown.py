"""Where a real run's seconds before training went: two gloo ranks report their start phases,
``mlbench status`` and ``mlbench results`` show the launcher's part and the slowest rank's
phases, MLPerf's log initialises from rank 0's process start to its run_start, and the time to
accuracy stays training time only."""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import pytest
from support.smoke import apply_one, mlbench

pytestmark = pytest.mark.slow

SPEC = """\
apiVersion: mlbench/v1
kind: Benchmark
metadata: {name: boot}
spec:
  task: 2a
  goal: light
  workers: 2
  backend: gloo
  data: synthetic
"""


def test_a_run_shows_where_its_start_went(tmp_path: Path) -> None:
    run = apply_one(tmp_path, SPEC)
    startup = run["startup"]
    assert startup["ranks"] == 2 and startup["slowest_rank"] in (0, 1)
    assert list(startup["phases"]) == [
        "interpreter",
        "imports",
        "device",
        "rendezvous",
        "environment",
        "data",
        "lazy_imports",  # torch's compiler stack, imported by the first optimizer (~0 when forked)
        "model",
        "first_step",
    ]
    assert startup["launcher"] == "spawn" and startup["launcher_s"] >= 0
    assert run["time_to_accuracy_s"] < run["wall_time_s"]  # training only: no start, no validation
    status = mlbench("status", "boot-gloo-2w").stdout
    assert re.search(
        r"(?m)^startup:  [^;]+ before training; spawn [^;]+; rank [01] \(slowest of 2\): ", status
    )

    archive = tmp_path / "boot.zip"
    assert mlbench("export", "boot-gloo-2w", "--out", str(archive)).returncode == 0
    with zipfile.ZipFile(archive) as zf:
        lines = [
            json.loads(line.removeprefix(":::MLLOG ")) for line in zf.read("mllog.txt").decode().splitlines()
        ]
        events = json.loads(zf.read("events.json"))
    at = {
        line["key"]: line["time_ms"]
        for line in lines
        if line["key"] in ("init_start", "init_stop", "run_start")
    }
    assert at["init_start"] <= at["init_stop"] == at["run_start"]
    # MLPerf's initialisation is what rank 0 stamped: its process start to its run_start
    (rank0,) = [e["payload"] for e in events if e["kind"] == "startup" and e["rank"] == 0]
    assert at["init_start"] == pytest.approx(rank0["process_start_t"] * 1000, abs=1)
    before_run = sum(
        rank0["phases"][p]
        for p in (
            "interpreter",
            "imports",
            "device",
            "rendezvous",
            "environment",
            "data",
            "lazy_imports",
            "model",
        )
    )
    assert (at["init_stop"] - at["init_start"]) / 1000 == pytest.approx(before_run, abs=0.1)
