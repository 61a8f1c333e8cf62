"""Applying and removing a run's emulated network with ``ip`` and ``tc``, and checking it held.

Steps run as argv lists, never through a shell: consecutive steps of one program in one namespace
go to one ``ip -batch -``/``tc -batch -`` process (a setup of two nodes is six processes, not thirty),
one command per line, every token a name this package derived or a number. A setup that fails
part-way is torn down before the error is raised, so a run never starts on half a network.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mlbench_tui.errors import ExecutorError
from mlbench_tui.executors.local.network.layout import NetworkLayout, Node, Step
from mlbench_tui.executors.shaping import Shaping, expected_kinds

NETNS_DIR = Path("/run/netns")
SYS_NET = Path("/sys/class/net")
TIMEOUT_S = 30.0


class NetworkError(ExecutorError):
    """The emulated network could not be set up or removed."""


def program_path(program: str) -> str | None:
    """``ip`` or ``tc``: from PATH, else the sbin directories a non-login shell may lack."""
    found = shutil.which(program)
    if found:
        return found
    for folder in ("/usr/sbin", "/sbin", "/usr/bin", "/bin"):
        candidate = Path(folder) / program
        if candidate.exists():
            return str(candidate)
    return None


def _batches(steps: Sequence[Step]) -> list[tuple[str, str | None, list[tuple[str, ...]]]]:
    groups: list[tuple[str, str | None, list[tuple[str, ...]]]] = []
    for step in steps:
        if any(not token or any(c.isspace() for c in token) or '"' in token for token in step.args):
            raise NetworkError(f"refusing a malformed network command: {step.argv()}")
        if groups and groups[-1][0] == step.program and groups[-1][1] == step.netns:
            groups[-1][2].append(step.args)
        else:
            groups.append((step.program, step.netns, [step.args]))
    return groups


@dataclass(frozen=True)
class Failure:
    """A command that failed: its argv (one batch line) and what the program said."""

    argv: tuple[str, ...]
    message: str


Batch = tuple[str, str | None, list[tuple[str, ...]]]


def _run_batch(batch: Batch, force: bool) -> list[Failure]:
    program, netns, lines = batch
    path = program_path(program)
    if path is None:
        raise NetworkError(f"'{program}' not found", hint="install iproute2 (apt-get install iproute2)")
    argv = [path, *(("-n", netns) if netns else ()), *(("-force",) if force else ()), "-batch", "-"]
    text = "".join(" ".join(line) + "\n" for line in lines)
    try:
        done = subprocess.run(
            argv, input=text, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NetworkError(f"cannot run {program}: {exc}") from exc
    return [] if done.returncode == 0 else _failed_lines(program, netns, lines, done.stderr)


def _waves(batches: list[Batch]) -> list[list[list[Batch]]]:
    """Batches in waves run one after another: a host batch alone, or the batches of consecutive
    namespaces side by side (one chain per namespace, in order: they touch nothing of each other)."""
    waves: list[list[list[Batch]]] = []
    for batch in batches:
        netns = batch[1]
        last = waves[-1] if waves else None
        if netns is not None and last is not None and last[0][0][1] is not None:
            chain = next((c for c in last if c[0][1] == netns), None)
            if chain is not None:
                chain.append(batch)
            else:
                last.append([batch])
        else:
            waves.append([[batch]])
    return waves


def _run_chains(chains: list[list[Batch]], force: bool) -> list[Failure]:
    """Each chain's batches in order, the chains side by side (one thread each)."""
    results: list[list[Failure]] = [[] for _ in chains]
    errors: list[BaseException] = []

    def chain(index: int) -> None:
        try:
            for batch in chains[index]:
                results[index] += _run_batch(batch, force)
                if results[index] and not force:
                    return
        except BaseException as exc:  # raised again on the calling thread
            errors.append(exc)

    threads = [threading.Thread(target=chain, args=(i,)) for i in range(len(chains))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return [failure for found in results for failure in found]


def run_steps(steps: Sequence[Step], *, force: bool = False) -> list[Failure]:
    """Run ``steps`` in order (the namespaces' parts side by side); without ``force`` stop after
    the first wave with a failure. Returns the failures."""
    failures: list[Failure] = []
    for wave in _waves(_batches(steps)):
        failures += _run_chains(wave, force)
        if failures and not force:
            break
    return failures


def _failed_lines(
    program: str, netns: str | None, lines: list[tuple[str, ...]], stderr: str
) -> list[Failure]:
    """Which batch lines failed (``Command failed -:N``), each with the message printed before it."""
    failures: list[Failure] = []
    message: list[str] = []
    for raw in stderr.splitlines():
        if raw.startswith("Command failed -:"):
            number = int(raw.rsplit(":", 1)[1]) - 1
            args = lines[number] if 0 <= number < len(lines) else ()
            prefix = (program, *(("-n", netns) if netns else ()))
            failures.append(Failure((*prefix, *args), " ".join(message).strip() or "failed"))
            message = []
        elif raw.strip():
            message.append(raw.strip())
    if not failures:
        failures.append(Failure((program,), " ".join(message).strip() or "failed"))
    return failures


def apply(layout: NetworkLayout) -> None:
    """Create ``layout``; on any failure remove what was made and raise ``NetworkError``."""
    failures = run_steps(layout.setup_steps())
    if failures:
        remove(layout)
        first = failures[0]
        raise NetworkError(
            f"cannot set up the emulated network of run {layout.run_id}: "
            f"{' '.join(first.argv)}: {first.message}",
            hint="nothing was left behind; `mlbench plan` says what this machine can emulate",
        )


def remove(layout: NetworkLayout) -> list[str]:
    """Remove everything ``layout`` names (what is already gone is skipped); returns what remains."""
    run_steps(layout.teardown_steps(), force=True)
    return remaining(layout)


def remaining(layout: NetworkLayout) -> list[str]:
    """The names of ``layout`` that still exist on this machine."""
    names = [name for name in layout.namespaces if (NETNS_DIR / name).exists()]
    names += [name for name in (*layout.host_interfaces, layout.bridge) if (SYS_NET / name).exists()]
    return names


@dataclass(frozen=True)
class LinkCounters:
    """One end of a link: bytes through its interface, and through its root qdisc since it was made."""

    interface_tx_bytes: int
    qdisc_bytes: int | None  # None: the expected qdiscs are not there
    kinds: tuple[str, ...]  # the qdisc kinds found, root first


def read_counters(interface: str, netns: str | None, shaping: Shaping) -> LinkCounters | None:
    """What ``tc -s`` and ``ip -s`` say of ``interface`` (None when it is gone)."""
    ns = ("-n", netns) if netns else ()
    tc, ip = program_path("tc"), program_path("ip")
    if tc is None or ip is None:
        return None
    try:
        qdiscs = json.loads(
            subprocess.run(
                [tc, *ns, "-s", "-j", "qdisc", "show", "dev", interface],
                capture_output=True, text=True, timeout=TIMEOUT_S, check=True,
            ).stdout or "[]"
        )  # fmt: skip
        links = json.loads(
            subprocess.run(
                [ip, *ns, "-s", "-j", "link", "show", "dev", interface],
                capture_output=True, text=True, timeout=TIMEOUT_S, check=True,
            ).stdout or "[]"
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    if not links:
        return None
    tx = int(links[0].get("stats64", {}).get("tx", {}).get("bytes", 0))
    root = next((q for q in qdiscs if q.get("root")), None)
    kinds: list[str] = []
    if root is not None:
        kinds.append(str(root.get("kind")))
        kinds += [
            str(q.get("kind")) for q in qdiscs if not q.get("root") and q.get("kind") in ("tbf", "netem")
        ]
    expected = expected_kinds(shaping)
    qdisc_bytes = int(root.get("bytes", 0)) if root is not None and tuple(kinds) == expected else None
    return LinkCounters(interface_tx_bytes=tx, qdisc_bytes=qdisc_bytes, kinds=tuple(kinds))


def _qdiscs(netns: str | None, device: str | None = None) -> dict[str, list[dict[str, object]]]:
    """``tc -s -j qdisc show`` (of one device, or all) in ``netns`` (None: the host), by device."""
    tc = program_path("tc")
    if tc is None:
        return {}
    argv = [
        tc,
        *(("-n", netns) if netns else ()),
        "-s",
        "-j",
        "qdisc",
        "show",
        *(("dev", device) if device else ()),
    ]
    try:
        shown = json.loads(
            subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, check=True).stdout or "[]"
        )
    except (OSError, subprocess.SubprocessError, ValueError):
        return {}
    found: dict[str, list[dict[str, object]]] = {}
    for qdisc in shown:
        found.setdefault(str(qdisc.get("dev", device or "")), []).append(qdisc)
    return found


def _sysfs_bytes(interface: str, direction: str) -> int | None:
    try:
        return int((SYS_NET / interface / "statistics" / f"{direction}_bytes").read_text())
    except (OSError, ValueError):
        return None


def _verdict(qdiscs: list[dict[str, object]], sent: int | None, shaping: Shaping) -> LinkCounters | None:
    if sent is None:
        return None
    root = next((q for q in qdiscs if q.get("root")), None)
    kinds = [str(root.get("kind"))] if root is not None else []
    kinds += [str(q.get("kind")) for q in qdiscs if not q.get("root") and q.get("kind") in ("tbf", "netem")]
    matches = root is not None and tuple(kinds) == expected_kinds(shaping)
    qdisc_bytes = int(str(root.get("bytes", 0))) if matches and root is not None else None
    return LinkCounters(interface_tx_bytes=sent, qdisc_bytes=qdisc_bytes, kinds=tuple(kinds))


def shaping_held(layout: NetworkLayout) -> list[str]:
    """Why the shaping of ``layout`` was not in place for the whole run (empty: it was).

    Each shaped end's root qdisc was made before its link came up, so it has seen every byte the
    interface sent; a qdisc that is missing, of another kind, or that saw fewer bytes than the
    interface (it was replaced while the run went on) means part of the traffic went unshaped.
    What a node's end sent is what the bridge's end received (sysfs, no process): one ``tc`` for
    the host's ends and one per node, side by side.
    """
    ends: list[tuple[int, str, LinkCounters | None]] = []
    if not layout.ingress.empty:
        host = _qdiscs(None)
        for node in layout.nodes:
            sent = _sysfs_bytes(node.host_interface, "tx")
            ends.append(
                (node.index, "receiving", _verdict(host.get(node.host_interface, []), sent, layout.ingress))
            )
    if not layout.egress.empty:
        shown: dict[int, dict[str, list[dict[str, object]]]] = {}

        def read(node: Node) -> None:
            shown[node.index] = _qdiscs(node.namespace, node.interface)

        threads = [threading.Thread(target=read, args=(node,)) for node in layout.nodes]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for node in layout.nodes:
            sent = _sysfs_bytes(node.host_interface, "rx")
            qdiscs = shown.get(node.index, {}).get(node.interface, [])
            ends.append((node.index, "sending", _verdict(qdiscs, sent, layout.egress)))
    problems: list[str] = []
    for index, side, counters in sorted(ends, key=lambda end: (end[0], end[1] == "receiving")):
        shaping = layout.egress if side == "sending" else layout.ingress
        if counters is None:
            problems.append(f"node {index}'s link ({side}) is gone")
        elif counters.qdisc_bytes is None:
            found = "/".join(counters.kinds) or "none"
            problems.append(
                f"node {index}'s {side} qdisc is {found}, not {'/'.join(expected_kinds(shaping))}"
            )
        elif counters.interface_tx_bytes > counters.qdisc_bytes + 64 * 1024:
            unshaped = counters.interface_tx_bytes - counters.qdisc_bytes
            problems.append(
                f"node {index}'s {side} link sent {unshaped} bytes past its qdisc (it was replaced)"
            )
    return problems
