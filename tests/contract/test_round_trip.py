"""Round trips, per official task: spec -> plan -> worker config -> events -> stored -> ``RunResult``.

Each hop is checked for its type: the example spec loads into a ``BenchmarkSpec``, expands into
``RunPlan``s, the engine's ``WorkerConfig`` survives its JSON document and the worker's parser,
the ranks' events are the wire's payloads sent by the worker's real reporter to a real server
(SQLite file, HTTP on 127.0.0.1), they read back into the same payloads, and the server's result
of the finished run is a ``RunResult`` with the figures those events carry. No training runs
(one real gloo run is in tests/workers/test_runs.py); each task's events are what its rank emits.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlbench_worker import wire
from mlbench_worker.config import WorkerConfig, parse_config
from mlbench_worker.reporting.reporter import Reporter
from mlbench_worker.tasks.base import Outcome

from mlbench_tui.lifecycle import RunState
from mlbench_tui.plan import RunPlan, expand, worker_config, worker_settings
from mlbench_tui.results import events as ev
from mlbench_tui.results.model import RunResult
from mlbench_tui.server.client import MlbenchClient
from mlbench_tui.server.serve import EmbeddedServer
from mlbench_tui.spec.loader import load_paths
from mlbench_tui.spec.models import BenchmarkSpec
from mlbench_tui.store.api_models import RunCreate

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SPECS = {
    "0a": "task-0a-allreduce.yaml",
    "1a": "task-1a-resnet20-cifar10.yaml",
    "1a-tensorflow": "task-1a-resnet20-tensorflow.yaml",
    "2a": "task-2a-logreg-epsilon.yaml",
    "3a": "task-3a-awd-lstm-wikitext2.yaml",
    "4a": "task-4a-gnmt-wmt16.yaml",
    "4b": "task-4b-transformer-wmt17.yaml",
}
EPOCH_TRAIN_S, EPOCH_VAL_S, SIZES = 10.0, 2.0, (1, 10, 100)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    embedded = EmbeddedServer(tmp_path_factory.mktemp("round-trip") / "store.db", record=False).start()
    try:
        yield embedded
    finally:
        embedded.stop()


def _plan(case: str) -> RunPlan:
    (loaded,) = load_paths([ROOT / "specs" / SPECS[case]])
    assert isinstance(loaded.spec, BenchmarkSpec)
    plans = expand(loaded.spec)
    assert plans and all(isinstance(p, RunPlan) for p in plans)
    framework = "tensorflow" if case.endswith("tensorflow") else "pytorch"
    return next(p for p in plans if p.framework == framework)


def _goal_value(config: WorkerConfig, *, reached: bool = True) -> float:
    """A goal metric value one past the target in its direction (``reached``), else ten short."""
    assert config.goal is not None
    sign = 1.0 if config.goal.direction == "max" else -1.0
    return config.goal.target + (sign if reached else -10.0 * sign)


def _rank_events(config: WorkerConfig, rank: int) -> tuple[list[wire.Payload], Outcome]:
    """What rank ``rank`` emits for a run that reaches its goal at epoch 2 (0a: a finished sweep)."""
    main = rank == 0
    sent: list[wire.Payload] = []
    if main:
        sent += [wire.InitStart(), wire.Environment(facts={"world_size": config.world_size, "torch": "x"})]
    if config.goal is None:
        if main:
            sent.append(wire.AllreduceSweep(world_size=config.world_size, busbw_ceiling_gbps=100.0))
            sent.append(wire.RunStart(train_samples=300, eval_samples=100))
        return sent, Outcome("success", f"measured {len(SIZES)} (dtype, size) points", points=len(SIZES))
    if main:
        sent.append(wire.RunStart(train_samples=1000, eval_samples=100, comm_precision="fp32"))
    progress = wire.Progress()
    for epoch in (1, 2):
        progress = wire.Progress(
            epoch=epoch, step=50 * epoch, train_time_s=EPOCH_TRAIN_S * epoch, val_time_s=EPOCH_VAL_S * epoch
        )
        if main:
            sent += [
                wire.EpochStart(epoch=epoch),
                wire.EvalStart(epoch=epoch),
                wire.EpochEnd(**vars(progress)),
            ]
    reason = f"goal reached: {config.goal.metric}={_goal_value(config):.4g} (target {config.goal.target})"
    if main:
        goal = config.goal
        sent.append(
            wire.GoalReached(
                metric=goal.metric, value=_goal_value(config), target=goal.target, **vars(progress)
            )
        )
    return sent, Outcome("success", reason, progress)


def _report(
    server: EmbeddedServer, run_id: str, token: str, config: WorkerConfig
) -> list[tuple[int, wire.Payload]]:
    """Every rank's metrics and events, through the worker's real reporter; returns what was sent."""
    sent: list[tuple[int, wire.Payload]] = []
    for rank in range(config.world_size):
        reporter = Reporter(server.url, run_id, token, rank)
        payloads, outcome = _rank_events(config, rank)
        if rank == 0 and config.goal is not None:
            for epoch in (1, 2):
                value = _goal_value(config, reached=epoch == 2)
                reporter.metric(config.goal.metric, value, step=50 * epoch, epoch=epoch)
        if rank == 0 and config.goal is None:
            for size in SIZES:
                reporter.metric(wire.allreduce_metric("fp32", "latency_p50"), 1e-5 * size, step=size)
                reporter.metric(wire.allreduce_metric("fp32", "busbw"), 0.5 * size, step=size)
        for name in wire.TRACKER_TOTALS:
            reporter.metric(name, 1.0, step=100, epoch=2)
        for payload in [*payloads, outcome.stop(exit_code=0)]:
            wire.emit(reporter, payload)
            sent.append((rank, payload))
        assert reporter.flush(timeout=30.0)
        reporter.close()
    return sent


@pytest.mark.parametrize("case", list(SPECS))
def test_a_task_round_trips_from_its_spec_to_its_result(server: EmbeddedServer, case: str) -> None:
    plan = _plan(case)
    admin = MlbenchClient(server.url, server.auth.admin_token)
    created = admin.create_run(RunCreate.from_plan(plan))
    run_id = created.run.id

    built = worker_settings(plan, run_id)
    document = json.loads(json.dumps(worker_config(plan, run_id)))
    config = parse_config(document)
    assert isinstance(config, WorkerConfig) and config == built
    assert (config.task, config.framework, config.world_size) == (plan.task, plan.framework, plan.workers)
    assert (config.goal is None) == (plan.goal is None)

    sent = _report(server, run_id, created.write_token, config)
    stored = [
        ev.EventRecord(e.kind, e.payload, e.rank or 0, e.t) for e in admin.events(run_id, limit=1000).events
    ]
    read = [(e.rank, ev.parse(e)) for e in stored]
    assert sorted(read, key=repr) == sorted(sent, key=repr)
    assert all(isinstance(p, wire.Payload) for _, p in read)

    detail = admin.update_run(run_id, state=RunState.SUCCEEDED)
    result = detail.result
    assert isinstance(result, RunResult)
    assert detail.state is RunState.SUCCEEDED and result.state is RunState.SUCCEEDED
    assert result.framework == plan.framework and result.implementation == plan.implementation
    assert result.fingerprint["world_size"] == plan.workers and result.failures == []
    assert result.time_split is not None and result.time_split.compute == 1.0
    main_stop = next(p for r, p in sent if r == 0 and isinstance(p, wire.RunStop))
    assert result.stop_reason == main_stop.reason
    if config.goal is None:
        assert result.allreduce is not None and result.allreduce["fp32"].sizes == len(SIZES)
        assert result.allreduce["fp32"].peak_busbw_gbps == 50.0 and result.reached is None
    else:
        assert result.reached is True and result.epochs_to_goal == 2.0 and result.steps_to_goal == 100
        assert result.time_to_accuracy_s == 2 * EPOCH_TRAIN_S and result.validation_time_s == 2 * EPOCH_VAL_S
        assert result.best_value == _goal_value(config)
