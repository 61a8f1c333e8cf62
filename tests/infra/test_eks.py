"""EksCluster under Pulumi's mocks: network, IAM, node groups, outputs and validation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from mlbench_infra.eks import ClusterConfigError, EksCluster, EksClusterArgs
from support.pulumi_mocks import RecordingMocks, run_program


def _build(args: EksClusterArgs) -> dict[str, Any]:
    cluster = EksCluster("t", args)
    return {
        "kubeconfig": cluster.kubeconfig,
        "cluster_name": cluster.cluster_name,
        "region": cluster.region,
        "zones": cluster.zones,
        "node_pool": cluster.node_pool,
    }


def test_gpu_cluster_resources_and_outputs(pulumi_mocks: RecordingMocks) -> None:
    args = EksClusterArgs(
        cluster_name="mlbench-test",
        region="us-east-1",
        instance_type="g4dn.12xlarge",
        gpu_count=4,
        gpu_model="T4",
        node_count=2,
        min_nodes=1,
        max_nodes=3,
        spot=True,
        disk_size_gb=150,
    )
    outputs = run_program(lambda: _build(args))

    assert pulumi_mocks.one("aws:ec2/vpc:Vpc").inputs["enableDnsHostnames"] is True
    routes = pulumi_mocks.one("aws:ec2/routeTable:RouteTable").inputs["routes"]
    assert routes == [{"cidrBlock": "0.0.0.0/0", "gatewayId": "t-igw-id"}]
    subnets = pulumi_mocks.of_type("aws:ec2/subnet:Subnet")
    assert sorted(s.inputs["availabilityZone"] for s in subnets) == ["us-east-1a", "us-east-1b"]
    assert {s.inputs["cidrBlock"] for s in subnets} == {"10.40.0.0/19", "10.40.32.0/19"}
    assert all(s.inputs["tags"]["kubernetes.io/cluster/mlbench-test"] == "shared" for s in subnets)
    assert len(pulumi_mocks.of_type("aws:ec2/routeTableAssociation:RouteTableAssociation")) == 2

    roles = {r.name: r.inputs for r in pulumi_mocks.of_type("aws:iam/role:Role")}
    assert '"eks.amazonaws.com"' in roles["t-cluster-role"]["assumeRolePolicy"]
    assert '"ec2.amazonaws.com"' in roles["t-node-role"]["assumeRolePolicy"]
    attachments = {
        (a.inputs["role"], a.inputs["policyArn"].rsplit("/", 1)[1])
        for a in pulumi_mocks.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
    }
    assert attachments == {
        ("t-cluster-role", "AmazonEKSClusterPolicy"),
        ("t-node-role", "AmazonEKSWorkerNodePolicy"),
        ("t-node-role", "AmazonEKS_CNI_Policy"),
        ("t-node-role", "AmazonEC2ContainerRegistryReadOnly"),
    }

    cluster = pulumi_mocks.one("aws:eks/cluster:Cluster").inputs
    assert cluster["name"] == "mlbench-test"
    assert cluster["roleArn"].endswith("role/t-cluster-role")
    assert len(cluster["vpcConfig"]["subnetIds"]) == 2

    groups = {
        g.inputs["nodeGroupName"]: g.inputs for g in pulumi_mocks.of_type("aws:eks/nodeGroup:NodeGroup")
    }
    assert set(groups) == {"system", "gpu"}
    assert groups["system"]["amiType"] == "AL2023_x86_64_STANDARD"
    assert "taints" not in groups["system"]
    gpu = groups["gpu"]
    assert gpu["amiType"] == "AL2023_x86_64_NVIDIA"
    assert gpu["instanceTypes"] == ["g4dn.12xlarge"]
    assert gpu["capacityType"] == "SPOT"
    assert gpu["diskSize"] == 150
    assert gpu["scalingConfig"] == {"desiredSize": 2, "minSize": 1, "maxSize": 3}
    assert gpu["labels"] == {
        "mlbench.io/pool": "bench",
        "mlbench.io/gpu": "true",
        "mlbench.io/gpu-model": "t4",
    }
    assert gpu["taints"] == [{"key": "mlbench.io/gpu", "value": "true", "effect": "NO_SCHEDULE"}]
    assert gpu["nodeRoleArn"].endswith("role/t-node-role")

    assert outputs["cluster_name"] == "mlbench-test"
    assert outputs["region"] == "us-east-1"
    assert outputs["zones"] == ["us-east-1a", "us-east-1b"]
    assert outputs["node_pool"]["gpu_count"] == 4
    assert outputs["node_pool"]["spot"] is True
    assert outputs["__secret__"]["kubeconfig"] is True
    kubeconfig = outputs["kubeconfig"]
    assert "server: https://ABCDEF.gr7.us-east-1.eks.amazonaws.com" in kubeconfig
    assert "certificate-authority-data: RUtTLUNBLURBVEE=" in kubeconfig
    assert "get-token, --cluster-name, mlbench-test" in kubeconfig


def test_gpu_zone_pins_the_gpu_group_and_on_demand(pulumi_mocks: RecordingMocks) -> None:
    args = EksClusterArgs(
        cluster_name="pinned",
        region="us-west-2",
        availability_zones=["us-west-2a", "us-west-2b", "us-west-2c"],
        gpu_zone="us-west-2c",
    )
    run_program(lambda: _build(args))
    subnets = {s.name: s.inputs["availabilityZone"] for s in pulumi_mocks.of_type("aws:ec2/subnet:Subnet")}
    assert subnets == {"t-public-0": "us-west-2c", "t-public-1": "us-west-2a"}
    gpu = pulumi_mocks.one("aws:eks/nodeGroup:NodeGroup", "-gpu").inputs
    assert gpu["subnetIds"] == ["t-public-0-id"]
    assert gpu["capacityType"] == "ON_DEMAND"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"node_count": 0}, "node_count must be at least 1"),
        ({"min_nodes": 4, "max_nodes": 2}, "greater than max_nodes"),
        ({"gpu_count": 17}, "gpu_count must be 0..16"),
        ({"ami_type": "AL2023_x86_64_STANDARD"}, "has no GPU drivers"),
        ({"availability_zones": ["us-east-1a"]}, "two availability zones"),
        ({"gpu_zone": "eu-west-1a"}, "not in region"),
    ],
)
def test_args_validation(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ClusterConfigError, match=message):
        EksClusterArgs(**{"cluster_name": "c", "region": "us-east-1", **overrides})


def test_stack_program_reads_config(pulumi_mocks: RecordingMocks) -> None:
    import pulumi
    from mlbench_infra.eks import program

    pulumi.runtime.set_all_config(
        {
            "mlbench-test:region": "eu-west-1",
            "mlbench-test:clusterName": "mlbench-cfg",
            "mlbench-test:nodes": "2",
            "mlbench-test:maxNodes": "5",
            "mlbench-test:instanceType": "g5.xlarge",
            "mlbench-test:gpuType": "A10G",
            "mlbench-test:availabilityZones": '["eu-west-1a", "eu-west-1b"]',
        }
    )
    try:
        run_program(lambda: _run_stack(program))
    finally:
        pulumi.runtime.set_all_config({})
    assert pulumi_mocks.one("aws:eks/cluster:Cluster").inputs["name"] == "mlbench-cfg"
    gpu = pulumi_mocks.one("aws:eks/nodeGroup:NodeGroup", "-gpu").inputs
    assert gpu["instanceTypes"] == ["g5.xlarge"]
    assert gpu["scalingConfig"] == {"desiredSize": 2, "minSize": 2, "maxSize": 5}
    zones = sorted(s.inputs["availabilityZone"] for s in pulumi_mocks.of_type("aws:ec2/subnet:Subnet"))
    assert zones == ["eu-west-1a", "eu-west-1b"]


def _run_stack(program: Callable[[], None]) -> dict[str, Any]:
    program()
    return {}
