"""A local run's emulated network, from its plan: refuse, set up, place ranks, check, remove.

The local executor calls ``check`` when it places a plan (``plan``/``apply`` refuse before anything
starts), ``setup`` before launching (after removing what killed runs left), ``rank_environment``
for each rank (its namespace, its node's address as the rendezvous, the transports pinned to the
emulated link), and ``finish`` once the run is over, whatever ended it.
"""

from __future__ import annotations

import ipaddress
import time
from dataclasses import dataclass
from pathlib import Path

from mlbench_tui.errors import ExecutorError
from mlbench_tui.executors import shaping
from mlbench_tui.executors.emulation import ledger, links, probe
from mlbench_tui.executors.emulation.layout import DEFAULT_RANGE, NetworkLayout, group_ranks
from mlbench_tui.lifecycle import NetworkCheck
from mlbench_tui.plan import RunPlan

NETNS_DIR = links.NETNS_DIR
NETNS_VARIABLE = "MLBENCH_NETNS"  # the namespace file a rank joins (setns) before any socket
LINK_VARIABLE = "MLBENCH_LINK_INTERFACE"  # the interface whose counters are the rank's link
RANGE_VARIABLE = "MLBENCH_EMULATED_NETWORK"


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
    reason = probe.refusal(plan.network, probe.probe())
    if reason is not None:
        raise ExecutorError(f"run {plan.name}: {reason}")
    network_range()


@dataclass(frozen=True)
class EmulatedNetwork:
    """A run's network as set up: its layout and how long making it took."""

    layout: NetworkLayout
    setup_s: float


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
    try:
        links.apply(reserved.layout)
    except BaseException:
        if not links.remaining(reserved.layout):
            ledger.release(runs_dir, run_id)
        raise
    return EmulatedNetwork(reserved.layout, time.perf_counter() - started)


def rank_environment(plan: RunPlan, layout: NetworkLayout, rank: int) -> dict[str, str]:
    """What rank ``rank`` needs to live on its emulated node: the namespace it joins, the rendezvous
    at node 0's address, and every transport bound to the emulated link (NCCL between nodes by
    socket: each node is a host of its own to it, so ranks of one node still use P2P and SHM)."""
    node = layout.node_of_rank(rank)
    interface = node.interface
    env = {
        NETNS_VARIABLE: str(NETNS_DIR / node.namespace),
        LINK_VARIABLE: interface,
        "MASTER_ADDR": str(layout.nodes[0].address),
        "GLOO_SOCKET_IFNAME": interface,
        "TP_SOCKET_IFNAME": interface,
    }
    if plan.backend == "nccl":
        env.update(
            {
                "NCCL_SOCKET_IFNAME": interface,
                "NCCL_NET": "Socket",
                "NCCL_IB_DISABLE": "1",
                "NCCL_HOSTID": f"{layout.run_id}-n{node.index}",
            }
        )
    if plan.backend == "mpi":
        env.update({"OMPI_MCA_btl": "tcp,self", "OMPI_MCA_btl_tcp_if_include": interface})
    return env


def finish(runs_dir: Path, run_id: str, emulated: EmulatedNetwork | None = None) -> NetworkCheck | None:
    """Check the run's shaping held, then remove its network by its record (None: it had none)."""
    record = ledger.read(runs_dir, run_id)
    if record is None:
        return None
    layout = record.layout()
    problems = links.shaping_held(layout)
    started = time.perf_counter()
    left = ledger.teardown(runs_dir, run_id)
    teardown_s = time.perf_counter() - started
    if left:
        problems.append(f"could not remove {', '.join(left)} (removed the next time the store is used)")
    return NetworkCheck(
        method="emulated",
        nodes=len(layout.nodes),
        held=not [p for p in problems if not p.startswith("could not remove")],
        problems=tuple(problems),
        setup_s=emulated.setup_s if emulated is not None else None,
        teardown_s=teardown_s,
    )
