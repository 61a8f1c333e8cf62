"""EKS GPU cluster for benchmarks: VPC across two zones, IAM roles, a system and a GPU node group.

``EksCluster`` is a Pulumi ComponentResource built from pulumi-aws only. The GPU node group runs
the EKS-optimized NVIDIA AMI (``AL2023_x86_64_NVIDIA``: driver and container toolkit
preinstalled). That AMI does not run the NVIDIA device plugin, and EKS has no first-party addon
for it, so ``mlbench cluster create aws`` applies the upstream plugin DaemonSet
(``mlbench_tui.clusters.device_plugin``) right after ``pulumi up`` (what eksctl does too); when the
stack is run with the pulumi CLI directly, run ``mlbench cluster init --device-plugin`` once.
Benchmark nodes are labelled ``mlbench.io/pool=bench``; GPU nodes also ``mlbench.io/gpu=true`` and
``mlbench.io/gpu-model=<model>`` (``t4``, ``h100``: runs that name a model select on it), with the
taint ``mlbench.io/gpu=true:NoSchedule``. Subnets are public (no NAT gateway to pay
for); nodes accept traffic only from the cluster security group.
"""

from __future__ import annotations

import functools
import ipaddress
import json
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_aws as aws

from mlbench_tui.clusters.kubeconfig import exec_kubeconfig
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

CLUSTER_POLICIES = ("AmazonEKSClusterPolicy",)
NODE_POLICIES = ("AmazonEKSWorkerNodePolicy", "AmazonEKS_CNI_Policy", "AmazonEC2ContainerRegistryReadOnly")
GPU_AMI_TYPES = ("AL2023_x86_64_NVIDIA", "AL2_x86_64_GPU", "BOTTLEROCKET_x86_64_NVIDIA")
CPU_AMI_TYPE = "AL2023_x86_64_STANDARD"


@dataclass(frozen=True)
class EksClusterArgs(BenchPoolSize):
    """Everything the EKS cluster needs; validated on construction.

    ``gpu_count`` is the number of GPUs the instance type has (0: a CPU benchmark pool); it
    selects the AMI type, the labels and the taint. ``availability_zones`` defaults to the first
    two available zones of the region; ``gpu_zone`` pins the GPU node group to one of them.
    """

    cluster_name: str
    region: str
    instance_type: str = "g4dn.xlarge"
    gpu_count: int = 1
    gpu_model: str | None = "T4"
    node_count: int = 1
    min_nodes: int | None = None
    max_nodes: int | None = None
    spot: bool = False
    disk_size_gb: int = 100
    ami_type: str | None = None
    availability_zones: list[str] | None = None
    gpu_zone: str | None = None
    system_instance_type: str = "t3.large"
    system_node_count: int = 1
    kubernetes_version: str | None = None
    vpc_cidr: str = "10.40.0.0/16"
    tags: dict[str, str] = field(default_factory=lambda: {"managed-by": "mlbench"})

    def __post_init__(self) -> None:
        if not self.cluster_name or not self.region:
            raise ClusterConfigError("cluster_name and region are required")
        self.check_pool_size()
        if not 0 <= self.gpu_count <= 16:
            raise ClusterConfigError(f"gpu_count must be 0..16 (got {self.gpu_count})")
        if self.ami_type is not None and self.gpu_count and self.ami_type not in GPU_AMI_TYPES:
            raise ClusterConfigError(
                f"ami_type {self.ami_type} has no GPU drivers; use one of {GPU_AMI_TYPES}"
            )
        if self.availability_zones is not None and len(set(self.availability_zones)) < 2:
            raise ClusterConfigError("EKS needs subnets in at least two availability zones")
        zones = self.availability_zones or []
        if self.gpu_zone is not None and zones and self.gpu_zone not in zones:
            raise ClusterConfigError(f"gpu_zone {self.gpu_zone} is not one of {zones}")
        if self.gpu_zone is not None and not self.gpu_zone.startswith(self.region):
            raise ClusterConfigError(f"gpu_zone {self.gpu_zone} is not in region {self.region}")
        if self.disk_size_gb < 20:
            raise ClusterConfigError(f"disk_size_gb must be at least 20 (got {self.disk_size_gb})")
        ipaddress.ip_network(self.vpc_cidr)

    @property
    def resolved_ami_type(self) -> str:
        return self.ami_type or (GPU_AMI_TYPES[0] if self.gpu_count else CPU_AMI_TYPE)

    def subnet_cidrs(self, count: int) -> list[str]:
        """One /19 per zone carved out of the VPC range."""
        subnets = ipaddress.ip_network(self.vpc_cidr).subnets(new_prefix=19)
        return [str(next(subnets)) for _ in range(count)]

    def node_pool_details(self) -> dict[str, Any]:
        """What the benchmark node group is, as exported by the stack and recorded by mlbench."""
        return {
            "name": "gpu" if self.gpu_count else "bench",
            "instance_type": self.instance_type,
            "gpu_model": self.gpu_model if self.gpu_count else None,
            "gpu_count": self.gpu_count,
            "ami_type": self.resolved_ami_type,
            "node_count": self.node_count,
            "min_nodes": self.autoscaling_min,
            "max_nodes": self.autoscaling_max,
            "spot": self.spot,
            "disk_size_gb": self.disk_size_gb,
            "zone": self.gpu_zone,
        }


def _assume_role_policy(service: str) -> str:
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}],
        }
    )


def _service_role(
    prefix: str,
    service: str,
    policies: tuple[str, ...],
    tags: dict[str, str],
    opts: pulumi.ResourceOptions,
) -> tuple[aws.iam.Role, list[aws.iam.RolePolicyAttachment]]:
    """An IAM role ``service`` may assume (``<prefix>-role``) with AWS-managed ``policies`` attached."""
    role = aws.iam.Role(
        f"{prefix}-role", assume_role_policy=_assume_role_policy(service), tags=tags, opts=opts
    )
    attachments = [
        aws.iam.RolePolicyAttachment(
            f"{prefix}-{policy}", role=role.name, policy_arn=f"arn:aws:iam::aws:policy/{policy}", opts=opts
        )
        for policy in policies
    ]
    return role, attachments


def _kubeconfig(name: str, region: str, endpoint: str, ca_data: str) -> str:
    """A kubeconfig that authenticates through ``aws eks get-token`` (no static credentials)."""
    return exec_kubeconfig(
        name,
        endpoint,
        ca_data,
        command="aws",
        args=("--region", region, "eks", "get-token", "--cluster-name", name, "--output", "json"),
        install_hint="Install the AWS CLI v2 "
        "(https://docs.aws.amazon.com/cli/latest/userguide/getting-started-install.html).",
    )


class EksCluster(pulumi.ComponentResource):
    """An EKS cluster with a system node group and a GPU benchmark node group."""

    kubeconfig: pulumi.Output[str]
    cluster_name: pulumi.Output[str]
    region: pulumi.Output[str]
    zones: pulumi.Output[list[str]]
    node_pool: pulumi.Output[dict[str, Any]]

    def __init__(self, name: str, args: EksClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("mlbench:infra:EksCluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = {**args.tags, "mlbench.io/cluster": args.cluster_name}
        if args.availability_zones is not None:
            zones: pulumi.Output[list[str]] = pulumi.Output.from_input(
                _pick_zones(args.availability_zones, args.gpu_zone)
            )
        else:
            available = aws.get_availability_zones_output(
                state="available",
                filters=[
                    aws.GetAvailabilityZonesFilterArgs(name="opt-in-status", values=["opt-in-not-required"])
                ],
                opts=pulumi.InvokeOptions(parent=self),
            )
            zones = available.names.apply(lambda names: _pick_zones(names, args.gpu_zone))

        self.vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=args.vpc_cidr,
            enable_dns_hostnames=True,
            enable_dns_support=True,
            tags={**tags, "Name": f"{args.cluster_name}-vpc"},
            opts=child,
        )
        self.internet_gateway = aws.ec2.InternetGateway(
            f"{name}-igw", vpc_id=self.vpc.id, tags=tags, opts=child
        )
        self.route_table = aws.ec2.RouteTable(
            f"{name}-public",
            vpc_id=self.vpc.id,
            routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", gateway_id=self.internet_gateway.id)],
            tags=tags,
            opts=child,
        )
        self.subnets: list[aws.ec2.Subnet] = []
        for index, cidr in enumerate(args.subnet_cidrs(2)):
            zone = zones.apply(functools.partial(_nth, index))
            subnet = aws.ec2.Subnet(
                f"{name}-public-{index}",
                vpc_id=self.vpc.id,
                cidr_block=cidr,
                availability_zone=zone,
                map_public_ip_on_launch=True,
                tags={
                    **tags,
                    "Name": f"{args.cluster_name}-public-{index}",
                    "kubernetes.io/role/elb": "1",
                    f"kubernetes.io/cluster/{args.cluster_name}": "shared",
                },
                opts=child,
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-public-{index}", subnet_id=subnet.id, route_table_id=self.route_table.id, opts=child
            )
            self.subnets.append(subnet)

        self.cluster_role, self.cluster_policies = _service_role(
            f"{name}-cluster", "eks.amazonaws.com", CLUSTER_POLICIES, tags, child
        )
        self.node_role, self.node_policies = _service_role(
            f"{name}-node", "ec2.amazonaws.com", NODE_POLICIES, tags, child
        )

        subnet_ids = [subnet.id for subnet in self.subnets]
        self.cluster = aws.eks.Cluster(
            f"{name}-cluster",
            name=args.cluster_name,
            role_arn=self.cluster_role.arn,
            version=args.kubernetes_version,
            vpc_config=aws.eks.ClusterVpcConfigArgs(
                subnet_ids=subnet_ids, endpoint_public_access=True, endpoint_private_access=True
            ),
            access_config=aws.eks.ClusterAccessConfigArgs(
                authentication_mode="API_AND_CONFIG_MAP", bootstrap_cluster_creator_admin_permissions=True
            ),
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=self.cluster_policies),
        )
        group_opts = pulumi.ResourceOptions(parent=self, depends_on=self.node_policies)
        self.system_group = aws.eks.NodeGroup(
            f"{name}-system",
            cluster_name=self.cluster.name,
            node_group_name="system",
            node_role_arn=self.node_role.arn,
            subnet_ids=subnet_ids,
            ami_type=CPU_AMI_TYPE,
            instance_types=[args.system_instance_type],
            capacity_type="ON_DEMAND",
            disk_size=50,
            scaling_config=aws.eks.NodeGroupScalingConfigArgs(
                desired_size=args.system_node_count,
                min_size=args.system_node_count,
                max_size=args.system_node_count,
            ),
            labels=dict([SYSTEM_POOL_LABEL]),
            tags=tags,
            opts=group_opts,
        )
        labels = dict([BENCH_POOL_LABEL])
        taints: list[aws.eks.NodeGroupTaintArgs] = []
        if args.gpu_count:
            labels.update([GPU_LABEL])
            model = gpu_model_label(args.gpu_model) if args.gpu_model else None
            if model is not None:  # runs that name a GPU model select on it
                labels[GPU_MODEL_LABEL] = model
            taints.append(
                aws.eks.NodeGroupTaintArgs(
                    key=GPU_TAINT["key"], value=GPU_TAINT["value"], effect="NO_SCHEDULE"
                )
            )
        # _pick_zones puts gpu_zone first, so subnet 0 is in that zone.
        gpu_subnets = subnet_ids[:1] if args.gpu_zone is not None else subnet_ids
        details = args.node_pool_details()
        self.gpu_group = aws.eks.NodeGroup(
            f"{name}-{details['name']}",
            cluster_name=self.cluster.name,
            node_group_name=details["name"],
            node_role_arn=self.node_role.arn,
            subnet_ids=gpu_subnets,
            ami_type=args.resolved_ami_type,
            instance_types=[args.instance_type],
            capacity_type="SPOT" if args.spot else "ON_DEMAND",
            disk_size=args.disk_size_gb,
            scaling_config=aws.eks.NodeGroupScalingConfigArgs(
                desired_size=args.node_count, min_size=args.autoscaling_min, max_size=args.autoscaling_max
            ),
            labels=labels,
            taints=taints or None,
            tags=tags,
            opts=group_opts,
        )
        self.kubeconfig = pulumi.Output.secret(
            pulumi.Output.all(
                self.cluster.name, self.cluster.endpoint, self.cluster.certificate_authority
            ).apply(lambda parts: _kubeconfig(str(parts[0]), args.region, str(parts[1]), _ca_data(parts[2])))
        )
        self.cluster_name = self.cluster.name
        self.region = pulumi.Output.from_input(args.region)
        self.zones = zones
        self.node_pool = self.gpu_group.node_group_name.apply(lambda group: {**details, "name": group})
        self.register_outputs(
            {
                "kubeconfig": self.kubeconfig,
                "cluster_name": self.cluster_name,
                "region": self.region,
                "zones": self.zones,
                "node_pool": self.node_pool,
            }
        )


def _nth(index: int, names: list[str]) -> str:
    return names[index]


def _pick_zones(names: list[str], first: str | None) -> list[str]:
    """Two zones for the subnets, ``first`` (the GPU zone) leading when given."""
    ordered = ([first] if first else []) + [name for name in names if name != first]
    if len(ordered) < 2:
        raise ClusterConfigError(f"EKS needs two availability zones, found {ordered}")
    return ordered[:2]


def _ca_data(authority: Any) -> str:
    """The CA bundle from the cluster's ``certificate_authority`` output (object or dict)."""
    if isinstance(authority, dict):
        return str(authority.get("data", ""))
    return str(getattr(authority, "data", "") or "")


def args_from_config(config: pulumi.Config) -> EksClusterArgs:
    """Build ``EksClusterArgs`` from stack config (keys documented in infra/aws/Pulumi.yaml)."""
    region = config.get("region") or aws.config.region or ""
    zones = config.get_object("availabilityZones")
    gpu_count = config.get_int("gpuCount")
    return EksClusterArgs(
        cluster_name=config.get("clusterName") or pulumi.get_stack(),
        region=region,
        instance_type=config.get("instanceType") or "g4dn.xlarge",
        gpu_count=1 if gpu_count is None else gpu_count,
        gpu_model=config.get("gpuType") or "T4",
        **bench_pool_config(config),
        ami_type=config.get("amiType"),
        availability_zones=list(zones) if isinstance(zones, list) else None,
        gpu_zone=config.get("zone"),
        kubernetes_version=config.get("kubernetesVersion"),
    )


def program() -> None:
    """The stack body: read config, create the cluster, export its outputs."""
    args = args_from_config(pulumi.Config())
    cluster = EksCluster("mlbench", args)
    pulumi.export("kubeconfig", cluster.kubeconfig)
    pulumi.export("cluster_name", cluster.cluster_name)
    pulumi.export("region", cluster.region)
    pulumi.export("zones", cluster.zones)
    pulumi.export("node_pool", cluster.node_pool)
