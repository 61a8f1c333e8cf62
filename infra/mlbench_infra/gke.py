"""GKE GPU cluster for benchmarks: VPC, cluster, a small system pool and a tainted GPU pool.

``GkeCluster`` is a Pulumi ComponentResource. The GPU pool gets GKE-managed NVIDIA drivers
(``gpuDriverInstallationConfig``), so no driver DaemonSet is needed, and GKE runs the NVIDIA
device plugin on GPU nodes itself. Benchmark nodes are labelled ``mlbench.io/pool=bench``; GPU
nodes also ``mlbench.io/gpu=true`` and ``mlbench.io/gpu-model=<model>`` (``t4``, ``h100``: runs
that name a model select on it) and carry the taint ``mlbench.io/gpu=true:NoSchedule``, so only
pods that tolerate it (mlbench's benchmark pods) land there. System pods run on the small
untainted ``system`` pool. Workload identity is on; nodes use the GKE metadata server.
``program()`` is the stack body shared by ``infra/gcp/__main__.py`` and ``mlbench cluster``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_gcp as gcp

from mlbench_tui.clusters.kubeconfig import exec_kubeconfig
from mlbench_tui.clusters.prices import accelerator_model
from mlbench_tui.clusters.providers import (
    BenchPoolSize,
    ClusterConfigError,
    bench_pool_config,
)
from mlbench_tui.executors.kubernetes.placement import (
    BENCH_POOL_LABEL,
    GPU_LABEL,
    GPU_MODEL_LABEL,
    GPU_TAINT,
    SYSTEM_POOL_LABEL,
    gpu_model_label,
)

CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
GPU_DRIVER_VERSIONS = ("DEFAULT", "LATEST", "INSTALLATION_DISABLED")


@dataclass(frozen=True)
class GkeClusterArgs(BenchPoolSize):
    """Everything the GKE cluster needs; validated on construction.

    ``location`` is a zone (zonal cluster) or a region (regional cluster; node counts then apply
    per zone in ``node_locations`` or in each of the region's default zones).
    """

    cluster_name: str
    project: str
    location: str
    machine_type: str = "n1-standard-4"
    accelerator_type: str | None = "nvidia-tesla-t4"
    accelerator_count: int = 1
    node_count: int = 1
    min_nodes: int | None = None
    max_nodes: int | None = None
    spot: bool = False
    disk_size_gb: int = 100
    disk_type: str = "pd-balanced"
    node_locations: list[str] | None = None
    system_machine_type: str = "e2-standard-2"
    system_node_count: int = 1
    gpu_driver_version: str = "LATEST"
    release_channel: str = "REGULAR"
    subnet_cidr: str = "10.20.0.0/20"
    pods_cidr: str = "10.24.0.0/14"
    services_cidr: str = "10.28.0.0/20"
    resource_labels: dict[str, str] = field(default_factory=lambda: {"managed-by": "mlbench"})

    def __post_init__(self) -> None:
        if not self.cluster_name or not self.project or not self.location:
            raise ClusterConfigError("cluster_name, project and location are required")
        self.check_pool_size()
        if self.accelerator_type is None and self.accelerator_count != 0:
            raise ClusterConfigError("accelerator_count needs an accelerator_type")
        if self.accelerator_type is not None and not 1 <= self.accelerator_count <= 16:
            raise ClusterConfigError(f"accelerator_count must be 1..16 (got {self.accelerator_count})")
        if self.accelerator_type is not None and not self.accelerator_type.startswith("nvidia-"):
            raise ClusterConfigError(
                f"{self.accelerator_type!r} is not a GKE accelerator type (e.g. nvidia-tesla-t4)"
            )
        if self.gpu_driver_version not in GPU_DRIVER_VERSIONS:
            raise ClusterConfigError(f"gpu_driver_version must be one of {', '.join(GPU_DRIVER_VERSIONS)}")
        if self.disk_size_gb < 20:
            raise ClusterConfigError(f"disk_size_gb must be at least 20 (got {self.disk_size_gb})")
        if self.system_node_count < 1:
            raise ClusterConfigError("system_node_count must be at least 1")

    @property
    def region(self) -> str:
        """The region of ``location`` (a zone 'us-central1-a' lies in region 'us-central1')."""
        parts = self.location.split("-")
        return "-".join(parts[:2]) if len(parts) > 2 else self.location

    @property
    def gpu_model_label(self) -> str | None:
        """The pool's ``mlbench.io/gpu-model`` label value (``nvidia-h100-80gb`` -> ``h100``)."""
        if self.accelerator_type is None:
            return None
        model = accelerator_model(self.accelerator_type)
        return gpu_model_label(model) if model is not None else None

    def node_pool_details(self) -> dict[str, Any]:
        """What the GPU pool is, as exported by the stack and recorded by ``mlbench cluster``."""
        return {
            "name": "gpu" if self.accelerator_type else "bench",
            "machine_type": self.machine_type,
            "accelerator_type": self.accelerator_type,
            "gpu_model": self.gpu_model_label,
            "accelerator_count": self.accelerator_count if self.accelerator_type else 0,
            "node_count": self.node_count,
            "min_nodes": self.autoscaling_min,
            "max_nodes": self.autoscaling_max,
            "spot": self.spot,
            "disk_size_gb": self.disk_size_gb,
            "node_locations": self.node_locations,
        }


def _sizing(args: GkeClusterArgs) -> dict[str, Any]:
    """Pool size arguments: a fixed ``node_count`` (resizable in place), or autoscaling bounds.

    With autoscaling, GKE owns the node count; ``initial_node_count`` only seeds it.
    """
    if args.autoscaling_min == args.autoscaling_max == args.node_count:
        return {"node_count": args.node_count}
    return {
        "initial_node_count": args.node_count,
        "autoscaling": gcp.container.NodePoolAutoscalingArgs(
            min_node_count=args.autoscaling_min, max_node_count=args.autoscaling_max
        ),
    }


def _kubeconfig(name: str, endpoint: str, ca_data: str) -> str:
    """A kubeconfig that authenticates through gke-gcloud-auth-plugin (no static credentials)."""
    return exec_kubeconfig(
        name,
        f"https://{endpoint}",
        ca_data,
        command="gke-gcloud-auth-plugin",
        install_hint="Install gke-gcloud-auth-plugin with "
        "'gcloud components install gke-gcloud-auth-plugin'.",
        provide_cluster_info=True,
    )


class GkeCluster(pulumi.ComponentResource):
    """A GKE cluster with a system pool and a GPU benchmark pool; see the module docstring."""

    kubeconfig: pulumi.Output[str]
    cluster_name: pulumi.Output[str]
    location: pulumi.Output[str]
    node_pool: pulumi.Output[dict[str, Any]]

    def __init__(self, name: str, args: GkeClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("mlbench:infra:GkeCluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.network = gcp.compute.Network(
            f"{name}-net",
            project=args.project,
            auto_create_subnetworks=False,
            description=f"mlbench cluster {args.cluster_name}",
            opts=child,
        )
        self.subnet = gcp.compute.Subnetwork(
            f"{name}-subnet",
            project=args.project,
            region=args.region,
            network=self.network.id,
            ip_cidr_range=args.subnet_cidr,
            private_ip_google_access=True,
            secondary_ip_ranges=[
                gcp.compute.SubnetworkSecondaryIpRangeArgs(range_name="pods", ip_cidr_range=args.pods_cidr),
                gcp.compute.SubnetworkSecondaryIpRangeArgs(
                    range_name="services", ip_cidr_range=args.services_cidr
                ),
            ],
            opts=child,
        )
        self.cluster = gcp.container.Cluster(
            f"{name}-cluster",
            name=args.cluster_name,
            project=args.project,
            location=args.location,
            network=self.network.id,
            subnetwork=self.subnet.id,
            # Pools are managed below; GKE needs one initial node it then deletes.
            remove_default_node_pool=True,
            initial_node_count=1,
            deletion_protection=False,
            networking_mode="VPC_NATIVE",
            ip_allocation_policy=gcp.container.ClusterIpAllocationPolicyArgs(
                cluster_secondary_range_name="pods",
                services_secondary_range_name="services",
            ),
            workload_identity_config=gcp.container.ClusterWorkloadIdentityConfigArgs(
                workload_pool=f"{args.project}.svc.id.goog",
            ),
            release_channel=gcp.container.ClusterReleaseChannelArgs(channel=args.release_channel),
            resource_labels=args.resource_labels,
            opts=child,
        )
        pool_opts = pulumi.ResourceOptions(parent=self, depends_on=[self.cluster])
        self.system_pool = gcp.container.NodePool(
            f"{name}-system",
            name="system",
            project=args.project,
            location=args.location,
            cluster=self.cluster.name,
            node_count=args.system_node_count,
            node_locations=args.node_locations,
            management=gcp.container.NodePoolManagementArgs(auto_repair=True, auto_upgrade=True),
            node_config=gcp.container.NodePoolNodeConfigArgs(
                machine_type=args.system_machine_type,
                disk_size_gb=50,
                oauth_scopes=[CLOUD_PLATFORM_SCOPE],
                labels=dict([SYSTEM_POOL_LABEL]),
                resource_labels=args.resource_labels,
                workload_metadata_config=gcp.container.NodePoolNodeConfigWorkloadMetadataConfigArgs(
                    mode="GKE_METADATA"
                ),
            ),
            opts=pool_opts,
        )
        labels = dict([BENCH_POOL_LABEL])
        taints: list[gcp.container.NodePoolNodeConfigTaintArgs] = []
        accelerators: list[gcp.container.NodePoolNodeConfigGuestAcceleratorArgs] = []
        if args.accelerator_type is not None:
            labels.update([GPU_LABEL])
            if args.gpu_model_label is not None:  # runs that name a GPU model select on it
                labels[GPU_MODEL_LABEL] = args.gpu_model_label
            taints.append(
                gcp.container.NodePoolNodeConfigTaintArgs(
                    key=GPU_TAINT["key"], value=GPU_TAINT["value"], effect="NO_SCHEDULE"
                )
            )
            accelerators.append(
                gcp.container.NodePoolNodeConfigGuestAcceleratorArgs(
                    type=args.accelerator_type,
                    count=args.accelerator_count,
                    gpu_driver_installation_config=(
                        gcp.container.NodePoolNodeConfigGuestAcceleratorGpuDriverInstallationConfigArgs(
                            gpu_driver_version=args.gpu_driver_version
                        )
                    ),
                )
            )
        details = args.node_pool_details()
        self.gpu_pool = gcp.container.NodePool(
            f"{name}-{details['name']}",
            name=details["name"],
            project=args.project,
            location=args.location,
            cluster=self.cluster.name,
            node_locations=args.node_locations,
            **_sizing(args),
            management=gcp.container.NodePoolManagementArgs(auto_repair=True, auto_upgrade=True),
            node_config=gcp.container.NodePoolNodeConfigArgs(
                machine_type=args.machine_type,
                guest_accelerators=accelerators or None,
                spot=args.spot,
                disk_size_gb=args.disk_size_gb,
                disk_type=args.disk_type,
                image_type="COS_CONTAINERD",
                oauth_scopes=[CLOUD_PLATFORM_SCOPE],
                labels=labels,
                taints=taints or None,
                resource_labels=args.resource_labels,
                workload_metadata_config=gcp.container.NodePoolNodeConfigWorkloadMetadataConfigArgs(
                    mode="GKE_METADATA"
                ),
            ),
            opts=pool_opts,
        )
        context = f"gke_{args.project}_{args.location}_{args.cluster_name}"
        self.kubeconfig = pulumi.Output.secret(
            pulumi.Output.all(self.cluster.endpoint, self.cluster.master_auth.cluster_ca_certificate).apply(
                lambda parts: _kubeconfig(context, str(parts[0]), str(parts[1]))
            )
        )
        self.cluster_name = self.cluster.name
        self.location = self.cluster.location
        # The pool exists once its resource does: tie the details to it so they resolve after it.
        self.node_pool = self.gpu_pool.name.apply(lambda pool_name: {**details, "name": pool_name})
        self.register_outputs(
            {
                "kubeconfig": self.kubeconfig,
                "cluster_name": self.cluster_name,
                "location": self.location,
                "node_pool": self.node_pool,
            }
        )


def args_from_config(config: pulumi.Config, project: str | None = None) -> GkeClusterArgs:
    """Build ``GkeClusterArgs`` from stack config (keys documented in infra/gcp/Pulumi.yaml)."""
    project = config.get("project") or project or gcp.config.project
    zone = config.get("zone") or gcp.config.zone
    region = config.get("region") or gcp.config.region
    location = zone if zone and not region else (region or zone)
    node_locations = [zone] if zone and region else None
    accelerator = config.get("gpuType")
    return GkeClusterArgs(
        cluster_name=config.get("clusterName") or pulumi.get_stack(),
        project=project or "",
        location=location or "",
        node_locations=node_locations,
        machine_type=config.get("machineType") or "n1-standard-4",
        accelerator_type=None if accelerator in (None, "", "none") else accelerator,
        accelerator_count=config.get_int("gpuCount") or (0 if accelerator in (None, "", "none") else 1),
        **bench_pool_config(config),
        gpu_driver_version=config.get("gpuDriverVersion") or "LATEST",
    )


def program() -> None:
    """The stack body: read config, create the cluster, export its outputs."""
    args = args_from_config(pulumi.Config())
    cluster = GkeCluster("mlbench", args)
    pulumi.export("kubeconfig", cluster.kubeconfig)
    pulumi.export("cluster_name", cluster.cluster_name)
    pulumi.export("location", cluster.location)
    pulumi.export("region", args.region)
    pulumi.export("project", args.project)
    pulumi.export("node_pool", cluster.node_pool)
