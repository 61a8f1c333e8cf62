"""GkeCluster under Pulumi's mocks: the resources it creates and the properties users rely on."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from mlbench_infra.gke import ClusterConfigError, GkeCluster, GkeClusterArgs
from support.pulumi_mocks import RecordingMocks, run_program

from mlbench_tui.executors.kubernetes.placement import GPU_TOLERATIONS


def _build(args: GkeClusterArgs) -> dict[str, Any]:
    cluster = GkeCluster("t", args)
    return {
        "kubeconfig": cluster.kubeconfig,
        "cluster_name": cluster.cluster_name,
        "location": cluster.location,
        "node_pool": cluster.node_pool,
    }


def test_gpu_cluster_resources_and_outputs(pulumi_mocks: RecordingMocks) -> None:
    args = GkeClusterArgs(
        cluster_name="mlbench-test",
        project="proj-1",
        location="us-central1-a",
        machine_type="n1-standard-8",
        accelerator_type="nvidia-tesla-t4",
        accelerator_count=2,
        node_count=2,
        max_nodes=4,
        spot=True,
        disk_size_gb=200,
    )
    outputs = run_program(lambda: _build(args))

    assert len(pulumi_mocks.of_type("gcp:compute/network:Network")) == 1
    subnet = pulumi_mocks.one("gcp:compute/subnetwork:Subnetwork").inputs
    assert subnet["region"] == "us-central1"
    assert {r["rangeName"] for r in subnet["secondaryIpRanges"]} == {"pods", "services"}

    cluster = pulumi_mocks.one("gcp:container/cluster:Cluster").inputs
    assert cluster["name"] == "mlbench-test"
    assert cluster["location"] == "us-central1-a"
    assert cluster["removeDefaultNodePool"] is True
    assert cluster["deletionProtection"] is False
    assert cluster["workloadIdentityConfig"] == {"workloadPool": "proj-1.svc.id.goog"}

    pools = {r.inputs["name"]: r.inputs for r in pulumi_mocks.of_type("gcp:container/nodePool:NodePool")}
    assert set(pools) == {"system", "gpu"}
    system = pools["system"]["nodeConfig"]
    assert "guestAccelerators" not in system and "taints" not in system
    assert system["labels"] == {"mlbench.io/pool": "system"}

    gpu = pools["gpu"]
    assert gpu["initialNodeCount"] == 2 and "nodeCount" not in gpu
    assert gpu["autoscaling"] == {"minNodeCount": 2, "maxNodeCount": 4}
    config = gpu["nodeConfig"]
    assert config["machineType"] == "n1-standard-8"
    assert config["spot"] is True
    assert config["diskSizeGb"] == 200
    assert config["guestAccelerators"] == [
        {"type": "nvidia-tesla-t4", "count": 2, "gpuDriverInstallationConfig": {"gpuDriverVersion": "LATEST"}}
    ]
    # the model label that runs naming a GPU model select on (the manifests' nodeSelector)
    assert config["labels"] == {
        "mlbench.io/pool": "bench",
        "mlbench.io/gpu": "true",
        "mlbench.io/gpu-model": "t4",
    }
    assert config["taints"] == [{"key": "mlbench.io/gpu", "value": "true", "effect": "NO_SCHEDULE"}]
    assert config["workloadMetadataConfig"] == {"mode": "GKE_METADATA"}
    # The toleration the Kubernetes manifests use matches the taint.
    assert any(t["key"] == "mlbench.io/gpu" and t["value"] == "true" for t in GPU_TOLERATIONS)

    assert outputs["cluster_name"] == "mlbench-test"
    assert outputs["location"] == "us-central1-a"
    assert outputs["node_pool"]["accelerator_count"] == 2
    assert outputs["node_pool"]["max_nodes"] == 4
    kubeconfig = outputs["kubeconfig"]
    assert "server: https://203.0.113.10" in kubeconfig
    assert "command: gke-gcloud-auth-plugin" in kubeconfig
    assert "token" not in kubeconfig.lower().replace("get-token", "")


def test_kubeconfig_output_is_secret(pulumi_mocks: RecordingMocks) -> None:
    args = GkeClusterArgs(cluster_name="c", project="p", location="us-central1-a")
    outputs = run_program(lambda: _build(args))
    assert outputs["__secret__"]["kubeconfig"] is True
    assert outputs["__secret__"]["cluster_name"] is False


def test_cpu_pool_has_no_gpu_taint(pulumi_mocks: RecordingMocks) -> None:
    args = GkeClusterArgs(
        cluster_name="cpu",
        project="p",
        location="europe-west4",
        accelerator_type=None,
        accelerator_count=0,
        machine_type="n1-standard-8",
        node_locations=["europe-west4-a"],
    )
    run_program(lambda: _build(args))
    pools = {r.inputs["name"]: r.inputs for r in pulumi_mocks.of_type("gcp:container/nodePool:NodePool")}
    bench = pools["bench"]
    assert bench["nodeLocations"] == ["europe-west4-a"]
    assert bench["nodeCount"] == 1 and "autoscaling" not in bench  # fixed size: resizable in place
    assert "guestAccelerators" not in bench["nodeConfig"]
    assert "taints" not in bench["nodeConfig"]
    assert bench["nodeConfig"]["labels"] == {"mlbench.io/pool": "bench"}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"node_count": 0}, "node_count must be at least 1"),
        ({"min_nodes": 3, "max_nodes": 2}, "greater than max_nodes"),
        ({"node_count": 1, "min_nodes": 2, "max_nodes": 4}, "outside"),
        ({"accelerator_count": 0}, "accelerator_count must be 1..16"),
        ({"accelerator_type": "T4"}, "not a GKE accelerator type"),
        ({"accelerator_type": None, "accelerator_count": 1}, "needs an accelerator_type"),
        ({"gpu_driver_version": "NEWEST"}, "gpu_driver_version"),
        ({"disk_size_gb": 10}, "disk_size_gb"),
    ],
)
def test_args_validation(overrides: dict[str, Any], message: str) -> None:
    base: dict[str, Any] = {"cluster_name": "c", "project": "p", "location": "us-central1-a"}
    with pytest.raises(ClusterConfigError, match=message):
        GkeClusterArgs(**{**base, **overrides})


def test_stack_program_reads_config(pulumi_mocks: RecordingMocks) -> None:
    import pulumi
    from mlbench_infra.gke import program

    pulumi.runtime.set_all_config(
        {
            "mlbench-test:project": "proj-9",
            "mlbench-test:region": "us-central1",
            "mlbench-test:zone": "us-central1-b",
            "mlbench-test:clusterName": "mlbench-cfg",
            "mlbench-test:nodes": "3",
            "mlbench-test:gpuType": "nvidia-tesla-v100",
            "mlbench-test:gpuCount": "2",
            "mlbench-test:machineType": "n1-standard-16",
            "mlbench-test:spot": "true",
        }
    )
    try:
        run_program(lambda: _run_stack(program))
    finally:
        pulumi.runtime.set_all_config({})
    cluster = pulumi_mocks.one("gcp:container/cluster:Cluster").inputs
    assert (cluster["name"], cluster["location"], cluster["project"]) == (
        "mlbench-cfg",
        "us-central1",
        "proj-9",
    )
    gpu = pulumi_mocks.one("gcp:container/nodePool:NodePool", "-gpu").inputs
    assert gpu["nodeLocations"] == ["us-central1-b"]
    assert gpu["nodeCount"] == 3
    assert gpu["nodeConfig"]["spot"] is True
    assert gpu["nodeConfig"]["guestAccelerators"][0]["type"] == "nvidia-tesla-v100"
    assert gpu["nodeConfig"]["guestAccelerators"][0]["count"] == 2
    assert gpu["nodeConfig"]["labels"]["mlbench.io/gpu-model"] == "v100"


def _run_stack(program: Callable[[], None]) -> dict[str, Any]:
    program()
    return {}
