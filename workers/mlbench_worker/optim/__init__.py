"""Distributed optimizers, by name: a lazy registry like the task registry.

An entry maps the ``optimizer`` hyperparameter to ``"module:function"``; the function has the
signature ``(params, comm, OptimizerSettings) -> CentralizedOptimizer`` (or an object with the same
``aggregate/step/zero_grad/lr/set_lr`` methods). Adding an optimizer is one module plus one line.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable

import torch

from mlbench_worker.comm import Comm
from mlbench_worker.hyperparams import OptimizerSettings
from mlbench_worker.optim.centralized import CentralizedOptimizer
from mlbench_worker.startup import import_lazy

OPTIMIZERS: dict[str, str] = {
    "centralized_sgd": "mlbench_worker.optim.centralized:centralized_sgd",
    "centralized_adam": "mlbench_worker.optim.adam:centralized_adam",
    "power_sgd": "mlbench_worker.optim.powersgd:power_sgd",
}


def build_optimizer(
    name: str, params: Iterable[torch.nn.Parameter], comm: Comm, settings: OptimizerSettings
) -> CentralizedOptimizer:
    """Build the optimizer registered as ``name`` with the task's ``settings``."""
    try:
        target = OPTIMIZERS[name]
    except KeyError:
        raise ValueError(f"unknown optimizer {name!r}; known: {', '.join(sorted(OPTIMIZERS))}") from None
    module, _, func = target.partition(":")
    builder = getattr(importlib.import_module(module), func)
    import_lazy()  # torch's first optimizer imports its compiler stack: a startup phase of its own
    return builder(params, comm, settings)


__all__ = ["OPTIMIZERS", "CentralizedOptimizer", "build_optimizer"]
