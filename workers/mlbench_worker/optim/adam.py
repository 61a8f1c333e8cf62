"""CentralizedAdam: Adam on gradients averaged over all ranks (MLBench's centralized Adam).

Averaging the gradients before a local ``torch.optim.Adam`` step keeps every rank's parameters
and moment estimates identical, so k ranks with batch b behave like one process with batch k*b.
Settings come from the task's hyperparameters: ``lr``, ``adam_betas`` ([0.9, 0.999]),
``adam_eps`` (1e-8), ``weight_decay`` (0), and ``aggregation`` (``by_model`` or ``by_layer``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from mlbench_worker.comm import Comm
from mlbench_worker.optim.centralized import CentralizedOptimizer, make_aggregator


def centralized_adam(
    params: Iterable[torch.nn.Parameter], comm: Comm, hp: dict[str, Any]
) -> CentralizedOptimizer:
    """Adam with all-reduce gradient averaging, configured from ``hp``."""
    plist = [p for p in params if p.requires_grad]
    betas = hp.get("adam_betas") or (0.9, 0.999)
    if len(betas) != 2:
        raise ValueError(f"adam_betas must be two numbers, got {betas!r}")
    adam = torch.optim.Adam(
        plist,
        lr=float(hp["lr"]),
        betas=(float(betas[0]), float(betas[1])),
        eps=float(hp.get("adam_eps", 1e-8) or 1e-8),
        weight_decay=float(hp.get("weight_decay", 0.0) or 0.0),
        fused=True,
    )
    options: dict[str, Any] = {}
    if hp.get("bucket_mb"):
        options["bucket_mb"] = float(hp["bucket_mb"])
    aggregation = str(hp.get("aggregation", "by_model"))
    if aggregation == "by_model" and hp.get("overlap_comm"):
        options["overlap"] = True  # all-reduce buckets during backward (one backward per step)
    aggregator = make_aggregator(aggregation, comm, plist, **options)
    return CentralizedOptimizer(adam, aggregator)
