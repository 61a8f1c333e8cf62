"""Rules that tie a structurally valid spec to the official task catalog.

Each rule yields a ``PolicyIssue`` located by its path in the document (``("spec", "backend", 1)``)
so the loader can point at the exact line. Messages say what to change, not only what is wrong.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from mlbench_worker.data.options import check_data_options

from mlbench_tui.spec.datasets import data_path_issues
from mlbench_tui.spec.diagnostics import Loc, PolicyIssue, did_you_mean
from mlbench_tui.spec.environment import env_issues
from mlbench_tui.spec.hyperparameters import overridden, override_problems
from mlbench_tui.spec.models import BenchmarkSpec, CustomGoal
from mlbench_tui.spec.scaling import scaling_issues
from mlbench_tui.spec.targets import KubernetesTarget, SlurmTarget
from mlbench_tui.spec.tasks import GOAL_METRICS, TaskInfo, get_task

__all__ = ["PolicyIssue", "hyperparameter_issues", "policy_issues"]


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
        *_network_issues(spec),
        *env_issues(dict(spec.spec.env), spec.spec.env_loading_code, spec.spec.workers, spec.spec.target),
        *hyperparameter_issues(task, spec.spec.hyperparameters, spec.spec.backend),
        *scaling_issues(spec, task),
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
    for problem in overridden(task.id, body.hyperparameters).graph_problems():
        yield PolicyIssue(("spec", "hyperparameters", problem.name), problem.message, f"{problem.hint} {off}")


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


def _network_issues(spec: BenchmarkSpec) -> Iterator[PolicyIssue]:
    """``network.kubernetes_bandwidth`` chooses how pods are limited: it means nothing elsewhere."""
    network = spec.spec.network
    if network is None or network.kubernetes_bandwidth is None:
        return
    if not isinstance(spec.spec.target, KubernetesTarget):
        yield PolicyIssue(
            ("spec", "network", "kubernetes_bandwidth"),
            "network.kubernetes_bandwidth applies to kubernetes targets; this spec runs on "
            f"{spec.spec.target.kind}",
            "remove it: local runs shape their emulated links with tc",
        )


def _data_issues(spec: BenchmarkSpec, task: TaskInfo) -> Iterator[PolicyIssue]:
    data = spec.spec.data
    if not task.reads_data and "data" in spec.spec.model_fields_set and data.source != "synthetic":
        yield PolicyIssue(
            ("spec", "data"),
            f"task {task.id} ({task.name}) generates its inputs and reads no dataset: "
            "remove spec.data or set it to 'synthetic'",
        )
        return
    typed, problems = check_data_options(task.id, data.source, data.options)
    for problem in problems:
        hint = problem.hint or (did_you_mean(problem.name, problem.choices) if problem.at_key else None)
        if not problem.at_key and problem.choices:
            hint = did_you_mean(str(data.options.get(problem.name)), problem.choices)
        yield PolicyIssue(("spec", "data", "options", problem.name), problem.message, hint, problem.at_key)
    if getattr(typed, "decoder", None) == "gpu" and spec.spec.hardware.gpus == 0:
        yield PolicyIssue(
            ("spec", "data", "options", "decoder"),
            "data option decoder 'gpu' decodes on the rank's GPU, and this run has none",
            "set spec.hardware.gpu, or decoder 'auto' or 'cpu'",
        )
    yield from data_path_issues(data.source, data.path, spec.spec.target)


def _goal_issues(spec: BenchmarkSpec, task: TaskInfo) -> Iterator[PolicyIssue]:
    goal = spec.spec.goal
    if task.goal is None and goal is not None:
        yield PolicyIssue(
            ("spec", "goal"), f"task {task.id} ({task.name}) is a sweep without a goal: remove spec.goal"
        )
        return
    if not isinstance(goal, CustomGoal):
        return
    if goal.metric not in task.goal_metrics:
        yield PolicyIssue(
            ("spec", "goal", "metric"),
            f"task {task.id} ({task.name}) does not report {goal.metric}: its goals watch "
            f"{' or '.join(task.goal_metrics)}",
        )
        return
    metric = GOAL_METRICS[goal.metric]
    direction = goal.resolved_direction()
    if direction != metric.direction:
        better, verb = ("higher", "maximised") if metric.direction == "max" else ("lower", "minimised")
        yield PolicyIssue(
            ("spec", "goal", "direction"),
            f"direction {direction} on {goal.metric}: {metric.what} is better {better}, so an untrained "
            "model meets this goal",
            f"remove direction ({goal.metric} is {verb})",
        )
        return
    reachable = goal.target <= metric.highest if direction == "max" else goal.target >= metric.lowest
    trivial = goal.target <= metric.lowest if direction == "max" else goal.target >= metric.highest
    if not reachable:
        bound = metric.highest if direction == "max" else metric.lowest
        yield PolicyIssue(
            ("spec", "goal", "target"),
            f"{goal.metric} ({metric.what}) is never {'above' if direction == 'max' else 'below'} {bound:g}: "
            f"a target of {goal.target:g} is never reached",
            f"use a target {'at most' if direction == 'max' else 'at least'} {bound:g}",
        )
    elif trivial:
        yield PolicyIssue(
            ("spec", "goal", "target"),
            f"{goal.metric} ({metric.what}) is never {'below' if direction == 'max' else 'above'} "
            f"{goal.target:g}: an untrained model meets this goal",
            f"use the task's goal ('full': {task.goal.full:g}, 'light': {task.goal.light:g})"
            if task.goal
            else None,
        )


def hyperparameter_issues(
    task: TaskInfo, hyperparameters: Mapping[str, Any], backends: Sequence[str] = ()
) -> Iterator[PolicyIssue]:
    """Overrides checked against the task's declared hyperparameters (``spec.hyperparameters``).

    Takes plain pieces rather than a whole spec so the loader can check hyperparameters even when
    another part of the document is invalid.
    """
    for problem in override_problems(task.id, hyperparameters, backends):
        value = hyperparameters.get(problem.name)
        hint = None
        if problem.at_key:
            hint = did_you_mean(problem.name, problem.choices)
        elif problem.choices:
            items = value if isinstance(value, list) else [value]
            bad = next((str(v) for v in items if v not in problem.choices), str(value))
            hint = did_you_mean(bad, problem.choices)
        yield PolicyIssue(("spec", "hyperparameters", problem.name), problem.message, hint, problem.at_key)
