"""A task's trainer in one process: a one-rank run context and a reporter that keeps what it gets."""

from __future__ import annotations

from typing import Any

import torch
from mlbench_worker.comm import SingleComm
from mlbench_worker.config import parse_config
from mlbench_worker.context import RunContext
from mlbench_worker.launch.rendezvous import Rendezvous


class RecordingReporter:
    """Keeps what a task reports, in memory (the runtime's reporter protocol)."""

    def __init__(self) -> None:
        self.metrics: list[tuple[str, float, int | None]] = []
        self.events: list[tuple[str, dict[str, Any]]] = []

    def metric(
        self,
        name: str,
        value: float,
        *,
        step: int | None = None,
        epoch: float | None = None,
        t: float | None = None,
    ) -> None:
        self.metrics.append((name, value, step))

    def log(self, text: str, stream: str = "stdout") -> None:
        pass

    def event(self, kind: str, payload: dict[str, Any]) -> None:
        self.events.append((kind, payload))

    def flush(self, timeout: float | None = None) -> bool:
        return True

    def close(self, timeout: float = 10.0) -> None:
        pass


def single_rank_context(
    task: str,
    hp: dict[str, Any],
    data: dict[str, Any],
    goal: dict[str, Any] | None,
    *,
    precision: str = "fp32",
    seed: int = 3,
) -> tuple[RunContext, RecordingReporter]:
    config = parse_config(
        {
            "run_id": "r-test",
            "task": task,
            "backend": "gloo",
            "world_size": 1,
            "seed": seed,
            "goal": goal,
            "data": data,
            "hyperparameters": hp,
            "precision": precision,
        }
    )
    reporter = RecordingReporter()
    ctx = RunContext(
        config=config,
        rendezvous=Rendezvous(0, 1, 0, None, None, "single"),
        comm=SingleComm(),
        device=torch.device("cpu"),
        reporter=reporter,
    )
    return ctx, reporter
