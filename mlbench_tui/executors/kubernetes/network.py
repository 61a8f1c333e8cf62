"""spec.network on Kubernetes: what each worker pod carries so its links are limited (pure).

Bandwidth goes, by default, through the bandwidth CNI plugin: the pod's
``kubernetes.io/ingress-bandwidth`` and ``kubernetes.io/egress-bandwidth`` annotations (the plugin
shapes the pod's host-side interface). Latency, and bandwidth on clusters without that plugin
(``network.kubernetes_bandwidth: tc``), are set by init containers with NET_ADMIN and nothing else,
from files of the run's ConfigMap: ``tc -batch`` on the pod's ``eth0`` gives what the pod sends the
delay (netem) and the rate (tbf); what it receives is redirected through an ifb device (made first
by ``ip -batch``) queued at the rate. The commands are the local emulation's own
(``executors.shaping``).
"""

from __future__ import annotations

from typing import Any

from mlbench_tui.executors.shaping import Shaping, qdisc_commands, redirect_commands
from mlbench_tui.plan import NetworkPlan

INGRESS_ANNOTATION = "kubernetes.io/ingress-bandwidth"
EGRESS_ANNOTATION = "kubernetes.io/egress-bandwidth"
SHAPING_KEY = "shaping.tc"  # the init containers' batch files, in the run's ConfigMap
IFB_KEY = "shaping.ip"
INIT_CONTAINER = "link-shaping"
IFB_CONTAINER = "link-ifb"
POD_INTERFACE = "eth0"
POD_IFB = "ifb-mlbench"


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


def _batch(commands: list[tuple[str, ...]]) -> str:
    return "".join(" ".join(command) + "\n" for command in commands)


def shaping_batch(network: NetworkPlan | None) -> str | None:
    """The ``tc -batch`` file of the pod's interface; None when the pod needs no shaping."""
    sending = shaping(network)
    if sending.empty:
        return None
    commands = qdisc_commands(POD_INTERFACE, sending)
    if sending.rate_bps is not None:
        commands += redirect_commands(POD_INTERFACE, POD_IFB, sending.rate_bps)[1]
    return _batch(commands)


def ifb_batch(network: NetworkPlan | None) -> str | None:
    """The ``ip -batch`` file making the ifb device what the pod receives is queued on (None: no rate)."""
    rate = shaping(network).rate_bps
    return None if rate is None else _batch(redirect_commands(POD_INTERFACE, POD_IFB, rate)[0])


def config_files(network: NetworkPlan | None) -> dict[str, str]:
    """The batch files the run's ConfigMap carries for its init containers (none without shaping)."""
    files = {SHAPING_KEY: shaping_batch(network), IFB_KEY: ifb_batch(network)}
    return {key: text for key, text in files.items() if text is not None}


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


def init_containers(
    network: NetworkPlan | None, image: str, pull_policy: str, config_mount: dict[str, Any], config_dir: str
) -> list[dict[str, Any]]:
    """The init containers that shape the pod's interface (the ifb device first, when there is a
    rate): root in the pod's network namespace with NET_ADMIN alone (every other capability
    dropped, no privilege escalation, read-only root), each running one batch file."""
    steps = [
        (IFB_CONTAINER, "ip", IFB_KEY, ifb_batch(network)),
        (INIT_CONTAINER, "tc", SHAPING_KEY, shaping_batch(network)),
    ]
    return [
        _container(name, [program, "-batch", f"{config_dir}/{key}"], image, pull_policy, config_mount)
        for name, program, key, text in steps
        if text is not None
    ]


def _container(
    name: str, command: list[str], image: str, pull_policy: str, config_mount: dict[str, Any]
) -> dict[str, Any]:
    return {
        "name": name,
        "image": image,
        "imagePullPolicy": pull_policy,
        "command": command,
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
