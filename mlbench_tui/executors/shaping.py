"""How one link is shaped with tc: a token bucket for the rate, netem for the added delay.

Pure functions from a ``NetworkPlan`` to ``tc`` argv lists, shared by the local executor (which runs
them on each emulated node's veth) and the Kubernetes init container (which runs them on the pod's
interface). Rate limits both directions when applied to both ends of a link; the delay is applied
where a node sends, so each direction carries it once.

The token bucket's burst is ``plan.link_burst_bytes``; its queue holds 100 ms of traffic (at least
256 KiB), so TCP meets a queue, not drops, at any rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mlbench_tui.plan import NetworkPlan, link_burst_bytes

QUEUE_S = 0.1
MIN_QUEUE_BYTES = 256 * 1024
ROOT_HANDLE = "1:"
RATE_HANDLE = "10:"


@dataclass(frozen=True)
class Shaping:
    """What one direction of one link gets: a rate (bits/s, None: none) and a delay (seconds)."""

    rate_bps: int | None = None
    delay_s: float = 0.0

    @property
    def empty(self) -> bool:
        return self.rate_bps is None and self.delay_s <= 0


def egress(network: NetworkPlan) -> Shaping:
    """What a node's own sending side gets: the rate and the delay."""
    return Shaping(network.bandwidth_bps, network.latency_s)


def ingress(network: NetworkPlan) -> Shaping:
    """What the other end of a node's link gets (the traffic towards the node): the rate alone."""
    return Shaping(network.bandwidth_bps, 0.0)


burst_bytes = link_burst_bytes


def queue_bytes(rate_bps: int, delay_s: float = 0.0) -> int:
    return max(MIN_QUEUE_BYTES, math.ceil(rate_bps / 8 * (QUEUE_S + delay_s)))


def netem_limit_packets(shaping: Shaping) -> int:
    """netem's queue in packets: what the link carries during the delay (1500-byte frames), with room."""
    if shaping.rate_bps is None:
        return 10_000
    in_flight = shaping.rate_bps / 8 * shaping.delay_s / 1500
    return max(1000, math.ceil(in_flight * 2))


def _time(seconds: float) -> str:
    return f"{round(seconds * 1e6)}us"


def qdisc_commands(device: str, shaping: Shaping) -> list[tuple[str, ...]]:
    """``tc`` argv lists (without the program, netns or batch options) that shape ``device``.

    A rate alone: ``tbf`` at the root. A delay alone: ``netem`` at the root. Both: ``netem`` at the
    root with ``tbf`` as its child, the usual way to combine them. Nothing for an empty shaping.
    """
    commands: list[tuple[str, ...]] = []
    if shaping.delay_s > 0:
        commands.append(
            (
                "qdisc", "add", "dev", device, "root", "handle", ROOT_HANDLE, "netem",
                "delay", _time(shaping.delay_s), "limit", str(netem_limit_packets(shaping)),
            )
        )  # fmt: skip
    if shaping.rate_bps is not None:
        rate = shaping.rate_bps
        under_netem = shaping.delay_s > 0
        where = (
            ("parent", f"{ROOT_HANDLE}1", "handle", RATE_HANDLE)
            if under_netem
            else ("root", "handle", ROOT_HANDLE)
        )
        commands.append(
            (
                "qdisc", "add", "dev", device, *where,
                "tbf", "rate", f"{rate}bit", "burst", str(burst_bytes(rate)),
                "limit", str(queue_bytes(rate, shaping.delay_s)),
            )
        )  # fmt: skip
    return commands


def expected_kinds(shaping: Shaping) -> tuple[str, ...]:
    """The qdisc kinds ``qdisc_commands`` puts on a device, root first (what a check expects to find)."""
    kinds: list[str] = []
    if shaping.delay_s > 0:
        kinds.append("netem")
    if shaping.rate_bps is not None:
        kinds.append("tbf")
    return tuple(kinds)


Commands = list[tuple[str, ...]]


def redirect_commands(device: str, ifb: str, rate_bps: int) -> tuple[Commands, Commands]:
    """Shaping what ``device`` receives where only its own end is reachable (a pod, a Slurm node):
    ``ip`` argv lists that make the ifb device ``ifb``, and ``tc`` argv lists that queue it at the
    rate and redirect everything arriving on ``device`` through it."""
    ip: Commands = [("link", "add", ifb, "type", "ifb"), ("link", "set", "dev", ifb, "up")]
    tc: Commands = [
        *qdisc_commands(ifb, Shaping(rate_bps)),
        ("qdisc", "add", "dev", device, "handle", "ffff:", "ingress"),
        (
            "filter", "add", "dev", device, "parent", "ffff:", "protocol", "all",
            "u32", "match", "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev", ifb,
        ),
    ]  # fmt: skip
    return ip, tc
