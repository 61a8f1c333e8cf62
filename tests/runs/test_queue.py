"""A sweep's queue is in the store: while its first point runs, the others are registered
``pending`` with the apply that queued them, so ``mlbench status`` (and the TUI) show them, as
k9s and SkyPilot show a queue. If apply stops before starting them they end ``cancelled`` with
the reason: by apply itself on Ctrl-C, and after a ``kill -9`` by the next command that reads them.

Real CLI, real ranks: the first point's rank hangs before its first step (``MLBENCH_INJECT_FAULT``),
so the queue stays put until the test acts, however fast or slow the machine."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.waiting import wait_for

pytestmark = pytest.mark.slow

SWEEP = """\
apiVersion: mlbench/v1
kind: Benchmark
metadata:
  name: queue
spec:
  task: 0a
  workers: [1, 2]
  backend: gloo
  max_time: 10m
  data: synthetic
  hyperparameters: {sizes_max_exp: 2, num_sizes: 3, repetitions: 2, warmup: 1, dtypes: [fp32]}
  env:
    MLBENCH_INJECT_FAULT: rank=0,step=0,mode=hang
"""


def mlbench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mlbench_tui", *args], capture_output=True, text=True, timeout=120
    )


def runs() -> dict[str, Any]:
    listed = mlbench("status", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    return {run["name"]: run for run in json.loads(listed.stdout)["runs"]}


def start_apply(tmp_path: Path) -> subprocess.Popen[str]:
    spec = tmp_path / "queue.yaml"
    spec.write_text(SWEEP)
    return subprocess.Popen(
        [sys.executable, "-m", "mlbench_tui", "apply", str(spec)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def queued(apply: subprocess.Popen[str]) -> dict[str, Any]:
    """Wait until the first point runs and the second waits in the queue; the runs then."""

    def ready() -> dict[str, Any] | None:
        now = runs()
        first, second = now.get("queue-gloo-1w"), now.get("queue-gloo-2w")
        if first and second and first["state"] == "running" and second["state"] == "pending":
            return now
        return None

    now = wait_for(ready, "the queued run to be ready")
    assert now["queue-gloo-2w"]["labels"]["mlbench.io/queued-by"].endswith(f":{apply.pid}")
    assert now["queue-gloo-2w"]["handle"] is None
    assert now["queue-gloo-2w"]["owner"]["pid"] == apply.pid  # owned: a second apply cannot queue it too
    table = mlbench("status").stdout
    line = next(line for line in table.splitlines() if "queue-gloo-2w" in line)
    assert "pending" in line and f"queued by apply (pid {apply.pid})" in line
    return now


def test_ctrl_c_cancels_the_queue_with_its_reason(tmp_path: Path) -> None:
    apply = start_apply(tmp_path)
    try:
        queued(apply)
        os.killpg(apply.pid, signal.SIGINT)
        apply.wait(timeout=120)
    finally:
        if apply.poll() is None:
            os.killpg(apply.pid, signal.SIGKILL)
            apply.wait()
    after = runs()
    second = after["queue-gloo-2w"]
    assert second["state"] == "cancelled"
    assert second["error"] == "apply was interrupted before it started this run"
    assert after["queue-gloo-1w"]["state"] == "cancelled"  # the running point was cancelled too


def test_a_killed_apply_leaves_no_run_pending_for_ever(tmp_path: Path) -> None:
    apply = start_apply(tmp_path)
    try:
        now = queued(apply)
        os.kill(apply.pid, signal.SIGKILL)  # the apply alone: its first point's rank hangs on
        apply.wait(timeout=30)
        table = mlbench("status")  # the next command that reads the queue ends it, saying why
        assert table.returncode == 0, table.stderr
        second = runs()["queue-gloo-2w"]
        assert second["state"] == "cancelled"
        assert second["error"] == f"the apply that queued it (pid {apply.pid}) ended before starting it"
    finally:
        if apply.poll() is None:
            os.killpg(apply.pid, signal.SIGKILL)
            apply.wait()
        first = runs().get("queue-gloo-1w") if "now" in locals() else None
        if first is not None and first["state"] == "running":
            mlbench("cancel", first["id"])  # its hanging rank
