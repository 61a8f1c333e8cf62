"""Executors launch run plans: local processes, Kubernetes Jobs or Slurm batch jobs (modelled on
TorchX schedulers)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlbench_tui.executors.api import Executor

# name -> "module:Class", imported lazily so the kubernetes client loads only when needed.
EXECUTORS: dict[str, str] = {
    "local": "mlbench_tui.executors.local:LocalExecutor",
    "kubernetes": "mlbench_tui.executors.kubernetes:KubernetesExecutor",
    "slurm": "mlbench_tui.executors.slurm:SlurmExecutor",
}


def get_executor(name: str, **kwargs: Any) -> Executor:
    """Instantiate the executor registered under ``name`` (the spec's ``target.kind``)."""
    from mlbench_tui.errors import ExecutorError

    try:
        module_name, class_name = EXECUTORS[name].split(":")
    except KeyError:
        raise ExecutorError(f"unknown executor {name!r}", hint=f"one of: {', '.join(EXECUTORS)}") from None
    cls = getattr(importlib.import_module(module_name), class_name)
    executor: Executor = cls(**kwargs)
    return executor
