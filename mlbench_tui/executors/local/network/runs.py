"""A local run's emulated network, from its plan: refuse, set up, place ranks, check, remove.

The local executor calls ``check`` when it places a plan (``plan``/``apply`` refuse before anything
starts), ``setup`` before launching (after removing what killed runs left), ``shared_environment``
for every rank (the namespaces, node 0's address as the rendezvous, the transports pinned to the
emulated link), ``place_forked`` for a forked group (each rank's namespace, joined by its launcher),
and ``finish`` once the run is over, whatever ended it.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import time
from dataclasses import dataclass
from pathlib import Path

from mlbench_worker import rank_env

from mlbench_tui.errors import ExecutorError
from mlbench_tui.executors import shaping
from mlbench_tui.executors.local.launch import LocalRequest
from mlbench_tui.executors.local.network import ledger, links, probe
from mlbench_tui.executors.local.network.layout import (
    DEFAULT_RANGE,
    NAMESPACE_PREFIX,
    NetworkLayout,
    group_ranks,
    namespace_name,
)
from mlbench_tui.lifecycle import NetworkCheck
from mlbench_tui.plan import RunPlan

NETNS_DIR = links.NETNS_DIR


def ranks_by_node(plan: RunPlan) -> tuple[tuple[int, ...], ...]:
    """The ranks of each emulated node (``hardware.ranks_per_node``, one per node when unset)."""
    return group_ranks(plan.workers, plan.ranks_per_node or 1)


def network_range() -> ipaddress.IPv4Network:
    """The address range emulated nodes take addresses from (settings' ``emulated_network``)."""
    from mlbench_tui.settings import load_settings

    text = load_settings().emulated_network or DEFAULT_RANGE
    try:
        return ipaddress.IPv4Network(text)
    except ValueError as exc:
        raise ExecutorError(
            f"emulated_network {text!r} is not an IPv4 network: {exc}",
            hint="e.g. emulated_network = '198.18.0.0/15'",
        ) from None


def check(plan: RunPlan) -> None:
    """Refuse (``ExecutorError``) a plan whose network this machine cannot emulate."""
    if plan.network is None:
        return
    if plan.framework == "tensorflow":
        raise ExecutorError(
            f"run {plan.name}: the tensorflow implementation cannot run on emulated links (its workers "
            "address each other on 127.0.0.1)",
            hint="use framework pytorch for a local run with spec.network",
        )
    reason = probe.refusal(plan.network, probe.probe())
    if reason is not None:
        raise ExecutorError(f"run {plan.name}: {reason}")
    network_range()


@dataclass(frozen=True)
class EmulatedNetwork:
    """A run's network as set up: its layout, its hosts file and how long making it took."""

    layout: NetworkLayout
    hosts_file: Path
    setup_s: float

    def made(self) -> NetworkCheck:
        """What the run's records say while it runs: the network is made, not yet checked."""
        return NetworkCheck(method="emulated", nodes=len(self.layout.nodes), setup_s=self.setup_s)


def describe(plan: RunPlan) -> str | None:
    """What the dry run says of the plan's network (None without one)."""
    if plan.network is None:
        return None
    nodes = plan.emulated_nodes()
    text = (
        f"{plan.network.label()} per rank, {nodes} emulated node{'' if nodes == 1 else 's'} "
        f"(network namespaces mlbench-<run id>-n<i>, addresses from {network_range()} chosen at start)"
    )
    if plan.backend == "nccl":
        text += "; NCCL on its socket transport between nodes"
    return text


def setup(plan: RunPlan, run_id: str, runs_dir: Path) -> EmulatedNetwork | None:
    """Make the run's network (None for a run without one); ``ExecutorError`` leaves nothing behind."""
    if plan.network is None:
        return None
    started = time.perf_counter()
    ledger.sweep(runs_dir)
    reserved = ledger.reserve(
        runs_dir,
        run_id,
        ranks_by_node(plan),
        shaping.egress(plan.network),
        shaping.ingress(plan.network),
        network_range(),
    )
    hosts = ledger.hosts_path(runs_dir, run_id)
    try:
        hosts.write_text(hosts_text(reserved.layout, _read_hosts()))
        links.apply(reserved.layout)
    except BaseException:
        if not links.remaining(reserved.layout):
            ledger.release(runs_dir, run_id)
        raise
    return EmulatedNetwork(reserved.layout, hosts, time.perf_counter() - started)


def hosts_text(layout: NetworkLayout, base: str) -> str:
    """The run's hosts file: the machine's own (``base``) and a name for every emulated address, in
    IPv4 and IPv4-mapped IPv6 form (c10d's store accepts on a dual-stack socket and names each peer)."""
    names = [(layout.host_address, f"{NAMESPACE_PREFIX}{layout.run_id}-host")]
    names += [(node.address, node.namespace) for node in layout.nodes]
    lines = [f"{address} {name}\n::ffff:{address} {name}\n" for address, name in names]
    return base.rstrip("\n") + "\n# mlbench emulated network of run " + layout.run_id + "\n" + "".join(lines)


def shared_environment(plan: RunPlan, network: EmulatedNetwork) -> dict[str, str]:
    """What every rank of the run needs (one environment for a launcher such as mpiexec): which
    namespace each rank joins (by its rank), the run's hosts file, the rendezvous at node 0's address,
    and every transport bound to the emulated link."""
    layout = network.layout
    interface = layout.nodes[0].interface
    env = {
        rank_env.NETNS: str(NETNS_DIR / namespace_name(layout.run_id, "{node}")),
        rank_env.RANKS_PER_NODE: str(plan.ranks_per_node or 1),
        rank_env.HOSTS_FILE: str(network.hosts_file),
        rank_env.LINK_INTERFACE: interface,
        "MASTER_ADDR": str(layout.nodes[0].address),
        "GLOO_SOCKET_IFNAME": interface,
        "TP_SOCKET_IFNAME": interface,
    }
    if plan.backend == "nccl":
        env.update({"NCCL_SOCKET_IFNAME": interface, "NCCL_NET": "Socket", "NCCL_IB_DISABLE": "1"})
    if plan.backend == "mpi":
        # Open MPI: TCP only (its shared-memory transport would bypass the links), on the emulated
        # subnet; the launcher's PMIx server listens on the bridge, the one host address ranks reach.
        env.update(
            {
                "OMPI_MCA_pml": "ob1",
                "OMPI_MCA_btl": "tcp,self",
                "OMPI_MCA_btl_tcp_if_include": str(layout.subnet),
                "PMIX_MCA_ptl_tcp_remote_connections": "1",
                "PMIX_MCA_ptl_tcp_if_include": layout.bridge,
            }
        )
    return env


def _read_hosts() -> str:
    try:
        return Path("/etc/hosts").read_text()
    except OSError:
        return "127.0.0.1 localhost\n"


def rank_namespaces(network: EmulatedNetwork, workers: int) -> tuple[str, ...]:
    """Each rank's namespace file, by rank. NCCL sees each node as a host of its own (the rank sets
    ``NCCL_HOSTID`` to its node when it joins), so it uses sockets between nodes and P2P/SHM
    between a node's ranks."""
    return tuple(str(NETNS_DIR / network.layout.node_of_rank(rank).namespace) for rank in range(workers))


def place_forked(request: LocalRequest, network: EmulatedNetwork | None) -> LocalRequest:
    """A forked group's ``request`` on the emulated nodes: each rank joins its node's namespace
    (its launcher moves it there right after the fork) and the rendezvous is at node 0's address,
    where rank 0's launcher holds the port (unchanged without a network)."""
    if network is None:
        return request
    return dataclasses.replace(
        request,
        master_addr=str(network.layout.nodes[0].address),
        rank_netns=rank_namespaces(network, request.workers),
    )


def finish(
    runs_dir: Path, run_id: str, made: EmulatedNetwork | NetworkCheck | None = None
) -> NetworkCheck | None:
    """Check the run's shaping held, then remove its network by its record (None: it had none,
    or it is gone already); ``made`` says how long making it took."""
    record = ledger.read(runs_dir, run_id)
    if record is None:
        return None
    layout = record.layout()
    started = time.perf_counter()  # the check is part of what removing the network costs
    problems = links.shaping_held(layout)
    left = ledger.teardown(runs_dir, run_id)
    teardown_s = time.perf_counter() - started
    if left:
        problems.append(f"could not remove {', '.join(left)} (removed the next time the store is used)")
    return NetworkCheck(
        method="emulated",
        nodes=len(layout.nodes),
        held=not [p for p in problems if not p.startswith("could not remove")],
        problems=tuple(problems),
        setup_s=made.setup_s if made is not None else None,
        teardown_s=teardown_s,
    )
