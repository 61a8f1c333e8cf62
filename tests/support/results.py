"""Reported records and plans for result tests: a 1a run validating once per epoch."""

from __future__ import annotations

from typing import Any

from mlbench_tui.plan import DataPlan, GoalPlan, ResourcesPlan, RunPlan
from mlbench_tui.results.time_to_accuracy import MetricPoint

GOAL = GoalPlan(kind="light", metric="val_global_Prec@1", target=70.0, direction="max")


def series(values: list[float], *, rank: int = 0) -> list[MetricPoint]:
    """Top-1 per epoch (t = 100 + 10 x epoch), with cumulative train (8 s) and validation
    (1.5 s) time per epoch."""
    points = []
    for epoch, value in enumerate(values, start=1):
        t = 100.0 + 10 * epoch
        points.append(MetricPoint("val_global_Prec@1", value, rank=rank, step=epoch * 50, epoch=epoch, t=t))
        points.append(MetricPoint("time_train", 8.0 * epoch, rank=rank, epoch=epoch, t=t))
        points.append(MetricPoint("time_validation", 1.5 * epoch, rank=rank, epoch=epoch, t=t))
    return points


def plan(**extra: Any) -> RunPlan:
    """The plan of ``qs-gloo-2w`` (fields overridable)."""
    fields: dict[str, Any] = {
        "name": "qs-gloo-2w",
        "spec_name": "qs",
        "spec_hash": "abc",
        "task": "1a",
        "task_name": "resnet20-cifar10",
        "backend": "gloo",
        "workers": 2,
        "goal": GOAL,
        "seed": 1,
        "resources": ResourcesPlan(threads_per_rank=1),
        "data": DataPlan(source="synthetic"),
        "hyperparameters": {"batch_size": 32, "lr": 0.04},
        "target": {"kind": "local"},
    }
    fields.update(extra)
    return RunPlan(**fields)


# A result as the engine stored it before RunResult existed (runner.py's summary dict).
OLD_STORED = {
    "name": "qs-gloo-2w",
    "spec_name": "qs",
    "spec_hash": "abc",
    "task": "1a",
    "task_name": "resnet20-cifar10",
    "framework": "pytorch",
    "backend": "gloo",
    "workers": 2,
    "repeat": 0,
    "state": "succeeded",
    "message": None,
    "stop_reason": "goal reached",
    "wall_time_s": 50.0,
    "goal": {"kind": "light", "metric": "val_global_Prec@1", "target": 70.0, "direction": "max"},
    "reached": True,
    "time_to_accuracy_s": 16.0,
    "validation_time_s": 3.0,
    "epochs_to_goal": 2,
    "steps_to_goal": 100,
    "best_value": 71.0,
    "last_value": 71.0,
    "time_split": {
        "compute": 7.0,
        "communication": 3.0,
        "preprocess": 1.0,
        "metrics": 0.0,
        "compute_fraction": 7 / 11,
        "communication_fraction": 3 / 11,
    },
    "allreduce": None,
    "cost_to_target": 0.019,
    "price_per_hour": 3.6,
    "failures": [],
    "fingerprint": {"python": "3.11", "torch": "9.9"},
    "run_id": "r-000000000001",
    "speedup": 1.8,
    "efficiency": 0.9,
    "one_worker_time_s": 28.8,
}
