"""The emulated network of one local run, planned from its run id: pure, no system calls.

Each emulated node is a network namespace ``mlbench-<run id>-n<i>`` holding one end of a veth pair
(``eth0``, with the node's address); the other end (``mb<digest>n<i>``) hangs on the run's bridge
(``mb<digest>br``), where the host also has an address (rendezvous helpers may listen there). Both
ends are shaped: the node's end with the rate and the delay (what the node sends), the bridge's
end with the rate (what it receives). Every name derives from the run id, so a run's leftovers are
found by its own names, and two runs never share one.

The plan is a list of ``Step``s (``ip``/``tc`` argv lists, each run inside a namespace or on the
host), applied in order by ``links.apply`` and undone by the teardown steps, which remove only
what this layout names.
"""

from __future__ import annotations

import hashlib
import ipaddress
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass

from mlbench_tui.executors.shaping import Shaping, qdisc_commands

NAMESPACE_PREFIX = "mlbench-"
LINK_PREFIX = "mb"
NODE_INTERFACE = "eth0"
DEFAULT_RANGE = "198.18.0.0/15"  # RFC 2544's benchmarking block: never routed, rarely configured
MAX_NODES = 4096
_SAFE = re.compile(r"^[A-Za-z0-9._-]+$")


def digest(run_id: str) -> str:
    """Eight hex digits naming a run's links (interface names hold at most 15 characters)."""
    return hashlib.sha256(run_id.encode()).hexdigest()[:8]


def namespace_name(run_id: str, node: int | str) -> str:
    return f"{NAMESPACE_PREFIX}{run_id}-n{node}"


def block_prefix(nodes: int) -> int:
    """The prefix length of a run's subnet: room for the nodes, the host, network and broadcast."""
    return 32 - max(3, math.ceil(math.log2(nodes + 3)))


@dataclass(frozen=True)
class Step:
    """One ``ip`` or ``tc`` command: its argv after the program name, and where it runs."""

    program: str  # "ip" or "tc"
    args: tuple[str, ...]
    netns: str | None = None  # run inside this namespace (``-n``); None: on the host

    def argv(self) -> tuple[str, ...]:
        return (self.program, *(("-n", self.netns) if self.netns else ()), *self.args)


@dataclass(frozen=True)
class Node:
    """One emulated node: its namespace, the two ends of its link, its address and its ranks."""

    index: int
    namespace: str
    host_interface: str
    address: ipaddress.IPv4Address
    ranks: tuple[int, ...]
    interface: str = NODE_INTERFACE


@dataclass(frozen=True)
class NetworkLayout:
    """Everything one run's emulated network consists of."""

    run_id: str
    subnet: ipaddress.IPv4Network
    bridge: str
    host_address: ipaddress.IPv4Address
    nodes: tuple[Node, ...]
    egress: Shaping  # on each node's own end: what the node sends
    ingress: Shaping  # on the bridge's end: what the node receives

    @property
    def namespaces(self) -> tuple[str, ...]:
        return tuple(node.namespace for node in self.nodes)

    @property
    def host_interfaces(self) -> tuple[str, ...]:
        return tuple(node.host_interface for node in self.nodes)

    def node_of_rank(self, rank: int) -> Node:
        for node in self.nodes:
            if rank in node.ranks:
                return node
        raise ValueError(f"rank {rank} is on no node of run {self.run_id}")

    def setup_steps(self) -> list[Step]:
        """What creates the network, grouped so each program runs once per namespace: the host's
        part (namespaces, bridge, links, the receiving qdiscs), each node's part (addresses, the
        sending qdisc), and last the bridge's ends come up. A link carries nothing until both of its
        ends are up, so every packet meets its qdiscs."""
        bridge = self.bridge
        steps = [Step("ip", ("netns", "add", node.namespace)) for node in self.nodes]
        steps += [
            Step("ip", ("link", "add", bridge, "type", "bridge")),
            Step("ip", ("link", "set", "dev", bridge, "addrgenmode", "none")),
            Step("ip", ("addr", "add", f"{self.host_address}/{self.subnet.prefixlen}", "dev", bridge)),
        ]
        for node in self.nodes:
            host_if = node.host_interface
            steps += [
                Step(
                    "ip",
                    (
                        "link",
                        "add",
                        host_if,
                        "type",
                        "veth",
                        "peer",
                        "name",
                        node.interface,
                        "netns",
                        node.namespace,
                    ),
                ),
                Step("ip", ("link", "set", "dev", host_if, "addrgenmode", "none")),
                Step("ip", ("link", "set", "dev", host_if, "master", bridge)),
            ]
        steps += [
            Step("tc", command)
            for node in self.nodes
            for command in qdisc_commands(node.host_interface, self.ingress)
        ]
        for node in self.nodes:
            ns, interface = node.namespace, node.interface
            steps += [
                Step("ip", ("link", "set", "dev", "lo", "up"), ns),
                Step("ip", ("link", "set", "dev", interface, "addrgenmode", "none"), ns),
                Step("ip", ("addr", "add", f"{node.address}/{self.subnet.prefixlen}", "dev", interface), ns),
                Step("ip", ("link", "set", "dev", interface, "up"), ns),
                *(Step("tc", command, ns) for command in qdisc_commands(interface, self.egress)),
            ]
        steps.append(Step("ip", ("link", "set", "dev", bridge, "up")))
        steps += [Step("ip", ("link", "set", "dev", node.host_interface, "up")) for node in self.nodes]
        return steps

    def teardown_steps(self) -> list[Step]:
        """What removes it, by its own names: each link (which also takes its peer, even inside a
        namespace a process still holds), the bridge, then the namespaces."""
        steps = [Step("ip", ("link", "del", "dev", name)) for name in self.host_interfaces]
        steps.append(Step("ip", ("link", "del", "dev", self.bridge)))
        steps += [Step("ip", ("netns", "del", name)) for name in self.namespaces]
        return steps


def plan_layout(
    run_id: str,
    ranks_per_node: tuple[tuple[int, ...], ...],
    subnet: ipaddress.IPv4Network,
    egress: Shaping,
    ingress: Shaping,
) -> NetworkLayout:
    """The network of run ``run_id``: one node per entry of ``ranks_per_node`` (the ranks it holds),
    addresses from ``subnet`` (the host first, then node 0, 1, ...)."""
    if not _SAFE.fullmatch(run_id):
        raise ValueError(f"run id {run_id!r} cannot name a network namespace")
    if not 1 <= len(ranks_per_node) <= MAX_NODES:
        raise ValueError(f"{len(ranks_per_node)} nodes: an emulated network holds 1 to {MAX_NODES}")
    hosts = list(_hosts(subnet, len(ranks_per_node) + 1))
    short = digest(run_id)
    nodes = tuple(
        Node(
            index=i,
            namespace=namespace_name(run_id, i),
            host_interface=f"{LINK_PREFIX}{short}n{i}",
            address=hosts[i + 1],
            ranks=ranks,
        )
        for i, ranks in enumerate(ranks_per_node)
    )
    return NetworkLayout(
        run_id=run_id,
        subnet=subnet,
        bridge=f"{LINK_PREFIX}{short}br",
        host_address=hosts[0],
        nodes=nodes,
        egress=egress,
        ingress=ingress,
    )


def _hosts(subnet: ipaddress.IPv4Network, count: int) -> list[ipaddress.IPv4Address]:
    usable = subnet.num_addresses - 2
    if count > usable:
        raise ValueError(f"subnet {subnet} has {usable} addresses, {count} are needed")
    first = int(subnet.network_address) + 1
    return [ipaddress.IPv4Address(first + i) for i in range(count)]


def group_ranks(workers: int, ranks_per_node: int) -> tuple[tuple[int, ...], ...]:
    """Ranks ``0..workers-1`` in nodes of ``ranks_per_node``, in order (the last may hold fewer)."""
    return tuple(
        tuple(range(start, min(start + ranks_per_node, workers)))
        for start in range(0, workers, ranks_per_node)
    )


def candidate_blocks(network_range: ipaddress.IPv4Network, nodes: int) -> Iterator[ipaddress.IPv4Network]:
    """The subnets of ``network_range`` a run of ``nodes`` nodes may take, in order (``ValueError``
    at once when the range is too small for one)."""
    prefix = block_prefix(nodes)
    if prefix < network_range.prefixlen:
        raise ValueError(
            f"the emulated network range {network_range} is too small for {nodes} nodes "
            f"(a /{prefix} is needed)"
        )
    return network_range.subnets(new_prefix=prefix)
