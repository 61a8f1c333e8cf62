"""spec.network on Kubernetes: the bandwidth CNI annotations, and the init containers' batch files,
which are applied here for real inside a namespace standing for a pod (its ``eth0`` a veth end)
and measured: both directions carry the configured rate."""

from __future__ import annotations

import ipaddress
import subprocess
from pathlib import Path

import pytest
from support.netns import needs_emulation, run_id, stream_rate

from mlbench_tui.executors.kubernetes.network import (
    IFB_CONTAINER,
    INIT_CONTAINER,
    bandwidth_quantity,
    config_files,
    ifb_batch,
    init_containers,
    method,
    pod_annotations,
    shaping_batch,
)
from mlbench_tui.executors.local.network import ledger, links
from mlbench_tui.executors.local.network.layout import group_ranks
from mlbench_tui.executors.shaping import Shaping
from mlbench_tui.plan import NetworkPlan

MBIT = 1_000_000
MOUNT = {"name": "config", "mountPath": "/etc/mlbench", "readOnly": True}


def test_the_cni_plugin_takes_the_rate_as_annotations() -> None:
    network = NetworkPlan(bandwidth_bps=100 * MBIT)
    assert pod_annotations(network) == {
        "kubernetes.io/ingress-bandwidth": "100M",
        "kubernetes.io/egress-bandwidth": "100M",
    }
    assert [bandwidth_quantity(b) for b in (1500 * 1000, 2_500_000_000, 10**10)] == ["1500k", "2500M", "10G"]
    assert init_containers(network, "img", "IfNotPresent", MOUNT, "/etc/mlbench") == []
    assert method(network) == "cni"
    assert pod_annotations(None) == {} and pod_annotations(NetworkPlan(bandwidth_bps=None)) == {}


def test_latency_and_the_tc_choice_get_least_privileged_init_containers() -> None:
    network = NetworkPlan(bandwidth_bps=10 * MBIT, latency_s=0.005, kubernetes_bandwidth="tc")
    assert pod_annotations(network) == {}
    assert method(network) == "tc"
    ifb, shaper = init_containers(network, "img:1", "IfNotPresent", MOUNT, "/etc/mlbench")
    assert (ifb["name"], ifb["command"]) == (IFB_CONTAINER, ["ip", "-batch", "/etc/mlbench/shaping.ip"])
    assert (shaper["name"], shaper["command"]) == (
        INIT_CONTAINER,
        ["tc", "-batch", "/etc/mlbench/shaping.tc"],
    )
    assert shaper["securityContext"] == {
        "runAsUser": 0,
        "runAsGroup": 0,
        "runAsNonRoot": False,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"], "add": ["NET_ADMIN"]},
    }
    assert shaping_batch(network) == (
        "qdisc add dev eth0 root handle 1: netem delay 5000us limit 1000\n"
        "qdisc add dev eth0 parent 1:1 handle 10: tbf rate 10000000bit burst 67050 limit 262144\n"
        "qdisc add dev ifb-mlbench root handle 1: tbf rate 10000000bit burst 67050 limit 262144\n"
        "qdisc add dev eth0 handle ffff: ingress\n"
        "filter add dev eth0 parent ffff: protocol all u32 match u32 0 0 "
        "action mirred egress redirect dev ifb-mlbench\n"
    )
    with_cni = NetworkPlan(bandwidth_bps=10 * MBIT, latency_s=0.005)
    assert method(with_cni) == "cni+tc"
    assert shaping_batch(with_cni) == "qdisc add dev eth0 root handle 1: netem delay 5000us limit 10000\n"
    assert ifb_batch(with_cni) is None
    assert set(config_files(with_cni)) == {"shaping.tc"}


@needs_emulation()
def test_the_init_containers_batch_files_shape_a_pods_interface_both_ways(tmp_path: Path) -> None:
    # two namespaces on a bridge, unshaped: one is the pod, the files make its eth0 what a pod's is
    reserved = ledger.reserve(
        tmp_path, run_id(), group_ranks(2, 1), Shaping(), Shaping(), ipaddress.IPv4Network("198.18.0.0/15")
    )
    layout = reserved.layout
    network = NetworkPlan(bandwidth_bps=40 * MBIT, kubernetes_bandwidth="tc")
    try:
        links.apply(layout)
        pod = layout.namespaces[1]
        for program, name in (("ip", "shaping.ip"), ("tc", "shaping.tc")):
            path = tmp_path / name
            path.write_text(config_files(network)[name])
            subprocess.run([program, "-n", pod, "-batch", str(path)], check=True, capture_output=True)
        ns = [str(links.NETNS_DIR / name) for name in layout.namespaces]
        address = [str(node.address) for node in layout.nodes]
        sent = stream_rate(ns[1], ns[0], address[0], megabytes=8)  # what the pod sends
        received = stream_rate(ns[0], ns[1], address[1], megabytes=8)  # what it receives, through the ifb
        for rate in (sent, received):
            assert 0.5 * 40 * MBIT / 8 <= rate <= 1.05 * 40 * MBIT / 8
    finally:
        links.remove(layout)
        ledger.release(tmp_path, layout.run_id)


@pytest.mark.parametrize("network", [None, NetworkPlan(bandwidth_bps=None, kubernetes_bandwidth="tc")])
def test_unshaped_networks_need_no_pod_changes(network: NetworkPlan | None) -> None:
    assert config_files(network) == {} and pod_annotations(network) == {} and method(network) is None
