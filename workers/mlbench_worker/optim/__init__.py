"""Distributed optimizers, by name: a lazy registry like the task registry; and the LR schedules.

An entry maps the ``optimizer`` hyperparameter to ``"module:function"``; the function has the
signature ``(params, comm, OptimizerSettings) -> CentralizedOptimizer`` (or an object with the same
``aggregate/step/zero_grad/lr/set_lr`` methods). Adding an optimizer is one module plus one line.
Importing the package imports no torch (``optim.schedules`` serves the TensorFlow task too); the
optimizers import it when built.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from mlbench_worker.timing.startup import import_lazy

if TYPE_CHECKING:
    import torch

    from mlbench_worker.comm import Comm
    from mlbench_worker.hyperparams import OptimizerSettings
    from mlbench_worker.optim.centralized import CentralizedOptimizer

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
    optimizer: CentralizedOptimizer = builder(params, comm, settings)
    return optimizer


def __getattr__(name: str) -> Any:
    """``CentralizedOptimizer``, imported (with torch) when first asked for."""
    if name == "CentralizedOptimizer":
        from mlbench_worker.optim.centralized import CentralizedOptimizer

        return CentralizedOptimizer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["OPTIMIZERS", "CentralizedOptimizer", "build_optimizer"]
