"""Run plans: what one benchmark run will do, fully resolved from a spec.

``expand(spec)`` turns a validated ``BenchmarkSpec`` into a list of frozen ``RunPlan``s (sweeps x
repeats). It is pure and deterministic, so plans can be golden-tested and re-derived: executors
and manifests are functions of a plan. ``worker_config(plan)`` is the JSON document handed to the
worker runtime (``python -m mlbench_worker --config FILE``); its keys are the contract between the
engine and ``mlbench_worker`` and are pinned by a contract test.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class GoalPlan(_Frozen):
    """The resolved goal: which global metric must reach which value, and in which direction."""

    kind: Literal["full", "light", "custom"]
    metric: str = Field(description="Metric key, e.g. 'val_global_Prec@1' (percent).")
    target: float
    direction: Literal["max", "min"] = Field(description="'max': reach >= target; 'min': <= target.")


class ResourcesPlan(_Frozen):
    """Per-rank resources."""

    cpu: str | None = Field(default=None, description="Kubernetes CPU quantity per rank, e.g. '2' or '500m'.")
    threads_per_rank: int = Field(ge=1, description="torch/OMP intra-op threads per rank, derived from cpu.")
    memory: str | None = Field(default=None, description="Kubernetes memory quantity per rank, e.g. '12Gi'.")
    gpus: int = Field(default=0, ge=0, description="GPUs per rank.")
    gpu_type: str | None = Field(default=None, description="GPU model, e.g. 'T4', 'A100'.")
    precision: Literal["fp32", "bf16", "fp16", "amp"] = "fp32"


class DataPlan(_Frozen):
    """Where the dataset comes from."""

    source: Literal["synthetic", "path", "download"]
    path: str | None = Field(default=None, description="Dataset directory (path) or cache directory (download).")
    options: dict[str, Any] = Field(default_factory=dict, description="Source options, e.g. synthetic sizes.")


class RunPlan(_Frozen):
    """One fully resolved run: the unit that executors launch and the store records."""

    name: str = Field(description="Stable run name: <metadata.name>-<backend>-<workers>w[-r<i>].")
    spec_name: str
    spec_hash: str = Field(description="sha256 of the normalized spec (the whole spec, not this run).")
    task: str = Field(description="Official task id, e.g. '1a'.")
    task_name: str = Field(description="Official task name, e.g. 'resnet20-cifar10'.")
    framework: Literal["pytorch", "tensorflow"] = "pytorch"
    backend: Literal["gloo", "nccl", "mpi"]
    workers: int = Field(ge=1, description="World size (number of ranks).")
    repeat: int = Field(default=0, ge=0, description="Index of this repeat, 0-based.")
    repeats: int = Field(default=1, ge=1)
    seed: int
    goal: GoalPlan | None = Field(description="None for tasks without a goal (0a all-reduce).")
    max_time_s: float | None = None
    resources: ResourcesPlan
    data: DataPlan
    hyperparameters: dict[str, Any] = Field(description="Effective hyperparameters (defaults + overrides, scaled).")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment for every rank.")
    target: dict[str, Any] = Field(description="The spec's target section, e.g. {'kind': 'local'}.")
    price_per_hour: float | None = None
    labels: dict[str, str] = Field(default_factory=dict)


def worker_config(plan: RunPlan, run_id: str) -> dict[str, Any]:
    """The JSON document the worker runtime reads (``MLBENCH_CONFIG``); see ``mlbench_worker.config``."""
    return {
        "run_id": run_id,
        "run_name": plan.name,
        "task": plan.task,
        "framework": plan.framework,
        "backend": plan.backend,
        "world_size": plan.workers,
        "seed": plan.seed + plan.repeat,
        "goal": plan.goal.model_dump() if plan.goal else None,
        "max_time_s": plan.max_time_s,
        "precision": plan.resources.precision,
        "device": "cuda" if plan.resources.gpus > 0 else "cpu",
        "threads_per_rank": plan.resources.threads_per_rank,
        "data": plan.data.model_dump(),
        "hyperparameters": dict(plan.hyperparameters),
    }
