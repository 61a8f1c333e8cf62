"""Rules that tie a structurally valid spec to the official task catalog.

Each rule yields a ``PolicyIssue`` located by its path in the document (``("spec", "backend", 1)``)
so the loader can point at the exact line. Messages say what to change, not only what is wrong.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mlbench_tui.spec.diagnostics import did_you_mean
from mlbench_tui.spec.models import BenchmarkSpec
from mlbench_tui.spec.targets import KubernetesTarget, SlurmTarget
from mlbench_tui.spec.tasks import AUTO, TaskInfo, get_task

Loc = tuple[str | int, ...]

# Hyperparameters that must stay >= 0 rather than > 0 (exponents, warm-up lengths, flags).
_NON_NEGATIVE = frozenset({"sizes_min_exp", "sizes_max_exp", "warmup", "warmup_epochs", "warmup_steps"})


@dataclass(frozen=True)
class PolicyIssue:
    """A rule violation at ``loc`` (a path into the spec document), with an optional hint."""

    loc: Loc
    message: str
    hint: str | None = None
    at_key: bool = False  # point at the key itself (unknown or fixed keys), not its value


def policy_issues(spec: BenchmarkSpec) -> list[PolicyIssue]:
    """Every catalog rule the spec breaks (empty when the spec is runnable as written)."""
    task = get_task(spec.spec.task)
    if task is None:  # pragma: no cover - the model validator already guarantees a known task
        return [PolicyIssue(("spec", "task"), f"unknown task '{spec.spec.task}'")]
    return [
        *_framework_issues(spec, task),
        *_backend_issues(spec, task),
        *_precision_issues(spec, task),
        *_implementation_issues(spec, task),
        *_goal_issues(spec, task),
        *_data_issues(spec, task),
        *_name_issues(spec),
        *_slurm_issues(spec),
        *_node_issues(spec),
        *hyperparameter_issues(task, spec.spec.hyperparameters, spec.spec.backend),
    ]


def _backend_loc(spec: BenchmarkSpec, index: int) -> Loc:
    return ("spec", "backend", index) if len(spec.spec.backend) > 1 else ("spec", "backend")


def _framework_loc(spec: BenchmarkSpec, index: int) -> Loc:
    return ("spec", "framework", index) if len(spec.spec.framework) > 1 else ("spec", "framework")


TF_PRECISIONS = ("fp32", "bf16")  # what the TensorFlow implementation runs; fp16/amp are PyTorch-only


def _framework_issues(spec: BenchmarkSpec, task: TaskInfo) -> Iterator[PolicyIssue]:
    body = spec.spec
    for i, framework in enumerate(body.framework):
        loc = _framework_loc(spec, i)
        if framework not in task.frameworks:
            yield PolicyIssue(
                loc,
                f"task {task.id} ({task.name}) has no {framework} implementation: "
                f"use framework {' or '.join(task.frameworks)}",
            )
            continue
        if framework != "tensorflow":
            continue
        for j, backend in enumerate(body.backend):
            if backend == "mpi":
                yield PolicyIssue(
                    _backend_loc(spec, j),
                    "the tensorflow implementation does not run on mpi: use backend gloo (or nccl on GPUs)",
                )
        if body.hardware.precision not in TF_PRECISIONS:
            yield PolicyIssue(
                ("spec", "hardware", "precision"),
                f"the tensorflow implementation runs precision {' or '.join(TF_PRECISIONS)}, "
                f"not {body.hardware.precision}: change spec.hardware.precision or drop tensorflow",
            )


def _backend_issues(spec: BenchmarkSpec, task: TaskInfo) -> Iterator[PolicyIssue]:
    body = spec.spec
    gpus = body.hardware.gpus
    for i, backend in enumerate(body.backend):
        loc = _backend_loc(spec, i)
        if backend not in task.backends:
            yield PolicyIssue(
                loc,
                f"task {task.id} does not support backend {backend}: use one of {', '.join(task.backends)}",
            )
        elif backend == "nccl" and gpus == 0:
            yield PolicyIssue(
                loc,
                "backend nccl needs GPUs: set spec.hardware.gpu (e.g. '1xT4') "
                "or use backend gloo or mpi on CPU",
            )
        elif backend == "mpi" and body.hardware.precision == "fp16":
            yield PolicyIssue(
                loc,
                "fp16 all-reduce is not supported on mpi: use backend gloo or nccl, "
                "or precision amp/bf16/fp32",
            )


def _precision_issues(spec: BenchmarkSpec, task: TaskInfo) -> Iterator[PolicyIssue]:
    hw = spec.spec.hardware
    loc: Loc = ("spec", "hardware", "precision")
    if hw.precision not in task.precisions:
        yield PolicyIssue(
            loc,
            f"task {task.id} does not allow precision {hw.precision}: "
            f"use one of {', '.join(task.precisions)}",
        )
    elif hw.precision == "fp16" and hw.gpus == 0:
        yield PolicyIssue(loc, "precision fp16 needs GPUs: set spec.hardware.gpu, or use bf16 or amp on CPU")


def _implementation_issues(spec: BenchmarkSpec, task: TaskInfo) -> Iterator[PolicyIssue]:
    body = spec.spec
    if not body.implementation.cuda_graphs:
        return
    loc: Loc = ("spec", "implementation", "cuda_graphs")
    off = "or remove spec.implementation.cuda_graphs"
    if task.no_cuda_graphs:
        yield PolicyIssue(
            loc,
            f"task {task.id} cannot run in CUDA graphs: {task.no_cuda_graphs}",
            "remove spec.implementation.cuda_graphs",
        )
        return
    if "tensorflow" in body.framework:
        hint = f"drop tensorflow from spec.framework {off}"
        yield PolicyIssue(loc, "cuda_graphs is a choice of the pytorch implementation", hint)
    if body.hardware.gpus == 0:
        hint = f"set spec.hardware.gpu (e.g. '1xH100') {off}"
        yield PolicyIssue(loc, "cuda_graphs needs GPUs, and this run has none (CPU only)", hint)
    for i, backend in enumerate(body.backend):
        if backend != "nccl":
            yield PolicyIssue(
                _backend_loc(spec, i),
                f"cuda_graphs captures the gradient all-reduce, which only nccl can run inside a graph "
                f"({backend} goes through the host)",
                f"use backend nccl {off}",
            )
    if body.hyperparameters.get("optimizer") == "power_sgd":
        yield PolicyIssue(
            ("spec", "hyperparameters", "optimizer"),
            "power_sgd cannot run inside a CUDA graph (its QR factorisations take host-side steps)",
            f"use centralized_sgd or centralized_adam {off}",
        )


MAX_RUN_NAME = 63  # run names become Kubernetes object names and DNS labels


def _name_issues(spec: BenchmarkSpec) -> Iterator[PolicyIssue]:
    body = spec.spec
    suffix = max(
        len(spec.run_suffix(f, b, w)) for f in body.framework for b in body.backend for w in body.workers
    )
    longest = len(spec.metadata.name) + suffix
    if longest > MAX_RUN_NAME:
        yield PolicyIssue(
            ("metadata", "name"),
            f"run names would be up to {longest} characters (limit {MAX_RUN_NAME}, they name Kubernetes "
            f"objects): shorten metadata.name to at most {MAX_RUN_NAME - suffix} characters",
        )


def _workers_loc(spec: BenchmarkSpec, index: int, field: Loc) -> Loc:
    return ("spec", "workers", index) if len(spec.spec.workers) > 1 else field


def _slurm_issues(spec: BenchmarkSpec) -> Iterator[PolicyIssue]:
    """A Slurm job places one rank per task: the layout must hold every world size swept."""
    body = spec.spec
    target = body.target
    if not isinstance(target, SlurmTarget):
        return
    if "tensorflow" in body.framework:
        yield PolicyIssue(
            _framework_loc(spec, body.framework.index("tensorflow")),
            "the tensorflow implementation runs on local and kubernetes targets, not on slurm: "
            "use framework pytorch",
        )
    per_node = body.hardware.ranks_per_node
    if per_node is not None and target.tasks_per_node not in (None, per_node):
        yield PolicyIssue(
            ("spec", "hardware", "ranks_per_node"),
            f"hardware.ranks_per_node {per_node} and target.tasks_per_node {target.tasks_per_node} "
            "disagree: on slurm they are the same thing",
            "set only one of them",
        )
        return
    asked = target.tasks_per_node or per_node
    if target.nodes is None:
        field: Loc = ("spec", "target", "tasks_per_node")
        hint = f"use world sizes that are multiples of {asked}"
        if target.tasks_per_node is None:
            field = ("spec", "hardware", "ranks_per_node")
    elif asked is None:
        field, hint = (
            ("spec", "target", "nodes"),
            "use world sizes that are multiples of nodes, or set tasks_per_node instead",
        )
    else:
        field, hint = ("spec", "target", "nodes"), "set only tasks_per_node (nodes then follow from workers)"
    for index, workers in enumerate(body.workers):
        try:
            target.layout(workers, per_node)
        except ValueError as exc:
            yield PolicyIssue(_workers_loc(spec, index, field), str(exc), hint)


def _node_issues(spec: BenchmarkSpec) -> Iterator[PolicyIssue]:
    """On Kubernetes ranks that share a node share a pod: every world size above
    ``ranks_per_node`` fills whole pods, and only torchrun (pytorch) starts several in one pod."""
    body = spec.spec
    per_node = body.hardware.ranks_per_node
    if per_node is None or per_node == 1 or not isinstance(body.target, KubernetesTarget):
        return
    if "tensorflow" in body.framework:
        yield PolicyIssue(
            ("spec", "hardware", "ranks_per_node"),
            "the tensorflow implementation runs one rank per pod on kubernetes: "
            "remove hardware.ranks_per_node or use framework pytorch",
        )
    for index, workers in enumerate(body.workers):
        if workers > per_node and workers % per_node:
            yield PolicyIssue(
                _workers_loc(spec, index, ("spec", "hardware", "ranks_per_node")),
                f"{workers} workers do not fill whole nodes of {per_node} ranks: one pod runs the ranks "
                "of one node",
                f"use world sizes up to {per_node} or multiples of it",
            )


def _data_issues(spec: BenchmarkSpec, task: TaskInfo) -> Iterator[PolicyIssue]:
    if task.id == "0a" and "data" in spec.spec.model_fields_set and spec.spec.data.source != "synthetic":
        yield PolicyIssue(
            ("spec", "data"),
            "task 0a measures all-reduce on generated tensors and reads no dataset: "
            "remove spec.data or set it to 'synthetic'",
        )


def _goal_issues(spec: BenchmarkSpec, task: TaskInfo) -> Iterator[PolicyIssue]:
    goal = spec.spec.goal
    if task.goal is None and goal is not None:
        yield PolicyIssue(
            ("spec", "goal"), f"task {task.id} ({task.name}) is a sweep without a goal: remove spec.goal"
        )


def _type_name(value: Any) -> str:
    if value == AUTO:
        return "'auto', true or false"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


def _type_matches(default: Any, value: Any) -> bool:
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, int):
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, int | float) and not isinstance(value, bool)
    if default == AUTO:  # a switch the worker decides unless the spec says true or false
        return value == AUTO or isinstance(value, bool)
    if isinstance(default, str):
        return isinstance(value, str)
    if isinstance(default, list):
        return (
            isinstance(value, list) and all(_type_matches(default[0], v) for v in value) if default else True
        )
    return True


def hyperparameter_issues(
    task: TaskInfo, hyperparameters: Mapping[str, Any], backends: Sequence[str] = ()
) -> Iterator[PolicyIssue]:
    """Overrides checked against the task's policy: known, overridable, right type and range.

    Takes plain pieces rather than a whole spec so the loader can check hyperparameters even when
    another part of the document is invalid.
    """
    overridable = sorted(task.overridable)
    allowed = ", ".join(overridable)
    if "mpi" in backends and task.id == "0a" and "fp16" in (hyperparameters.get("dtypes") or []):
        yield PolicyIssue(
            ("spec", "hyperparameters", "dtypes"),
            "fp16 all-reduce is not supported on mpi: remove fp16 from hyperparameters.dtypes "
            "or use backend gloo or nccl",
        )
    for key, value in hyperparameters.items():
        loc: Loc = ("spec", "hyperparameters", key)
        if key not in task.defaults:
            yield PolicyIssue(
                loc,
                f"unknown hyperparameter '{key}' for task {task.id}; overridable: {allowed}",
                did_you_mean(key, overridable),
                at_key=True,
            )
            continue
        if key not in task.overridable:
            yield PolicyIssue(
                loc,
                f"hyperparameter '{key}' is fixed by task {task.id} (only batch size and the learning-rate "
                f"schedule may change, so results stay comparable); overridable: {allowed}",
                at_key=True,
            )
            continue
        default = task.defaults[key]
        if not _type_matches(default, value):
            yield PolicyIssue(loc, f"hyperparameter '{key}' must be {_type_name(default)}, got {value!r}")
            continue
        choices = task.choices.get(key)
        if choices is not None:
            items = value if isinstance(value, list) else [value]
            for item in items:
                if item not in choices:
                    yield PolicyIssue(
                        loc,
                        f"invalid value {item!r} for hyperparameter '{key}': expected one of "
                        + ", ".join(repr(c) for c in choices),
                        did_you_mean(str(item), [str(c) for c in choices]),
                    )
            if isinstance(value, list) and not value:
                yield PolicyIssue(loc, f"hyperparameter '{key}' must not be empty")
            continue
        if isinstance(value, int | float) and not isinstance(value, bool):
            if not math.isfinite(value):
                yield PolicyIssue(loc, f"hyperparameter '{key}' must be a finite number, got {value}")
            elif key in _NON_NEGATIVE:
                if value < 0:
                    yield PolicyIssue(loc, f"hyperparameter '{key}' must be >= 0, got {value}")
            elif value <= 0:
                yield PolicyIssue(loc, f"hyperparameter '{key}' must be > 0, got {value}")
            elif key.endswith("_factor") and key.startswith(("plateau", "decay")) and value >= 1:
                yield PolicyIssue(loc, f"hyperparameter '{key}' must be between 0 and 1, got {value}")
    hp = {**task.defaults, **hyperparameters}
    lo, hi = hp.get("sizes_min_exp"), hp.get("sizes_max_exp")
    if task.id == "0a" and isinstance(lo, int) and isinstance(hi, int):
        if lo > hi:
            yield PolicyIssue(
                ("spec", "hyperparameters", "sizes_min_exp"),
                f"sizes_min_exp ({lo}) must not exceed sizes_max_exp ({hi})",
            )
        if hi > 9:
            yield PolicyIssue(
                ("spec", "hyperparameters", "sizes_max_exp"),
                f"sizes_max_exp {hi} means tensors of 10^{hi} elements: use at most 9",
            )
