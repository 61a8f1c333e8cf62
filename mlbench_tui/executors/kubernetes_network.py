"""spec.network on Kubernetes: what each worker pod carries so its links are limited (pure).

Bandwidth goes, by default, through the bandwidth CNI plugin: the pod's
``kubernetes.io/ingress-bandwidth`` and ``kubernetes.io/egress-bandwidth`` annotations (the plugin
shapes the pod's host-side interface). Latency, and bandwidth on clusters without that plugin
(``network.kubernetes_bandwidth: tc``), are set by an init container that runs ``tc -batch`` on the
pod's ``eth0`` with NET_ADMIN and nothing else, from a file of the run's ConfigMap: what the pod
sends gets the delay (netem) and the rate (tbf); what it receives is policed to the rate. The
commands are the local emulation's own (``executors.shaping``).
"""

from __future__ import annotations

from typing import Any

from mlbench_tui.executors.shaping import Shaping, burst_bytes, qdisc_commands
from mlbench_tui.plan import NetworkPlan

INGRESS_ANNOTATION = "kubernetes.io/ingress-bandwidth"
EGRESS_ANNOTATION = "kubernetes.io/egress-bandwidth"
SHAPING_KEY = "shaping.tc"  # the init container's tc batch file, in the run's ConfigMap
INIT_CONTAINER = "link-shaping"
POD_INTERFACE = "eth0"


def bandwidth_quantity(bps: int) -> str:
    """Bits per second as a Kubernetes quantity: ``100M``, ``1G``, ``2500M``, ``1500k``."""
    for suffix, size in (("T", 10**12), ("G", 10**9), ("M", 10**6), ("k", 10**3)):
        if bps % size == 0:
            return f"{bps // size}{suffix}"
    return str(bps)


def pod_annotations(network: NetworkPlan | None) -> dict[str, str]:
    """The bandwidth CNI plugin's annotations of a worker pod (none without a rate, or with tc)."""
    if network is None or network.bandwidth_bps is None or network.kubernetes_bandwidth != "cni":
        return {}
    rate = bandwidth_quantity(network.bandwidth_bps)
    return {INGRESS_ANNOTATION: rate, EGRESS_ANNOTATION: rate}


def shaping(network: NetworkPlan | None) -> Shaping:
    """What the init container puts on the pod's interface (empty: no init container)."""
    if network is None:
        return Shaping()
    rate = network.bandwidth_bps if network.kubernetes_bandwidth == "tc" else None
    return Shaping(rate, network.latency_s)


def shaping_batch(network: NetworkPlan | None) -> str | None:
    """The init container's ``tc -batch`` file; None when the pod needs no init container."""
    sending = shaping(network)
    if sending.empty:
        return None
    lines = [" ".join(command) for command in qdisc_commands(POD_INTERFACE, sending)]
    if sending.rate_bps is not None:  # what arrives is policed: a pod cannot queue its own ingress
        lines.append(f"qdisc add dev {POD_INTERFACE} handle ffff: ingress")
        lines.append(
            f"filter add dev {POD_INTERFACE} parent ffff: protocol all matchall action police "
            f"rate {sending.rate_bps}bit burst {burst_bytes(sending.rate_bps)} drop"
        )
    return "".join(line + "\n" for line in lines)


def method(network: NetworkPlan | None) -> str | None:
    """How the run's links are limited on Kubernetes: 'cni', 'tc', 'cni+tc' (a rate by the plugin,
    a delay by tc); None without a network or with nothing to limit."""
    if network is None or not network.shaped:
        return None
    parts = []
    if pod_annotations(network):
        parts.append("cni")
    if shaping_batch(network) is not None:
        parts.append("tc")
    return "+".join(parts)


def init_container(
    network: NetworkPlan | None, image: str, pull_policy: str, config_mount: dict[str, Any], config_dir: str
) -> dict[str, Any] | None:
    """The init container that shapes the pod's interface: root in the pod's network namespace
    with NET_ADMIN alone (every other capability dropped, no privilege escalation, read-only root)."""
    if shaping_batch(network) is None:
        return None
    return {
        "name": INIT_CONTAINER,
        "image": image,
        "imagePullPolicy": pull_policy,
        "command": ["tc", "-batch", f"{config_dir}/{SHAPING_KEY}"],
        "volumeMounts": [config_mount],
        "securityContext": {
            "runAsUser": 0,
            "runAsGroup": 0,
            "runAsNonRoot": False,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"], "add": ["NET_ADMIN"]},
        },
    }
