"""Real multi-rank runs of the worker: torchrun/gloo and mpiexec/Open MPI ranks reporting to a real
server on 127.0.0.1, configured by the engine's own ``worker_config``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mlbench_worker.launch.allocator import libc_name

from mlbench_tui.plan import DataPlan, GoalPlan, ResourcesPlan, RunPlan, worker_config
from mlbench_tui.server.client import MlbenchClient
from mlbench_tui.server.serve import EmbeddedServer
from mlbench_tui.store.api_models import RunCreate

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
TORCHRUN = [str(BIN / "torchrun"), "--standalone", "--nproc_per_node", "2", "--no-python"]
MPIEXEC = [str(BIN / "mpiexec"), "--allow-run-as-root", "-n", "2"]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[EmbeddedServer]:
    srv = EmbeddedServer(tmp_path / "store.sqlite", record=False).start()
    try:
        yield srv
    finally:
        srv.stop()


def _plan(task: str, backend: str, hp: dict[str, Any], **fields: Any) -> RunPlan:
    return RunPlan(
        name=f"t{task}-{backend}-2w",
        spec_name="t",
        spec_hash="0" * 64,
        task=task,
        task_name={"0a": "allreduce", "1a": "resnet20-cifar10"}[task],
        backend=backend,
        workers=2,
        seed=3,
        goal=fields.pop("goal", None),
        resources=ResourcesPlan(threads_per_rank=1),
        data=fields.pop("data", DataPlan(source="synthetic")),
        hyperparameters=hp,
        target={"kind": "local"},
        **fields,
    )


class Launched:
    """A finished worker launch and what the server stored for it."""

    def __init__(self, proc: subprocess.CompletedProcess[str], client: MlbenchClient, run_id: str) -> None:
        self.proc = proc
        self.client = client
        self.run_id = run_id

    def events(self, kind: str | None = None) -> list[Any]:
        return self.client.events(self.run_id, kind=kind).events

    def series(self, name: str) -> dict[int, list[tuple[int | None, float | None]]]:
        page = self.client.metrics(self.run_id, name)
        return {s.rank: list(zip(s.step, s.value, strict=True)) for s in page.series}


def launch(
    server: EmbeddedServer,
    tmp_path: Path,
    launcher: list[str],
    plan: RunPlan,
    extra_env: dict[str, str] | None = None,
) -> Launched:
    client = MlbenchClient(server.url, server.info.admin_token)
    created = client.create_run(RunCreate.from_plan(plan))
    run_id = created.run.id
    config = tmp_path / "worker.json"
    config.write_text(json.dumps(worker_config(plan, run_id)))
    env = {
        **os.environ,
        "MLBENCH_SERVER_URL": server.url,
        "MLBENCH_RUN_ID": run_id,
        "MLBENCH_RUN_TOKEN": created.write_token,
        "MLBENCH_SPOOL_DIR": str(tmp_path / "spool"),
        "OMP_NUM_THREADS": "1",
        **(extra_env or {}),
    }
    proc = subprocess.run(
        [*launcher, sys.executable, "-m", "mlbench_worker", "--config", str(config)],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    return Launched(proc, client, run_id)


def _ok(run: Launched) -> None:
    assert run.proc.returncode == 0, run.proc.stdout[-3000:] + run.proc.stderr[-3000:]


TINY_SWEEP = {"sizes_min_exp": 0, "sizes_max_exp": 4, "num_sizes": 5, "repetitions": 5, "warmup": 1}


def test_allreduce_sweep_on_two_gloo_ranks(server: EmbeddedServer, tmp_path: Path) -> None:
    run = launch(server, tmp_path, TORCHRUN, _plan("0a", "gloo", {**TINY_SWEEP, "dtypes": ["fp32", "fp16"]}))
    _ok(run)
    sizes = [1, 10, 100, 1000, 10000]
    for dtype in ("fp32", "fp16"):
        p50 = run.series(f"allreduce_{dtype}_latency_p50")
        p99 = run.series(f"allreduce_{dtype}_latency_p99")
        algbw = run.series(f"allreduce_{dtype}_algbw")
        busbw = run.series(f"allreduce_{dtype}_busbw")
        assert list(p50) == [0]  # reported once, by rank 0
        assert [step for step, _ in p50[0]] == sizes
        for (_, lo), (_, hi) in zip(p50[0], p99[0], strict=True):
            assert lo is not None and hi is not None and 0 < lo <= hi < 5
        # two ranks: busbw = algbw * 2(n-1)/n = algbw; algbw = bytes / p50
        item = 4 if dtype == "fp32" else 2
        for (size, lat), (_, alg), (_, bus) in zip(p50[0], algbw[0], busbw[0], strict=True):
            assert size is not None and lat is not None
            assert alg == pytest.approx(size * item / lat / 1e9) and bus == pytest.approx(alg)
    (env,) = run.events("environment")
    assert env.payload["backend"] == "gloo" and env.payload["world_size"] == 2 and env.payload["torch"]
    assert env.payload["torch_threads"] == 1 and "cpu_model" in env.payload
    ranks = env.payload["ranks"]  # every rank's device, gathered by rank 0
    assert [(r["rank"], r["local_rank"], r["device"]) for r in ranks] == [(0, 0, "cpu"), (1, 1, "cpu")]
    assert env.payload["gpus_used"] == 0 and env.payload["gpu_models"] == []
    if libc_name() == "glibc":  # the ranks keep the memory their steps free (the default)
        assert env.payload["host_allocator"]["tuned"] is True
        assert [r["host_allocator_tuned"] for r in ranks] == [True, True]
    # each rank's events in its own order; ranks report independently, so not across ranks
    run_events = [(e.rank, e.kind) for e in run.events() if e.kind.startswith("run_")]
    assert [kind for rank, kind in run_events if rank == 0] == ["run_start", "run_stop"]
    assert [kind for rank, kind in run_events if rank == 1] == ["run_stop"]
    _every_rank_stopped(run, 2, "success")


def _every_rank_stopped(run: Any, world_size: int, status: str) -> list[Any]:
    """Every rank's run_stop (each says how it stopped and its exit status), rank 0's first."""
    stops = sorted(run.events("run_stop"), key=lambda e: e.rank)
    assert [e.rank for e in stops] == list(range(world_size))
    assert all(e.payload["status"] == status and e.payload["exit_code"] == 0 for e in stops), stops
    return stops


def test_allreduce_sweep_on_two_mpi_ranks(server: EmbeddedServer, tmp_path: Path) -> None:
    run = launch(server, tmp_path, MPIEXEC, _plan("0a", "mpi", {**TINY_SWEEP, "dtypes": ["fp32"]}))
    _ok(run)
    assert [step for step, _ in run.series("allreduce_fp32_busbw")[0]] == [1, 10, 100, 1000, 10000]
    (env,) = run.events("environment")
    assert env.payload["backend"] == "mpi" and env.payload["launcher"] == "mpi"
    assert "Open MPI" in env.payload["mpi_library"] and env.payload["mpi4py"]
    assert [(r["rank"], r["local_rank"]) for r in env.payload["ranks"]] == [(0, 0), (1, 1)]
    _every_rank_stopped(run, 2, "success")


def test_resnet20_two_ranks_reach_a_goal_and_stop_together(server: EmbeddedServer, tmp_path: Path) -> None:
    plan = _plan(
        "1a",
        "gloo",
        {
            "batch_size": 32,
            "lr": 0.08,
            "base_lr": 0.04,
            "warmup_epochs": 1.0,
            "max_epochs": 8,
            "report_every_steps": 4,
        },
        goal=GoalPlan(kind="custom", metric="val_global_Prec@1", target=45.0, direction="max"),
        data=DataPlan(source="synthetic", options={"train_samples": 512, "val_samples": 128, "noise": 24.0}),
    )
    run = launch(server, tmp_path, TORCHRUN, plan)
    _ok(run)
    (goal,) = run.events("goal_reached")
    top1 = run.series("val_global_Prec@1")[0]
    assert goal.payload["metric"] == "val_global_Prec@1" and goal.payload["value"] >= 45.0
    assert goal.payload["value"] == top1[-1][1] and all(v is not None and v < 45.0 for _, v in top1[:-1])
    assert goal.payload["train_time_s"] > 0 and goal.payload["val_time_s"] > 0
    epochs = run.events("epoch_end")
    assert [e.payload["epoch"] for e in epochs] == list(range(1, goal.payload["epoch"] + 1))
    # 512 samples, 2 ranks, batch 32: 8 steps per epoch on each rank; both ranks stopped at the goal
    assert goal.payload["step"] == 8 * goal.payload["epoch"]
    for name in ("time_compute", "time_communication", "time_train", "phase_agg", "train_loss", "lr"):
        per_rank = run.series(name)
        assert set(per_rank) == {0, 1}, name
        assert per_rank[0][-1][0] == per_rank[1][-1][0] == goal.payload["step"], name
    lrs = [v for _, v in run.series("lr")[0]]
    assert lrs[0] is not None and 0.04 < lrs[0] < 0.08 and lrs[-1] == pytest.approx(0.08)  # warm-up
    stop, _ = _every_rank_stopped(run, 2, "success")
    assert "goal reached" in stop.payload["reason"]


def test_a_crashing_rank_reports_its_traceback_and_fails_the_launch(
    server: EmbeddedServer, tmp_path: Path
) -> None:
    plan = _plan("0a", "gloo", {**TINY_SWEEP, "dtypes": ["fp32"]})
    run = launch(server, tmp_path, TORCHRUN, plan, {"MLBENCH_INJECT_FAULT": "rank=1,step=0"})
    assert run.proc.returncode != 0
    failures = run.events("rank_failed")
    # rank 0 may also fail, noticing its peer is gone; that is flagged so the root cause stands out
    (failed,) = [e for e in failures if not e.payload["peer_failure"]]
    assert all(e.payload["peer_failure"] for e in failures if e is not failed)
    assert failed.rank == 1 and failed.payload["rank"] == 1
    assert failed.payload["exception"].startswith("InjectedFault: fault injected")
    assert "Traceback" in failed.payload["traceback"] and "maybe_inject_fault" in failed.payload["traceback"]
    stops = [e.payload for e in run.events("run_stop")]
    assert {
        "status": "failed",
        "reason": f"rank 1 failed: {failed.payload['exception']}",
        "exit_code": 1,
    } in stops
    assert "InjectedFault" in run.proc.stderr


def test_max_time_stops_every_rank_at_the_same_step(server: EmbeddedServer, tmp_path: Path) -> None:
    plan = _plan(
        "1a",
        "gloo",
        {
            "batch_size": 16,
            "lr": 0.04,
            "max_epochs": 100_000,  # out of reach at any speed: only the time stops it
            "report_every_steps": 1,
            "stop_check_every_steps": 1,
        },
        goal=GoalPlan(kind="custom", metric="val_global_Prec@1", target=100.0, direction="max"),
        max_time_s=2.0,
        data=DataPlan(source="synthetic", options={"train_samples": 1024, "val_samples": 32}),
    )
    run = launch(server, tmp_path, TORCHRUN, plan)
    _ok(run)
    stop, _ = _every_rank_stopped(run, 2, "aborted")
    assert "max_time_s" in stop.payload["reason"]
    assert not run.events("goal_reached")
    losses = run.series("train_loss")
    last_steps = {rank: points[-1][0] for rank, points in losses.items()}
    assert set(last_steps) == {0, 1} and last_steps[0] == last_steps[1] == stop.payload["step"]
    assert stop.payload["step"] < 100_000 * 32  # stopped by the time, not by max_epochs
