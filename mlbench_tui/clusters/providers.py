"""The cluster provider protocol and the provider registry.

``mlbench cluster`` talks to every backend (GKE, EKS, KIND, Slurm) through the small ``Provider``
protocol. Providers are registered by name as ``"module:Class"`` and imported lazily (TorchX's
scheduler registry), so a new backend is one module plus one line. Clusters are remembered as
JSON records under the state directory (``mlbench_tui.cluster_records``), which is what
``cluster list`` and ``cluster use`` read without needing any cloud tool installed.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from mlbench_tui.cluster_records import ClusterRecord
from mlbench_tui.errors import InfraError, UsageError
from mlbench_tui.spec.gpus import GPU_MODELS, canonical_gpu_model, suggest_gpu_model

# name -> "module:Class". The kind provider and the in-cluster install live with the Kubernetes
# code (issue 6); they are optional here and a clear error says so when they are missing.
PROVIDERS: dict[str, str] = {
    "gcp": "mlbench_tui.clusters.automation:GcpProvider",
    "aws": "mlbench_tui.clusters.automation:AwsProvider",
    "kind": "mlbench_tui.clusters.kind:KindProvider",
    "slurm": "mlbench_tui.clusters.slurm:SlurmProvider",
}

# The in-cluster server installer: ``install(context: str | None, namespace: str) -> None``.
INCLUSTER_INSTALLER = "mlbench_tui.clusters.incluster:install"


Progress = Callable[[str], None]

_NAME_RE = re.compile(r"^[a-z]([-a-z0-9]{0,28}[a-z0-9])?$")
_GPU_RE = re.compile(r"^\s*(\d+)\s*[xX]\s*([A-Za-z0-9-]+)\s*$")


@dataclass(frozen=True)
class GpuSpec:
    """GPUs per node: ``count`` devices of ``model`` (normalized upper case, e.g. 'T4')."""

    count: int
    model: str

    def __str__(self) -> str:
        return f"{self.count}x{self.model}"


def parse_gpu(text: str) -> GpuSpec:
    """Parse the short form ``NxMODEL`` (``1xT4``, ``8xA100``) into a ``GpuSpec``."""
    match = _GPU_RE.fullmatch(text)
    if match is None:
        raise UsageError(f"invalid GPU spec {text!r}", hint="use COUNTxMODEL, e.g. 1xT4 or 8xA100")
    count, typed = int(match.group(1)), match.group(2)
    if not 1 <= count <= 16:
        raise UsageError(f"invalid GPU count {count} in {text!r}", hint="GPUs per node must be 1..16")
    model = canonical_gpu_model(typed)
    if model is None:
        suggestion = suggest_gpu_model(typed)
        known = f"known models: {', '.join(GPU_MODELS)}"
        raise UsageError(
            f"unknown GPU model {typed!r}",
            hint=f"did you mean '{suggestion}'? ({known})" if suggestion else known,
        )
    return GpuSpec(count, model)


@dataclass(frozen=True)
class ClusterRequest:
    """What the user asked for: validated on construction, provider-neutral."""

    provider: str
    name: str
    nodes: int = 1
    gpu: GpuSpec | None = None
    machine_type: str | None = None
    spot: bool = False
    region: str | None = None
    zone: str | None = None
    project: str | None = None
    min_nodes: int | None = None
    max_nodes: int | None = None
    disk_gb: int = 100

    def __post_init__(self) -> None:
        if not _NAME_RE.fullmatch(self.name):
            raise UsageError(
                f"invalid cluster name {self.name!r}",
                hint="use 1-30 lowercase letters, digits and '-', starting with a letter",
            )
        if self.nodes < 1:
            raise UsageError(f"--nodes must be at least 1 (got {self.nodes})")
        if self.min_nodes is not None and self.min_nodes < 0:
            raise UsageError(f"--min-nodes must be >= 0 (got {self.min_nodes})")
        if self.min_nodes is not None and self.max_nodes is not None and self.min_nodes > self.max_nodes:
            raise UsageError(f"--min-nodes ({self.min_nodes}) is greater than --max-nodes ({self.max_nodes})")
        if not self.autoscaling_min <= self.nodes <= self.autoscaling_max:
            raise UsageError(
                f"--nodes {self.nodes} is outside the autoscaling range "
                f"{self.autoscaling_min}..{self.autoscaling_max}"
            )
        if not 20 <= self.disk_gb <= 65536:
            raise UsageError(f"--disk-gb must be between 20 and 65536 (got {self.disk_gb})")

    @property
    def autoscaling_min(self) -> int:
        """Lower bound of the GPU pool size (defaults to ``nodes``: a fixed-size pool)."""
        return self.nodes if self.min_nodes is None else self.min_nodes

    @property
    def autoscaling_max(self) -> int:
        """Upper bound of the GPU pool size (defaults to ``max(nodes, min_nodes)``)."""
        return max(self.nodes, self.autoscaling_min) if self.max_nodes is None else self.max_nodes


class Provider(Protocol):
    """A cluster backend. Implementations raise ``InfraError`` with a hint on failure."""

    def create(self, request: ClusterRequest, *, progress: Progress) -> ClusterRecord:
        """Create the cluster, write its kubeconfig context, save and return its record."""
        ...

    def delete(self, name: str, *, progress: Progress) -> None:
        """Delete the cluster, its kubeconfig context and its record; idempotent."""
        ...

    def list(self) -> list[ClusterRecord]:
        """The clusters of this provider that mlbench knows about."""
        ...

    def use(self, name: str) -> str:
        """Make the cluster's context the current kubeconfig context; return the context name."""
        ...


@runtime_checkable
class Preflight(Protocol):
    """Optional: providers that can check tools and credentials before anything is created."""

    def preflight(self, request: ClusterRequest) -> None: ...


def _is_missing(exc: ModuleNotFoundError, module_name: str) -> bool:
    """True when the module itself is absent (not a dependency it imports)."""
    return bool(exc.name) and (exc.name == module_name or module_name.startswith(f"{exc.name}."))


def load_provider(name: str) -> Provider:
    """Instantiate the provider registered as ``name`` (lazy import, clear errors)."""
    target = PROVIDERS.get(name)
    if target is None:
        raise UsageError(f"unknown cluster provider {name!r}", hint=f"choose one of: {', '.join(PROVIDERS)}")
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if _is_missing(exc, module_name):
            raise InfraError(
                f"the {name!r} cluster provider is not available in this installation "
                f"({module_name} is missing)"
            ) from exc
        raise InfraError(f"the {name!r} cluster provider cannot be loaded: {exc}") from exc
    provider_class = getattr(module, class_name, None)
    if provider_class is None:
        raise InfraError(f"the {name!r} cluster provider is not available ({target} not found)")
    provider: Provider = provider_class()
    return provider


def load_incluster_installer() -> Callable[[str | None, str], None] | None:
    """The in-cluster server installer, or None when this installation does not ship it."""
    module_name, _, func_name = INCLUSTER_INSTALLER.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if _is_missing(exc, module_name):
            return None
        raise
    installer: Callable[[str | None, str], None] | None = getattr(module, func_name, None)
    return installer


def context_name(provider: str, name: str) -> str:
    """The kubeconfig context mlbench writes for a cluster."""
    return f"mlbench-{provider}-{name}"


class ClusterConfigError(ValueError):
    """A cluster program's arguments are inconsistent (bad counts, zones, GPU spec, sizes)."""


def bench_pool_config(config: Any) -> dict[str, Any]:
    """The benchmark pool's arguments from a stack's ``pulumi.Config``: the keys every cloud's
    program reads, as ``PulumiProvider.stack_config`` writes them (documented in each Pulumi.yaml)."""
    return {
        "node_count": config.get_int("nodes") or 1,
        "min_nodes": config.get_int("minNodes"),
        "max_nodes": config.get_int("maxNodes"),
        "spot": config.get_bool("spot") or False,
        "disk_size_gb": config.get_int("diskSizeGb") or 100,
    }


class BenchPoolSize:
    """The size of a cluster program's benchmark pool, mixed into its argument dataclass.

    ``node_count`` nodes, or autoscaling between ``min_nodes`` and ``max_nodes`` when given
    (each defaults to a fixed-size pool); the GKE and EKS programs read and check it alike.
    """

    node_count: int
    min_nodes: int | None
    max_nodes: int | None

    @property
    def autoscaling_min(self) -> int:
        return self.node_count if self.min_nodes is None else self.min_nodes

    @property
    def autoscaling_max(self) -> int:
        return max(self.node_count, self.autoscaling_min) if self.max_nodes is None else self.max_nodes

    def check_pool_size(self) -> None:
        """Raise ``ClusterConfigError`` unless min <= node_count <= max and node_count >= 1."""
        if self.node_count < 1:
            raise ClusterConfigError(f"node_count must be at least 1 (got {self.node_count})")
        if self.autoscaling_min < 0:
            raise ClusterConfigError(f"min_nodes must be >= 0 (got {self.autoscaling_min})")
        if self.autoscaling_min > self.autoscaling_max:
            raise ClusterConfigError(
                f"min_nodes ({self.autoscaling_min}) is greater than max_nodes ({self.autoscaling_max})"
            )
        if not self.autoscaling_min <= self.node_count <= self.autoscaling_max:
            raise ClusterConfigError(
                f"node_count {self.node_count} is outside {self.autoscaling_min}..{self.autoscaling_max}"
            )
