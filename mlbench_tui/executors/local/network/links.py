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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mlbench_tui.errors import ExecutorError
from mlbench_tui.executors.local.network.layout import NetworkLayout, Step
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


def run_steps(steps: Sequence[Step], *, force: bool = False) -> list[Failure]:
    """Run ``steps`` in order; without ``force`` stop at the first failure. Returns the failures."""
    failures: list[Failure] = []
    for program, netns, lines in _batches(steps):
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
        if done.returncode == 0:
            continue
        failures += _failed_lines(program, netns, lines, done.stderr)
        if not force:
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


def shaping_held(layout: NetworkLayout) -> list[str]:
    """Why the shaping of ``layout`` was not in place for the whole run (empty: it was).

    Each shaped end's root qdisc was made before its link came up, so it has seen every byte the
    interface sent; a qdisc that is missing, of another kind, or that saw fewer bytes than the
    interface (it was replaced while the run went on) means part of the traffic went unshaped.
    """
    problems: list[str] = []
    ends: list[tuple[str, str | None, Shaping, int]] = [
        (node.interface, node.namespace, layout.egress, node.index) for node in layout.nodes
    ]
    ends += [(node.host_interface, None, layout.ingress, node.index) for node in layout.nodes]
    for interface, netns, shaping, node in ends:
        if shaping.empty:
            continue
        side = "sending" if netns else "receiving"
        counters = read_counters(interface, netns, shaping)
        if counters is None:
            problems.append(f"node {node}'s link ({side}) is gone")
        elif counters.qdisc_bytes is None:
            found = "/".join(counters.kinds) or "none"
            problems.append(f"node {node}'s {side} qdisc is {found}, not {'/'.join(expected_kinds(shaping))}")
        elif counters.interface_tx_bytes > counters.qdisc_bytes + 64 * 1024:
            unshaped = counters.interface_tx_bytes - counters.qdisc_bytes
            problems.append(
                f"node {node}'s {side} link sent {unshaped} bytes past its qdisc (it was replaced)"
            )
    return problems
