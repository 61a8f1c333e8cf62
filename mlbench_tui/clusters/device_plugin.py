"""The NVIDIA device plugin DaemonSet for clusters whose GPU nodes do not run one (EKS).

GKE runs the device plugin itself on GPU node pools. EKS's NVIDIA AMIs ship the driver and the
container toolkit but not the plugin, and EKS has no first-party addon for it, so without it
nodes never advertise ``nvidia.com/gpu`` and GPU pods stay Pending. This is NVIDIA's upstream
static manifest (github.com/NVIDIA/k8s-device-plugin, ``deployments/static``), restricted to
mlbench's GPU nodes and tolerating their taint; it is applied with server-side apply.
"""

from __future__ import annotations

from typing import Any

from mlbench_tui.errors import ExecutorError, InfraError
from mlbench_tui.executors.kubernetes.client import apply_object, make_api_client
from mlbench_tui.executors.kubernetes.placement import GPU_LABEL, GPU_TOLERATIONS

IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
NAME = "nvidia-device-plugin-daemonset"
NAMESPACE = "kube-system"


def manifest(image: str = IMAGE) -> dict[str, Any]:
    """The DaemonSet (pure; what ``apply`` sends)."""
    labels = {"name": "nvidia-device-plugin-ds", "app.kubernetes.io/managed-by": "mlbench"}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "selector": {"matchLabels": {"name": "nvidia-device-plugin-ds"}},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": dict([GPU_LABEL]),
                    "tolerations": [dict(t) for t in GPU_TOLERATIONS],
                    "priorityClassName": "system-node-critical",
                    "containers": [
                        {
                            "name": "nvidia-device-plugin-ctr",
                            "image": image,
                            "env": [{"name": "FAIL_ON_INIT_ERROR", "value": "false"}],
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]},
                            },
                            "volumeMounts": [
                                {"name": "device-plugin", "mountPath": "/var/lib/kubelet/device-plugins"}
                            ],
                        }
                    ],
                    "volumes": [
                        {"name": "device-plugin", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}}
                    ],
                },
            },
        },
    }


def apply(context: str | None, *, api_client: Any | None = None, image: str = IMAGE) -> None:
    """Create or update the device plugin DaemonSet in the cluster of kubeconfig ``context``."""
    hint = "retry with `mlbench cluster init --device-plugin`"
    try:
        apply_object(api_client or make_api_client(context), manifest(image), force=True)
    except ExecutorError as exc:
        raise InfraError(f"could not apply the NVIDIA device plugin: {exc.message}", hint=hint) from None
