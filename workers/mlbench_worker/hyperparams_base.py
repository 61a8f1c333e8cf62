"""What every task's hyperparameters share: the bounds after scaling, the optimizer and loss-scaling
settings, and the base classes (``TaskHyperparameters``, ``TrainingHyperparameters``) each task's
declaration in ``mlbench_worker.hyperparams`` derives from. Stdlib only, like them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar, Literal, Self

from mlbench_worker.knobs import (
    HyperparameterProblem,
    knob,
)

MAX_LR = 1e6  # a learning rate after every scaling (2a's 4 x 4096 workers is 16384)
MAX_EPOCHS = 100_000
MAX_BATCH = 2**20  # samples (or sequences) per worker per step
MAX_STEPS = 10**9
MAX_WARMUP_EPOCHS = 1e6  # after scaling (3a warms up over 3 x workers epochs)

Optimizer = Literal["centralized_sgd", "centralized_adam", "power_sgd"]
MAX_TIMING_WARMUP_STEPS = 100_000
Aggregation = Literal["by_model", "by_layer"]
AllReduceDtype = Literal["fp32", "fp16", "bf16"]


@dataclass(frozen=True)
class OptimizerSettings:
    """What a distributed optimizer reads (``mlbench_worker.optim``); each task builds its own."""

    lr: float
    momentum: float = 0.0
    nesterov: bool = False
    weight_decay: float = 0.0
    adam_betas: tuple[float, float] = (0.9, 0.999)
    adam_eps: float = 1e-8
    aggregation: Aggregation = "by_model"
    overlap_comm: bool = False
    bucket_mb: float | None = None
    powersgd_rank: int = 1
    local_update: Literal["sgd", "lars"] = "sgd"
    lars_eta: float = 1e-3
    lars_epsilon: float = 0.0
    decay_vectors: bool = True
    """Whether one-dimensional parameters (BatchNorm's, biases) take weight decay (and LARS's
    trust ratio); MLPerf's ResNet leaves them out."""


@dataclass(frozen=True)
class LossScaling:
    """fp16 loss scaling (``optim.amp.make_scaler``): PyTorch's defaults unless the task sets its own."""

    init_scale: float = 2.0**16
    factor: float = 2.0
    window: int = 2000
    max_scale: float | None = None


@dataclass(frozen=True)
class TaskHyperparameters:
    """Base of every task's hyperparameters: the task's id and its per-task hooks."""

    TASK: ClassVar[str]

    def problems(self) -> Iterator[HyperparameterProblem]:
        """Rules across fields (none by default)."""
        return iter(())

    def backend_problems(self, backend: str, given: frozenset[str]) -> Iterator[HyperparameterProblem]:
        """Values the spec set (``given``) that ``backend`` cannot run (none by default)."""
        return iter(())

    def graph_problems(self) -> Iterator[HyperparameterProblem]:
        """Values that cannot run inside CUDA graphs (none by default)."""
        return iter(())

    def loss_scaling(self) -> LossScaling:
        """The task's fp16 loss scaling (PyTorch's defaults unless the task fixes its own)."""
        return LossScaling()

    def sweep_points(self) -> int | None:
        """How many points a measurement sweep records (None: the task trains, it does not sweep)."""
        return None

    def on_backend(self, backend: str) -> Self:
        """The values a run on ``backend`` uses (unchanged by default)."""
        return self

    def for_workers(self, workers: int, given: frozenset[str]) -> Self:
        """The values a run of ``workers`` ranks uses: the task's scaling rule, where it has one,
        applied to what the spec did not set (``given``) (unchanged by default)."""
        return self

    def world_problems(self, workers: int) -> Iterator[HyperparameterProblem]:
        """Values a run of ``workers`` ranks cannot split as they mean (none by default)."""
        return iter(())


@dataclass(frozen=True)
class TrainingHyperparameters(TaskHyperparameters):
    """What every training task's loop reads: its epoch limit and how often it reports."""

    report_every_steps: int = knob(10, "Steps between training-metric reports.", "tuning", ge=1, le=10**6)
    timing_warmup_steps: int = knob(
        20,
        "First training steps left out of the step-time figures (autotuning, allocator growth, "
        "first replays); they still count in the time to accuracy.",
        "override",
        ge=0,
        le=MAX_TIMING_WARMUP_STEPS,
    )
    stop_check_every_steps: int = knob(
        20, "Steps between the ranks' agreement on stopping.", "tuning", ge=1, le=10**6
    )
    overlap_comm: bool | None = knob(
        None, "All-reduce gradient buckets during backward; None: the task's choice.", "tuning"
    )
    bucket_mb: float | None = knob(
        None, "Gradient bucket size in MB; None: one flat buffer.", "tuning", gt=0, le=1e5
    )


def optimizer_graph_problems(optimizer: Optimizer) -> Iterator[HyperparameterProblem]:
    if optimizer == "power_sgd":
        yield HyperparameterProblem(
            "optimizer",
            "power_sgd cannot run inside a CUDA graph (its QR factorisations take host-side steps)",
            hint="use centralized_sgd or centralized_adam",
        )
