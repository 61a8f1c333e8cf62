"""The emulated network's plan (pure): names from the run id, addresses from the range, the exact
ip/tc commands, and the tc shaping the Kubernetes init container runs too."""

from __future__ import annotations

import ipaddress

import pytest

from mlbench_tui.executors.local.network.layout import (
    block_prefix,
    candidate_blocks,
    digest,
    group_ranks,
    plan_layout,
)
from mlbench_tui.executors.shaping import Shaping, expected_kinds, qdisc_commands

SUBNET = ipaddress.IPv4Network("198.18.0.8/29")


def _layout(egress: Shaping = Shaping(100_000_000), ingress: Shaping = Shaping(100_000_000)):
    return plan_layout("r-0123456789ab", ((0,), (1,)), SUBNET, egress, ingress)


def test_names_derive_from_the_run_id_and_fit_interface_names() -> None:
    layout = _layout()
    short = digest("r-0123456789ab")
    assert layout.bridge == f"mb{short}br"
    assert layout.namespaces == ("mlbench-r-0123456789ab-n0", "mlbench-r-0123456789ab-n1")
    assert layout.host_interfaces == (f"mb{short}n0", f"mb{short}n1")
    big = plan_layout(
        "r-0123456789ab", group_ranks(4096, 1), ipaddress.IPv4Network("198.18.0.0/15"), Shaping(), Shaping()
    )
    assert max(len(name) for name in (*big.host_interfaces, big.bridge)) <= 15  # IFNAMSIZ - 1


def test_addresses_host_first_then_nodes() -> None:
    layout = _layout()
    assert str(layout.host_address) == "198.18.0.9"
    assert [str(node.address) for node in layout.nodes] == ["198.18.0.10", "198.18.0.11"]
    assert layout.node_of_rank(1).index == 1


def test_setup_commands_shape_each_end_before_it_comes_up() -> None:
    layout = _layout(Shaping(100_000_000, 0.005), Shaping(100_000_000))
    argvs = [" ".join(step.argv()) for step in layout.setup_steps()]
    short = digest("r-0123456789ab")
    ns0 = "mlbench-r-0123456789ab-n0"
    assert argvs[:4] == [
        f"ip netns add {ns0}",
        "ip netns add mlbench-r-0123456789ab-n1",
        f"ip link add mb{short}br type bridge",
        f"ip link set dev mb{short}br addrgenmode none",
    ]
    assert f"ip link add mb{short}n0 type veth peer name eth0 netns {ns0}" in argvs
    assert (
        f"tc qdisc add dev mb{short}n0 root handle 1: tbf rate 100000000bit burst 67050 limit 1250000"
        in argvs
    )
    assert f"tc -n {ns0} qdisc add dev eth0 root handle 1: netem delay 5000us limit 1000" in argvs
    assert (
        f"tc -n {ns0} qdisc add dev eth0 parent 1:1 handle 10: "
        "tbf rate 100000000bit burst 67050 limit 1312501" in argvs
    )
    # each end is shaped before anything can cross it: the bridge's ends come up last
    up = argvs.index(f"ip link set dev mb{short}n0 up")
    assert up > max(i for i, a in enumerate(argvs) if a.startswith("tc "))
    assert argvs[-3:] == [
        f"ip link set dev mb{short}br up",
        f"ip link set dev mb{short}n0 up",
        f"ip link set dev mb{short}n1 up",
    ]


def test_teardown_names_only_the_runs_own_objects() -> None:
    layout = _layout()
    argvs = [" ".join(step.argv()) for step in layout.teardown_steps()]
    short = digest("r-0123456789ab")
    assert argvs == [
        f"ip link del dev mb{short}n0",
        f"ip link del dev mb{short}n1",
        f"ip link del dev mb{short}br",
        "ip netns del mlbench-r-0123456789ab-n0",
        "ip netns del mlbench-r-0123456789ab-n1",
    ]


def test_an_unlimited_link_gets_no_qdisc() -> None:
    assert qdisc_commands("eth0", Shaping()) == []
    assert not any(step.program == "tc" for step in _layout(Shaping(), Shaping()).setup_steps())
    assert expected_kinds(Shaping(None, 0.01)) == ("netem",)


@pytest.mark.parametrize(("rate", "burst"), [(10_000_000, 67050), (10_000_000_000, 1_250_000)])
def test_the_bucket_holds_a_gso_segment_or_a_millisecond(rate: int, burst: int) -> None:
    (command,) = qdisc_commands("eth0", Shaping(rate))
    assert command[command.index("burst") + 1] == str(burst)


def test_blocks_fit_the_nodes_and_refuse_a_small_range() -> None:
    assert block_prefix(2) == 29 and block_prefix(5) == 29 and block_prefix(6) == 28
    blocks = candidate_blocks(ipaddress.IPv4Network("198.18.0.0/28"), 2)
    assert [str(b) for b in blocks] == ["198.18.0.0/29", "198.18.0.8/29"]
    with pytest.raises(ValueError, match="too small for 300 nodes"):
        candidate_blocks(ipaddress.IPv4Network("198.18.0.0/24"), 300)


def test_ranks_fill_nodes_in_order() -> None:
    assert group_ranks(5, 2) == ((0, 1), (2, 3), (4,))


def test_a_run_id_that_cannot_name_a_namespace_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot name a network namespace"):
        plan_layout("../etc", ((0,),), SUBNET, Shaping(), Shaping())


def _emulated(backend: str, ranks_per_node: int | None = None):
    from pathlib import Path

    from support.local_runs import local_plan

    from mlbench_tui.executors.local.network.runs import EmulatedNetwork, ranks_by_node
    from mlbench_tui.plan import NetworkPlan

    plan = local_plan(backend=backend, workers=4).model_copy(
        update={"network": NetworkPlan(bandwidth_bps=10**8), "ranks_per_node": ranks_per_node}
    )
    layout = plan_layout(
        "r-0123456789ab", ranks_by_node(plan), ipaddress.IPv4Network("198.18.0.0/28"), Shaping(), Shaping()
    )
    return plan, EmulatedNetwork(layout, Path("/state/runs/.network/r-0123456789ab.hosts"), 0.05)


def test_every_transport_is_bound_to_the_emulated_link() -> None:
    from mlbench_tui.executors.local.network.runs import rank_namespaces, shared_environment

    plan, network = _emulated("gloo", ranks_per_node=2)
    env = shared_environment(plan, network)
    assert env["MLBENCH_NETNS"] == "/run/netns/mlbench-r-0123456789ab-n{node}"
    assert env["MLBENCH_RANKS_PER_NODE"] == "2"
    assert env["MLBENCH_HOSTS_FILE"] == "/state/runs/.network/r-0123456789ab.hosts"
    assert env["MASTER_ADDR"] == "198.18.0.2"  # node 0
    assert env["GLOO_SOCKET_IFNAME"] == env["MLBENCH_LINK_INTERFACE"] == "eth0"
    assert rank_namespaces(network, 4) == tuple(
        f"/run/netns/mlbench-r-0123456789ab-n{n}" for n in (0, 0, 1, 1)
    )
    plan, network = _emulated("nccl")
    env = shared_environment(plan, network)
    assert (env["NCCL_NET"], env["NCCL_SOCKET_IFNAME"], env["NCCL_IB_DISABLE"]) == ("Socket", "eth0", "1")
    plan, network = _emulated("mpi")
    env = shared_environment(plan, network)
    assert env["OMPI_MCA_btl"] == "tcp,self"  # never shared memory: it would bypass the links
    assert env["OMPI_MCA_btl_tcp_if_include"] == "198.18.0.0/28"
    assert env["PMIX_MCA_ptl_tcp_if_include"] == network.layout.bridge  # the launcher's PMIx server
