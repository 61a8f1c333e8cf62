"""CentralizedAdam: Adam on gradients averaged over all ranks (MLBench's centralized Adam).

Averaging the gradients before a local ``torch.optim.Adam`` step keeps every rank's parameters
and moment estimates identical, so k ranks with batch b behave like one process with batch k*b.
Settings come from the task's ``OptimizerSettings``: ``lr``, ``adam_betas``, ``adam_eps``,
``weight_decay``, and ``aggregation`` (``by_model`` or ``by_layer``).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from mlbench_worker.comm import Comm
from mlbench_worker.hyperparams import OptimizerSettings
from mlbench_worker.optim.centralized import CentralizedOptimizer, aggregator_options, make_aggregator


def centralized_adam(
    params: Iterable[torch.nn.Parameter], comm: Comm, settings: OptimizerSettings
) -> CentralizedOptimizer:
    """Adam with all-reduce gradient averaging, configured from ``settings``."""
    plist = [p for p in params if p.requires_grad]
    adam = torch.optim.Adam(
        plist,
        lr=settings.lr,
        betas=settings.adam_betas,
        eps=settings.adam_eps,
        weight_decay=settings.weight_decay,
        fused=True,
    )
    aggregator = make_aggregator(settings.aggregation, comm, plist, **aggregator_options(settings))
    return CentralizedOptimizer(adam, aggregator)
