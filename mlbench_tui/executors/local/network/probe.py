"""What this machine can emulate: privileges, iproute2, namespaces, veth, bridges and the qdiscs.

``probe()`` asks once per process: the capability bits of this process, then a throwaway namespace
(``mlbench-probe-<pid>``) in which it makes a veth pair and a bridge and tries ``tbf`` and ``netem``
on them, then removes it; nothing touches the host's own interfaces. ``refusal(network, caps)``
turns what is missing into the sentence ``plan`` and ``apply`` print before anything starts,
naming what still works.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from mlbench_tui.executors.local.network import links
from mlbench_tui.executors.local.network.layout import NAMESPACE_PREFIX, Step
from mlbench_tui.plan import NetworkPlan

CAP_NET_ADMIN = 12
CAP_SYS_ADMIN = 21
PROBE_PREFIX = f"{NAMESPACE_PREFIX}probe-"
_probed: dict[int, Capabilities] = {}


@dataclass(frozen=True)
class Capabilities:
    """What emulating a network needs here, as found: ``missing`` blocks everything; the qdisc
    flags say which parts of a network can be emulated."""

    missing: tuple[str, ...] = ()
    tbf: bool = False
    netem: bool = False

    def describe(self) -> str:
        if self.missing:
            return "no network emulation: " + "; ".join(self.missing)
        parts = ["bandwidth (tbf)" if self.tbf else "no bandwidth (no tbf)"]
        parts.append("latency (netem)" if self.netem else "no latency (no netem)")
        return "network emulation: " + ", ".join(parts)


def effective_capabilities(status: Path = Path("/proc/self/status")) -> int | None:
    """This process's effective capability bits (None where /proc does not say)."""
    try:
        text = status.read_text()
    except OSError:
        return None
    match = re.search(r"^CapEff:\s*([0-9a-fA-F]+)$", text, re.MULTILINE)
    return int(match[1], 16) if match else None


def _privilege_problem() -> str | None:
    caps = effective_capabilities()
    if caps is None:
        return None if os.geteuid() == 0 else "this system does not say which capabilities mlbench has"
    lacking = [
        name
        for bit, name in ((CAP_NET_ADMIN, "CAP_NET_ADMIN"), (CAP_SYS_ADMIN, "CAP_SYS_ADMIN"))
        if not caps >> bit & 1
    ]
    if not lacking:
        return None
    return (
        f"this process lacks {' and '.join(lacking)} (emulated nodes are network namespaces whose links "
        "tc shapes): run mlbench as root or grant it CAP_NET_ADMIN and CAP_SYS_ADMIN"
    )


def probe(*, refresh: bool = False) -> Capabilities:
    """What this machine can emulate (asked once per process unless ``refresh``)."""
    pid = os.getpid()
    if not refresh and pid in _probed:
        return _probed[pid]
    _probed[pid] = found = _probe()
    return found


def _probe() -> Capabilities:
    missing = [
        f"'{p}' is not installed (apt-get install iproute2)"
        for p in ("ip", "tc")
        if links.program_path(p) is None
    ]
    privilege = _privilege_problem()
    if privilege:
        missing.append(privilege)
    if missing:
        return Capabilities(missing=tuple(missing))
    ns = f"{PROBE_PREFIX}{os.getpid()}"
    links.run_steps(
        [Step("ip", ("netns", "del", ns))], force=True
    )  # a probe of a killed process with our pid
    made = links.run_steps(
        [
            Step("ip", ("netns", "add", ns)),
            Step("ip", ("link", "add", "p0", "type", "veth", "peer", "name", "p1"), ns),
            Step("ip", ("link", "add", "b0", "type", "bridge"), ns),
        ]
    )
    try:
        if made:
            return Capabilities(
                missing=(f"cannot make a network namespace, veth pair and bridge: {made[0].message}",)
            )
        tbf = not links.run_steps(
            [
                Step(
                    "tc",
                    (
                        "qdisc",
                        "add",
                        "dev",
                        "p0",
                        "root",
                        "tbf",
                        "rate",
                        "1mbit",
                        "burst",
                        "66000",
                        "limit",
                        "262144",
                    ),
                    ns,
                )
            ]
        )
        netem = not links.run_steps(
            [Step("tc", ("qdisc", "add", "dev", "p1", "root", "netem", "delay", "1ms"), ns)]
        )
        return Capabilities(tbf=tbf, netem=netem)
    finally:
        links.run_steps([Step("ip", ("netns", "del", ns))], force=True)


def refusal(network: NetworkPlan, caps: Capabilities) -> str | None:
    """Why ``network`` cannot be emulated here, naming what still works; None when it can."""
    if caps.missing:
        return (
            "cannot emulate the network here: "
            + "; ".join(caps.missing)
            + ". Runs without spec.network still work"
        )
    if network.latency_s > 0 and not caps.netem:
        still = "bandwidth can" if caps.tbf else "bandwidth cannot either (no tbf)"
        return (
            "this kernel has no netem: latency cannot be emulated here; "
            f"{still} (load the sch_netem module, or remove network.latency)"
        )
    if network.bandwidth_bps is not None and not caps.tbf:
        still = "latency can" if caps.netem else "latency cannot either (no netem)"
        return f"this kernel has no tbf: bandwidth cannot be emulated here; {still} (load the sch_tbf module)"
    return None
