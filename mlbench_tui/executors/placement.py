"""Where benchmark pods may run: the node labels, GPU taint and tolerations that the cluster
programs (``infra/components``, ``infra.kind``, ``infra.device_plugin``) put on nodes and the
Kubernetes manifests select and tolerate.

Benchmark nodes carry ``BENCH_POOL_LABEL``; GPU benchmark nodes also carry ``GPU_LABEL`` and the
``GPU_TAINT``, so only pods with ``GPU_TOLERATIONS`` land there (the ``nvidia.com/gpu``
toleration covers GKE's automatic GPU taint where the admission plugin does not add it).
"""

from __future__ import annotations

BENCH_POOL_LABEL: tuple[str, str] = ("mlbench.io/pool", "bench")
SYSTEM_POOL_LABEL: tuple[str, str] = ("mlbench.io/pool", "system")
GPU_LABEL: tuple[str, str] = ("mlbench.io/gpu", "true")
GPU_TAINT: dict[str, str] = {"key": "mlbench.io/gpu", "value": "true", "effect": "NoSchedule"}
GPU_TOLERATIONS: tuple[dict[str, str], ...] = (
    {"key": "mlbench.io/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"},
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
)
