"""kill -9 of the metrics server during a real 2-rank run: nothing the ranks produced is lost, and
the run's recorded state and result are what the ranks themselves logged.

The quick start's ResNet-20 on synthetic CIFAR-10 (2 gloo ranks, seed 42) reaches its light goal
at its third epoch; each rank logs every epoch's global validation figures and the epoch it
reached the goal at. The store must hold the same figures and the same outcome, however often
and wherever the server died: ``apply`` re-attaches to a restarted server and keeps watching; a
rank that reached no server keeps its spool, and the next command imports it.
"""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import pytest

from mlbench_tui.executors.local import processes
from mlbench_tui.store.reader import StoreReader

from .conftest import (
    home,
    kill_server,
    rank_log,
    run_dirs,
    run_mlbench,
    server_record,
    start_mlbench,
    store_path,
    wait_for,
)

pytestmark = pytest.mark.slow

SPEC = """\
apiVersion: mlbench/v1
kind: Benchmark
metadata:
  name: killed
spec:
  task: resnet20-cifar10
  goal: light
  max_time: 5m
  workers: 2
  backend: gloo
  hardware:
    cpu: "1"
  target: local
  data:
    source: synthetic
    options:
      train_samples: 2048
      val_samples: 512
  hyperparameters:
    batch_size: 64
  seed: 42
"""
EPOCH = re.compile(r"\[rank 0\] epoch (\d+): .*val_global_Prec@1=([\d.]+)")
GOAL = re.compile(r"\[rank 0\] goal reached at epoch (\d+)")


def _spec(tmp_path: Path) -> Path:
    path = tmp_path / "killed.yaml"
    path.write_text(SPEC)
    return path


def _run_id() -> str:
    found = wait_for(lambda: [d for d in run_dirs() if (d / "launch.json").exists()], "the run to launch")
    assert isinstance(found, list)
    return str(found[0].name)


def _logged(run_id: str, text: str) -> bool:
    return text in rank_log(run_id, 0)


def _new_server(old_pid: int) -> bool:
    info = server_record()
    return info is not None and info.pid != old_pid and processes.is_alive(info.pid)


def _check_record(run_id: str) -> None:
    """The stored figures and outcome are the ones rank 0 logged."""
    log = rank_log(run_id, 0)
    logged = {int(m[1]): m[2] for m in EPOCH.finditer(log)}  # as printed: 4 significant digits
    goal = GOAL.search(log)
    assert goal is not None and logged, log
    reader = StoreReader.open(store_path())
    assert reader is not None
    with reader:
        run = reader.get_run(run_id)
        page = reader.metrics(run_id, "val_global_Prec@1", rank=0)
    stored = {round(e): v for s in page.series for e, v in zip(s.epoch, s.value, strict=True) if e}
    assert {epoch: f"{value:.4g}" for epoch, value in stored.items()} == logged  # each epoch's, none more
    assert run.state.value == "succeeded", run.error
    assert run.result is not None and run.result.reached is True
    assert run.result.epochs_to_goal == int(goal[1])
    assert run.result.best_value == max(stored.values())
    spool = home() / "state" / "runs" / run_id / "spool"
    assert not list(spool.glob("*.jsonl")), "every spooled batch was imported"


def test_apply_carries_on_across_server_kills_and_the_record_is_what_the_ranks_logged(tmp_path: Path) -> None:
    apply = start_mlbench("apply", str(_spec(tmp_path)))
    try:
        run_id = _run_id()
        killed = kill_server()  # 1: launched, ranks still starting
        wait_for(lambda: _logged(run_id, "epoch 1:"), "rank 0's first epoch")
        wait_for(lambda: _new_server(killed), "apply to restart the server")
        killed = kill_server()  # 2: mid-training
        wait_for(lambda: _logged(run_id, "run stopped"), "rank 0 to stop")
        wait_for(lambda: _new_server(killed), "a restarted server")
        kill_server()  # 3: the ranks are flushing their last batches, apply about to record the end
        out, err = apply.communicate(timeout=240)
    finally:
        if apply.poll() is None:
            apply.kill()
    assert apply.returncode == 0, err
    assert "Traceback" not in err and "cannot reach" not in err
    assert re.search(r"killed-gloo-2w\s+succeeded", out), out
    _check_record(run_id)


def test_ranks_that_reach_no_server_keep_their_spool_and_the_next_command_imports_it(tmp_path: Path) -> None:
    apply = start_mlbench("apply", str(_spec(tmp_path)))
    try:
        run_id = _run_id()
        wait_for(lambda: _logged(run_id, "epoch 1:"), "rank 0's first epoch")
        os.kill(apply.pid, signal.SIGKILL)  # nobody watches the run any more ...
        apply.wait(30)
        kill_server()  # ... and nobody serves the store: the ranks go on alone
    finally:
        if apply.poll() is None:
            apply.kill()
    launcher = int(json.loads((home() / "state" / "runs" / run_id / "launch.json").read_text())["pid"])
    wait_for(lambda: not processes.is_alive(launcher), "the ranks to finish", timeout=240)
    spool = home() / "state" / "runs" / run_id / "spool"
    assert list(spool.glob("rank*.jsonl")), "the ranks kept what they could not send"

    status = run_mlbench("status", run_id)  # starts a server: it imports the spool, then settles
    assert status.returncode == 0, status.stderr
    assert "state:    succeeded" in status.stdout, status.stdout
    _check_record(run_id)
