"""Centralized optimizers: average gradients over all ranks, then take a local optimizer step.

``CentralizedOptimizer`` pairs a stock ``torch.optim`` optimizer with an ``Aggregator``. The
training loop calls ``aggregate()`` (timed as the ``agg`` phase) and ``step()`` (``opt_step``)
separately so the tracker can split communication from compute. Builders such as
``centralized_sgd`` read their settings from the task's hyperparameters and build the fused
optimizers: one kernel for every parameter, and a ``GradScaler`` step that never waits for the
device (a fused step checks the scaler's inf flag itself).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from mlbench_worker.comm import Comm
from mlbench_worker.hyperparams import OptimizerSettings
from mlbench_worker.optim.aggregation import AGGREGATORS, Aggregator
from mlbench_worker.optim.lars import local_optimizer


class CentralizedOptimizer:
    """A torch optimizer whose gradients are all-reduced (averaged) before each step.

    The learning rate is mirrored in a Python float, so reading it never waits for the device;
    ``make_capturable`` turns it into a device tensor that CUDA-graph replays read.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, aggregator: Aggregator) -> None:
        self.optimizer = optimizer
        self.aggregator = aggregator
        self._lr = float(optimizer.param_groups[0]["lr"])

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.optimizer.param_groups

    @property
    def lr(self) -> float:
        """The learning rate of the first parameter group."""
        return self._lr

    def set_lr(self, lr: float) -> None:
        """Set the learning rate of every parameter group (in place when it is a device tensor)."""
        self._lr = lr
        for group in self.optimizer.param_groups:
            if isinstance(group["lr"], torch.Tensor):
                group["lr"].fill_(lr)
            else:
                group["lr"] = lr

    def make_capturable(self) -> None:
        """Prepare for CUDA-graph capture: learning rates become device tensors (a replay reads
        them, so ``set_lr`` between replays takes effect) and Adam keeps its step count there."""
        for group in self.optimizer.param_groups:
            device = group["params"][0].device
            if not isinstance(group["lr"], torch.Tensor):
                group["lr"] = torch.tensor(float(group["lr"]), dtype=torch.float32, device=device)
            if "capturable" in group:
                group["capturable"] = True

    def aggregate(self) -> None:
        """Average gradients over ranks (communication)."""
        self.aggregator.aggregate()

    def clip_grad_norm_(self, max_norm: float) -> None:
        """Clip the averaged gradients' global norm (every rank clips the same gradient)."""
        self.aggregator.clip_grad_norm_(max_norm)

    def step(self) -> None:
        """Apply the local update with the averaged gradients (compute)."""
        self.optimizer.step()

    def zero_grad(self) -> None:
        """Zero the gradients in place (the aggregator may own their storage)."""
        self.aggregator.zero_grad()

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()


def make_aggregator(name: str, comm: Comm, params: list[torch.nn.Parameter], **options: Any) -> Aggregator:
    """The aggregator registered as ``name`` (``by_model``, ...)."""
    try:
        cls = AGGREGATORS[name]
    except KeyError:
        raise ValueError(f"unknown aggregation {name!r}; known: {', '.join(sorted(AGGREGATORS))}") from None
    return cls(comm, params, **options)


def aggregator_options(settings: OptimizerSettings) -> dict[str, Any]:
    """The aggregator's keyword options: bucket size, and overlap (by_model, one backward per step)."""
    options: dict[str, Any] = {}
    if settings.bucket_mb:
        options["bucket_mb"] = settings.bucket_mb
    if settings.aggregation == "by_model" and settings.overlap_comm:
        options["overlap"] = True  # one backward per step only (see ByModelAllReduce)
    return options


def centralized_sgd(
    params: Iterable[torch.nn.Parameter], comm: Comm, settings: OptimizerSettings
) -> CentralizedOptimizer:
    """SGD (momentum, nesterov, weight decay from ``settings``), or the LARS update where the
    settings ask for it (``optim.lars``), with all-reduce gradient averaging."""
    plist = [p for p in params if p.requires_grad]
    aggregator = make_aggregator(settings.aggregation, comm, plist, **aggregator_options(settings))
    return CentralizedOptimizer(local_optimizer(plist, settings), aggregator)
