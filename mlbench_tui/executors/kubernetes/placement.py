"""Where benchmark pods may run: the node labels, GPU taint and tolerations that the cluster
programs (``infra/mlbench_infra``, ``clusters.kind``, ``clusters.device_plugin``) put on nodes and the
Kubernetes manifests select and tolerate.

Benchmark nodes carry ``BENCH_POOL_LABEL``; GPU benchmark nodes also carry ``GPU_LABEL`` and the
``GPU_TAINT``, so only pods with ``GPU_TOLERATIONS`` land there (the ``nvidia.com/gpu``
toleration covers GKE's automatic GPU taint where the admission plugin does not add it), and
``GPU_MODEL_LABEL`` with their GPU model (``gpu_model_label``), which a run asking for a model
selects.
"""

from __future__ import annotations

from mlbench_tui.spec.gpus import canonical_gpu_model

BENCH_POOL_LABEL: tuple[str, str] = ("mlbench.io/pool", "bench")
SYSTEM_POOL_LABEL: tuple[str, str] = ("mlbench.io/pool", "system")
GPU_LABEL: tuple[str, str] = ("mlbench.io/gpu", "true")
GPU_MODEL_LABEL = "mlbench.io/gpu-model"
GPU_TAINT: dict[str, str] = {"key": "mlbench.io/gpu", "value": "true", "effect": "NoSchedule"}
GPU_TOLERATIONS: tuple[dict[str, str], ...] = (
    {"key": "mlbench.io/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"},
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
)


def gpu_model_label(model: str) -> str | None:
    """The ``GPU_MODEL_LABEL`` value of a catalog GPU model in any spelling (``H100``, ``a100_80gb``,
    ``nvidia-tesla-t4`` -> ``h100``, ``a100-80gb``, ``t4``); None for a model the catalog lacks."""
    canonical = canonical_gpu_model(model)
    return canonical.lower() if canonical is not None else None
