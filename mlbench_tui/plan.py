"""Run plans: what one benchmark run will do, fully resolved from a spec.

``expand(spec)`` turns a validated ``BenchmarkSpec`` into a list of frozen ``RunPlan``s (sweeps x
repeats). It is pure and deterministic, so plans can be golden-tested and re-derived: executors
and manifests are functions of a plan. ``worker_settings(plan)`` is the wire's typed worker config and
``worker_config(plan)`` its JSON document, handed to the worker runtime (``python -m mlbench_worker
--config FILE``), which parses it back into the same types (``mlbench_worker.wire``).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from mlbench_worker.config import (
    DEFAULT_TELEMETRY_INTERVAL_S,
    DataConfig,
    GoalConfig,
    ImplementationConfig,
    WorkerConfig,
    config_document,
)
from mlbench_worker.data.options import parse_data_options
from mlbench_worker.hyperparams import parse_hyperparameters
from mlbench_worker.preflight_config import Expectation, PreflightConfig
from mlbench_worker.wire import PROBE_ALLREDUCE, PROBE_GEMM
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_serializer,
    model_serializer,
)

from mlbench_tui.spec.reference_table import table as reference_table
from mlbench_tui.spec.targets import LocalTarget, Target

ImplementationPlan = ImplementationConfig
"""How the worker executes steps (the spec's ``implementation``): the wire's type, one declaration."""

if TYPE_CHECKING:
    from mlbench_worker.hyperparams import AnyHyperparameters

    from mlbench_tui.spec.models import BenchmarkSpec, Preflight


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class GoalPlan(_Frozen):
    """The resolved goal: which global metric must reach which value, and in which direction."""

    kind: Literal["full", "light", "custom"]
    metric: str = Field(description="Metric key, e.g. 'val_global_Prec@1' (percent).")
    target: float
    direction: Literal["max", "min"] = Field(description="'max': reach >= target; 'min': <= target.")


class ResourcesPlan(_Frozen):
    """Per-rank resources."""

    cpu: str | None = Field(default=None, description="Kubernetes CPU quantity per rank, e.g. '2' or '500m'.")
    threads_per_rank: int = Field(ge=1, description="torch/OMP intra-op threads per rank, derived from cpu.")
    memory: str | None = Field(default=None, description="Kubernetes memory quantity per rank, e.g. '12Gi'.")
    gpus: int = Field(default=0, ge=0, description="GPUs per rank.")
    gpu_type: str | None = Field(default=None, description="GPU model, e.g. 'T4', 'A100'.")
    gpu_type_strict: bool = Field(
        default=True, description="Ranks fail at start on a GPU that is not gpu_type (hardware.gpu.strict)."
    )
    precision: Literal["fp32", "bf16", "fp16", "amp"] = "fp32"


class DataPlan(_Frozen):
    """Where the dataset comes from."""

    source: Literal["synthetic", "path", "download"]
    path: str | None = Field(
        default=None, description="Dataset directory (path) or cache directory (download)."
    )
    options: dict[str, Any] = Field(default_factory=dict, description="Source options, e.g. synthetic sizes.")


LINK_MIN_BURST_BYTES = 64 * 1024 + 1514  # one full GSO segment plus a frame
LINK_BURST_S = 0.001


def link_burst_bytes(rate_bps: int) -> int:
    """What a link shaped to ``rate_bps`` lets through at once (its token bucket): at least one
    64 KiB GSO segment (a smaller bucket splits them, costing CPU and accuracy), and about 1 ms
    of traffic at high rates. Results allow for it when they check a link's rate."""
    return max(LINK_MIN_BURST_BYTES, math.ceil(rate_bps / 8 * LINK_BURST_S))


class NetworkPlan(_Frozen):
    """One point of the spec's network sweep: each rank's link rate in each direction and the
    one-way delay added to what it sends."""

    bandwidth_bps: int | None = Field(description="Bits per second per rank and direction; None: unlimited.")
    latency_s: float = Field(default=0.0, ge=0, description="Added one-way delay, seconds.")
    kubernetes_bandwidth: Literal["cni", "tc"] = Field(
        default="cni",
        description="How Kubernetes pods are limited: the bandwidth CNI plugin's annotations, or tc from "
        "an init container (latency always uses the init container).",
    )

    @property
    def shaped(self) -> bool:
        """Whether anything limits the links (a rate or a delay); unlimited links still separate nodes."""
        return self.bandwidth_bps is not None or self.latency_s > 0

    def label(self) -> str:
        """How the plan, status and results name it: ``100Mbit``, ``1Gbit +5ms``, ``unlimited``."""
        from mlbench_tui.spec.network import format_bandwidth, format_latency

        text = format_bandwidth(self.bandwidth_bps)
        return f"{text} +{format_latency(self.latency_s)}" if self.latency_s > 0 else text


class PreflightPlan(_Frozen):
    """The checks a run's ranks make before training (the spec's ``preflight``, resolved)."""

    enabled: bool = Field(default=False, description="Whether the ranks run the pre-flight.")
    on_failure: Literal["stop", "warn"] = "stop"
    min_gemm_tflops: float | None = None
    max_allreduce_us: float | None = None


class RunPlan(_Frozen):
    """One fully resolved run: the unit that executors launch and the store records."""

    name: str = Field(description="Stable run name: <metadata.name>-<backend>-<workers>w[-r<i>].")
    spec_name: str
    spec_hash: str = Field(description="sha256 of the normalized spec (the whole spec, not this run).")
    task: str = Field(description="Official task id, e.g. '1a'.")
    task_name: str = Field(description="Official task name, e.g. 'resnet20-cifar10'.")
    framework: Literal["pytorch", "tensorflow"] = "pytorch"
    backend: Literal["gloo", "nccl", "mpi"]
    workers: int = Field(ge=1, description="World size (number of ranks).")
    ranks_per_node: int | None = Field(
        default=None,
        ge=1,
        description="Ranks sharing a node (hardware.ranks_per_node, at most workers); None: the target's "
        "default (one per pod on Kubernetes, target.tasks_per_node on Slurm, all of them locally).",
    )
    repeat: int = Field(default=0, ge=0, description="Index of this repeat, 0-based.")
    repeats: int = Field(default=1, ge=1)
    seed: int
    goal: GoalPlan | None = Field(description="None for tasks without a goal (0a all-reduce).")
    max_time_s: float | None = None
    resources: ResourcesPlan
    data: DataPlan
    hyperparameters: dict[str, Any] = Field(
        description="Effective hyperparameters (defaults + overrides, scaled)."
    )
    implementation: ImplementationPlan = Field(default_factory=ImplementationPlan)
    env: dict[str, str] = Field(
        default_factory=dict, description="Extra environment for every rank and its launcher."
    )
    rank_env: dict[str, str] = Field(
        default_factory=dict,
        description="Variables that load code (spec.env_loading_code): the ranks only set them, by starting "
        "again with them before their imports; no launcher runs with them.",
    )
    target: Target = Field(description="The spec's target: local processes, a Kubernetes or a Slurm cluster.")
    price_per_hour: float | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    telemetry_interval_s: float | None = Field(
        default=DEFAULT_TELEMETRY_INTERVAL_S,
        description="Seconds between hardware telemetry samples per rank; None: off.",
    )
    price_per_kwh: float | None = Field(default=None, description="Energy price, for energy cost to target.")
    currency: str | None = Field(default=None, description="ISO 4217 code of both prices; None: USD.")
    network: NetworkPlan | None = Field(
        default=None,
        description="The links between ranks (spec.network, one sweep point); None: the machine's own "
        "network.",
    )

    def emulated_nodes(self) -> int:
        """How many nodes the ranks form: ``ranks_per_node`` ranks each (one rank per node for a run
        with a network and no ``ranks_per_node``, every rank on one node without a network)."""
        if self.network is None and self.ranks_per_node is None:
            return 1
        return math.ceil(self.workers / (self.ranks_per_node or 1))

    def node_of(self, rank: int) -> int:
        """The emulated node of ``rank`` (ranks fill nodes in order)."""
        return rank // (self.ranks_per_node or (1 if self.network is not None else self.workers))

    preflight: PreflightPlan = Field(
        default_factory=PreflightPlan, description="Health checks before training (none for older plans)."
    )

    def typed_hyperparameters(self) -> AnyHyperparameters:
        """The recorded hyperparameters as the task's dataclass (what its ranks parse); a field an
        older plan lacks takes its official default."""
        from mlbench_tui.spec.hyperparameters import of_plan

        return of_plan(self.task, self.hyperparameters)

    @model_serializer(mode="wrap")
    def _without_unset_fields(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A plan without a network or ``rank_env`` serialises as before they existed (stored
        plans, the ConfigMap's plan.json and golden manifests stay the same)."""
        data: dict[str, Any] = handler(self)
        if data.get("network", ...) is None:
            del data["network"]
        if not self.rank_env:
            data.pop("rank_env", None)
        return data

    @field_serializer("target")
    def _target_as_written(self, target: BaseModel) -> dict[str, Any]:
        """Unset options stay out of the plan's JSON (the ConfigMap, the store), as in the spec."""
        dumped: dict[str, Any] = target.model_dump(mode="json", exclude_none=True)
        return dumped


MAX_WARNED_RUNS = 5


def plan_warnings(plans: Sequence[RunPlan], cpu_count: int) -> list[str]:
    """What will run, but not as measured on a machine of ``cpu_count`` cores: local runs whose
    ranks x threads exceed the cores share them, so their times measure the sharing."""
    crowded = [
        plan
        for plan in plans
        if isinstance(plan.target, LocalTarget) and plan.workers * plan.resources.threads_per_rank > cpu_count
    ]
    out = [
        f"run {plan.name} starts {plan.workers} local rank(s) x {plan.resources.threads_per_rank} thread(s) "
        f"on {cpu_count} core(s): the ranks share the cores, so its times measure the sharing "
        "(lower workers or hardware.cpu, or use a cluster target)"
        for plan in crowded[:MAX_WARNED_RUNS]
    ]
    if len(crowded) > MAX_WARNED_RUNS:
        more = len(crowded) - MAX_WARNED_RUNS
        out.append(f"... and {more} more run(s) with more ranks x threads than cores")
    return out


def worker_settings(plan: RunPlan, run_id: str) -> WorkerConfig:
    """What one rank of ``plan`` runs, as the wire's typed tree (the worker parses it back into it)."""
    on_gpu = plan.resources.gpus > 0
    goal = plan.goal
    return WorkerConfig(
        run_id=run_id,
        run_name=plan.name,
        task=plan.task,
        framework=plan.framework,
        backend=plan.backend,
        world_size=plan.workers,
        seed=plan.seed + plan.repeat,
        goal=GoalConfig(goal.metric, goal.target, goal.direction, goal.kind) if goal else None,
        max_time_s=plan.max_time_s,
        precision=plan.resources.precision,
        device="cuda" if on_gpu else "cpu",
        gpu_type=plan.resources.gpu_type if on_gpu else None,
        gpu_type_strict=plan.resources.gpu_type_strict,
        threads_per_rank=plan.resources.threads_per_rank,
        data=DataConfig(
            plan.data.source,
            plan.data.path,
            parse_data_options(plan.task, plan.data.source, plan.data.options),
        ),
        hyperparameters=parse_hyperparameters(plan.task, plan.hyperparameters),
        implementation=plan.implementation,
        telemetry_interval_s=plan.telemetry_interval_s,
        rank_env=dict(plan.rank_env),
        preflight=preflight_settings(plan),
    )


def preflight_plan(spec: Preflight, *, on_gpu: bool) -> PreflightPlan:
    """The spec's ``preflight`` resolved: ``auto`` is on for GPU runs, and wherever the spec sets
    a limit of its own."""
    limits = spec.min_gemm_tflops is not None or spec.max_allreduce_us is not None
    return PreflightPlan(
        enabled=(on_gpu or limits) if spec.enabled == "auto" else spec.enabled,
        on_failure=spec.on_failure,
        min_gemm_tflops=spec.min_gemm_tflops,
        max_allreduce_us=spec.max_allreduce_us,
    )


def preflight_settings(plan: RunPlan) -> PreflightConfig | None:
    """What the ranks' pre-flight judges against: the spec's own limits (any machine), then the
    reference table's expected probe figures for every machine class (a rank picks its own):
    the all-reduce at this backend and world size, the GEMM rate in this precision."""
    pf = plan.preflight
    if not pf.enabled:
        return None
    expectations = []
    if pf.min_gemm_tflops is not None:
        limit = Expectation("*", PROBE_GEMM, pf.min_gemm_tflops, source="the spec's limit", limit=True)
        expectations.append(limit)
    if pf.max_allreduce_us is not None:
        limit = Expectation("*", PROBE_ALLREDUCE, pf.max_allreduce_us, source="the spec's limit", limit=True)
        expectations.append(limit)
    for row in reference_table():
        here = row.backend in (None, plan.backend) and row.workers == plan.workers
        probe = row.figure == PROBE_ALLREDUCE and here
        gemm = row.figure == PROBE_GEMM and row.precision == plan.resources.precision
        if probe or gemm:
            band = row.repeats_band() or row.step_spread
            source = f"{row.source} {row.measured}"
            expectations.append(Expectation(row.machine, row.figure, row.value, band, source))
    return PreflightConfig(on_failure=pf.on_failure, expectations=tuple(expectations))


def worker_config(plan: RunPlan, run_id: str) -> dict[str, Any]:
    """The JSON document the worker runtime reads (``MLBENCH_CONFIG``): ``worker_settings`` serialised."""
    return config_document(worker_settings(plan, run_id))


def spec_hash(spec: BenchmarkSpec) -> str:
    """sha256 of the normalized spec (short forms expanded, keys sorted): equal specs, equal hash."""
    text = json.dumps(spec.normalized(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def threads_per_rank(cpu: str | None) -> int:
    """Intra-op threads for a rank with ``cpu`` (a Kubernetes quantity): ceil of the cores, at least 1.

    Unset means 1 thread rather than ``os.cpu_count() // workers`` so a plan never depends on the
    machine it was expanded on; set ``hardware.cpu`` to use more cores per rank.
    """
    if not cpu:
        return 1
    cores = float(cpu[:-1]) / 1000 if cpu.endswith("m") else float(cpu)
    return max(1, math.ceil(cores))


def _goal_plan(spec: BenchmarkSpec) -> GoalPlan | None:
    from mlbench_tui.spec.models import CustomGoal
    from mlbench_tui.spec.tasks import get_task

    task = get_task(spec.spec.task)
    if task is None or task.goal is None:
        return None
    goal = spec.spec.goal or "full"
    if isinstance(goal, CustomGoal):
        return GoalPlan(
            kind="custom", metric=goal.metric, target=goal.target, direction=goal.resolved_direction()
        )
    target = task.goal.full if goal == "full" else task.goal.light
    return GoalPlan(kind=goal, metric=task.goal.metric, target=target, direction=task.goal.direction)


def _effective_hyperparameters(spec: BenchmarkSpec, backend: str, workers: int) -> dict[str, Any]:
    from mlbench_tui.spec.hyperparameters import planned_values

    return planned_values(spec.spec.task, spec.spec.hyperparameters, workers, backend)


def expand(spec: BenchmarkSpec) -> list[RunPlan]:
    """All runs of a spec, in order: for each framework, backend, world size, network point and repeat.

    Pure and deterministic (no clock, no environment, no machine facts), so the same spec always
    yields the same plans and the same hash. Names are ``<name>-<backend>-<workers>w`` with
    ``-r<i>`` appended only when ``repeats > 1``.
    """
    from mlbench_tui.spec.tasks import get_task

    body = spec.spec
    task = get_task(body.task)
    assert task is not None, "BenchmarkSpec validation guarantees a known task"
    digest = spec_hash(spec)
    goal = _goal_plan(spec)
    hw = body.hardware
    threads = threads_per_rank(hw.cpu)
    resources = ResourcesPlan(
        cpu=hw.cpu,
        threads_per_rank=threads,
        memory=hw.memory,
        gpus=hw.gpus,
        gpu_type=hw.gpu.type if hw.gpu else None,
        gpu_type_strict=hw.gpu.strict if hw.gpu else True,
        precision=hw.precision,
    )
    data = DataPlan(source=body.data.source, path=body.data.path, options=dict(body.data.options))
    implementation = ImplementationPlan(
        cuda_graphs=body.implementation.cuda_graphs, host_allocator=body.implementation.host_allocator
    )
    if not task.reads_data and "data" not in body.model_fields_set:
        data = DataPlan(source="synthetic")  # e.g. all-reduce measures generated tensors, nothing to download
    loading_code = set(body.env_loading_code)
    env = {"OMP_NUM_THREADS": str(threads), **{k: v for k, v in body.env.items() if k not in loading_code}}
    rank_env = {k: v for k, v in body.env.items() if k in loading_code}
    networks: list[NetworkPlan | None] = [None]
    if body.network is not None:
        networks = [
            NetworkPlan(
                bandwidth_bps=bandwidth,
                latency_s=latency,
                kubernetes_bandwidth=body.network.kubernetes_bandwidth or "cni",
            )
            for bandwidth, latency in body.network.points()
        ]
    plans: list[RunPlan] = []
    for framework, backend, workers, network in itertools.product(
        body.framework, body.backend, body.workers, networks
    ):
        if workers == 1 and network is not None:
            # One rank has no peer and no link: one run, without a network, is every sweep
            # point's 1-worker baseline.
            if network is not networks[0]:
                continue
            network = None
        hp = _effective_hyperparameters(spec, backend, workers)
        point = None if network is None else (network.bandwidth_bps, network.latency_s)
        for repeat in range(body.repeats):
            plans.append(
                RunPlan(
                    name=spec.metadata.name + spec.run_suffix(framework, backend, workers, repeat, point),
                    spec_name=spec.metadata.name,
                    spec_hash=digest,
                    task=task.id,
                    task_name=task.name,
                    framework=framework,
                    backend=backend,
                    workers=workers,
                    ranks_per_node=min(hw.ranks_per_node, workers) if hw.ranks_per_node else None,
                    repeat=repeat,
                    repeats=body.repeats,
                    seed=body.seed,
                    goal=goal,
                    max_time_s=body.max_time,
                    resources=resources,
                    data=data,
                    hyperparameters=dict(hp),
                    implementation=implementation,
                    env=dict(env),
                    rank_env=dict(rank_env),
                    target=body.target,
                    price_per_hour=body.price_per_hour,
                    labels=dict(spec.metadata.labels),
                    telemetry_interval_s=body.telemetry.interval_s,
                    price_per_kwh=body.price_per_kwh,
                    currency=body.currency,
                    network=network,
                    preflight=preflight_plan(body.preflight, on_gpu=resources.gpus > 0),
                )
            )
    return plans
