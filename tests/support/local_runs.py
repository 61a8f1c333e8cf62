"""Plans of small local runs for executor tests: task 0a on synthetic data, gloo by default."""

from __future__ import annotations

from mlbench_tui.plan import DataPlan, ResourcesPlan, RunPlan


def local_plan(backend: str = "gloo", workers: int = 2, threads: int = 1) -> RunPlan:
    return RunPlan(
        name=f"t-{backend}-{workers}w",
        spec_name="t",
        spec_hash="0" * 64,
        task="0a",
        task_name="allreduce",
        backend=backend,
        workers=workers,
        seed=1,
        goal=None,
        resources=ResourcesPlan(threads_per_rank=threads),
        data=DataPlan(source="synthetic"),
        hyperparameters={"repetitions": 1},
        target={"kind": "local"},
    )
