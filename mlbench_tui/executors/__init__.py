"""Executors launch run plans: local processes, Kubernetes Jobs or Slurm batch jobs (modelled on
TorchX schedulers). One package per backend behind ``executors.api.Executor``; the engine reaches
them only through this registry and that API."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlbench_tui.executors.api import Executor
    from mlbench_tui.lifecycle import RunHandle
    from mlbench_tui.plan import RunPlan

# name -> "module:Class", imported lazily so the kubernetes client loads only when needed.
EXECUTORS: dict[str, str] = {
    "local": "mlbench_tui.executors.local.executor:LocalExecutor",
    "kubernetes": "mlbench_tui.executors.kubernetes.executor:KubernetesExecutor",
    "slurm": "mlbench_tui.executors.slurm.executor:SlurmExecutor",
}


def executor_class(name: str) -> type[Executor[Any]]:
    """The executor class registered under ``name`` (imported now)."""
    from mlbench_tui.errors import ExecutorError

    try:
        module_name, class_name = EXECUTORS[name].split(":")
    except KeyError:
        raise ExecutorError(f"unknown executor {name!r}", hint=f"one of: {', '.join(EXECUTORS)}") from None
    cls: type[Executor[Any]] = getattr(importlib.import_module(module_name), class_name)
    return cls


def get_executor(name: str, **kwargs: Any) -> Executor[Any]:
    """Instantiate the executor registered under ``name`` (the spec's ``target.kind``)."""
    return executor_class(name)(**kwargs)


def executor_for_handle(handle: RunHandle) -> Executor[Any]:
    """The executor that runs handles of ``handle``'s scheme."""
    return get_executor(handle.scheme)


def executor_for(plan: RunPlan, cache: dict[str, Executor[Any]] | None = None) -> Executor[Any]:
    """The executor for a plan's target kind (one instance per kind when ``cache`` is given)."""
    kind = plan.target.kind
    if cache is not None and kind in cache:
        return cache[kind]
    executor = get_executor(kind)
    if cache is not None:
        cache[kind] = executor
    return executor


# What killed runs leave on this machine (a local run's emulated network), and who removes it.
LEFTOVERS: tuple[str, ...] = ("mlbench_tui.executors.local.network:remove_leftovers",)


def remove_leftovers() -> list[str]:
    """Remove what killed runs left on this machine, by their own names: one note per run. Every
    command that reaches the store calls it (cheap when nothing was left)."""
    notes: list[str] = []
    for entry in LEFTOVERS:
        module_name, function = entry.split(":")
        notes += getattr(importlib.import_module(module_name), function)()
    return notes


def plan_output(plans: Sequence[RunPlan], output: str) -> str | None:
    """``mlbench plan -o OUTPUT`` rendered by the executor that owns that format (Slurm's
    ``sbatch`` batch scripts, Kubernetes' ``yaml`` manifests); None when no executor renders
    these plans in it (the generic rendering applies)."""
    for name in EXECUTORS:
        if output in executor_class(name).plan_outputs:
            text = get_executor(name).render_plans(plans, output)
            if text is not None:
                return text
    return None
