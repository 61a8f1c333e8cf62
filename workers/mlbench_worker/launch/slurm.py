"""Rendezvous of a rank launched by ``srun`` (the Slurm target), from Slurm's environment.

Inside a job step Slurm sets ``SLURM_PROCID`` (the global rank), ``SLURM_STEP_NUM_TASKS`` (the
world), ``SLURM_LOCALID`` (the rank on its node) and ``SLURM_STEP_NODELIST`` (the step's nodes, in
Slurm's hostlist syntax such as ``gpu[01-04,07]``). The step runs with ``--distribution=block``,
so rank 0 is on the first node of that list, which becomes the master; its port is derived from
the job id, so every rank computes the same one with no extra exchange and two jobs sharing a
node do not collide. ``MASTER_ADDR``/``MASTER_PORT`` in the environment win when set.
"""

from __future__ import annotations

import itertools
import re
import socket
from collections.abc import Mapping

from mlbench_worker import rank_env
from mlbench_worker.config import ConfigError
from mlbench_worker.launch.rendezvous import Rendezvous

PORT_BASE = 10000  # ports 10000..29999: below Linux's ephemeral range (32768+)
PORT_SPAN = 20000
_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def _top_level_split(text: str) -> list[str]:
    """Split on commas outside brackets: ``a[1,2],b`` -> ``['a[1,2]', 'b']``."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _bracket(body: str, text: str) -> list[str]:
    """``1-3,7`` -> ``['1', '2', '3', '7']`` keeping zero padding (``01-03`` -> ``01 02 03``)."""
    values: list[str] = []
    for item in body.split(","):
        match = _RANGE.fullmatch(item.strip())
        if match is None:
            raise ConfigError(f"not a Slurm hostlist: {text!r} (bad range {item!r})")
        low, high = match[1], match[2] or match[1]
        if int(high) < int(low):
            raise ConfigError(f"not a Slurm hostlist: {text!r} (range {item!r} goes down)")
        width = len(low) if low.startswith("0") else 0
        values.extend(str(n).zfill(width) for n in range(int(low), int(high) + 1))
    return values


def expand_hostlist(text: str) -> list[str]:
    """Every host of a Slurm hostlist, in order: ``n[1-2,5],login`` -> ``n1 n2 n5 login``;
    several bracket groups multiply (``r[1-2]n[1-2]`` -> ``r1n1 r1n2 r2n1 r2n2``)."""
    hosts: list[str] = []
    for item in _top_level_split(text):
        pieces: list[list[str]] = []
        rest = item
        while "[" in rest:
            head, _, tail = rest.partition("[")
            body, closed, rest = tail.partition("]")
            if not closed:
                raise ConfigError(f"not a Slurm hostlist: {text!r} (unclosed '[')")
            pieces += [[head], _bracket(body, text)]
        if "]" in rest:
            raise ConfigError(f"not a Slurm hostlist: {text!r} (unmatched ']')")
        pieces.append([rest])
        hosts.extend("".join(combo) for combo in itertools.product(*pieces))
    return hosts


def master_port(job_id: int) -> int:
    """The rendezvous port of a job: the same on every rank, different for neighbouring jobs."""
    return PORT_BASE + job_id % PORT_SPAN


def master_address(first_node: str, env: Mapping[str, str]) -> str:
    """The first node's name when it resolves; otherwise the address of the node that launched
    the step (``SLURM_LAUNCH_NODE_IPADDR``): the batch script runs ``srun`` on the allocation's
    first node, so that is the same node (clusters whose node names are Slurm's own, not host
    names, e.g. several slurmd on one host with ``NodeAddr``)."""
    try:
        socket.getaddrinfo(first_node, None)
    except (OSError, UnicodeError):
        launch = env.get(rank_env.SLURM_LAUNCH_NODE_IPADDR)
        if launch:
            return launch
        raise ConfigError(
            f"the first node of the job, {first_node!r}, does not resolve to an address and Slurm "
            "did not set SLURM_LAUNCH_NODE_IPADDR"
        ) from None
    return first_node


def _int(env: Mapping[str, str], name: str) -> int:
    try:
        return int(env[name])
    except (KeyError, ValueError):
        raise ConfigError(f"Slurm set {name}={env.get(name)!r}, expected an integer") from None


def slurm_rendezvous(env: Mapping[str, str]) -> Rendezvous | None:
    """This rank's rendezvous inside an ``srun`` step; None outside one (a batch script or
    ``salloc`` shell sets SLURM_PROCID but no step id)."""
    if rank_env.SLURM_PROCID not in env or rank_env.SLURM_STEP_ID not in env:
        return None
    rank = _int(env, rank_env.SLURM_PROCID)
    world = _int(
        env, rank_env.SLURM_STEP_NUM_TASKS if rank_env.SLURM_STEP_NUM_TASKS in env else rank_env.SLURM_NTASKS
    )
    local = _int(env, rank_env.SLURM_LOCALID) if rank_env.SLURM_LOCALID in env else 0
    addr = env.get(rank_env.MASTER_ADDR)
    if not addr:
        nodes = expand_hostlist(
            env.get(rank_env.SLURM_STEP_NODELIST) or env.get(rank_env.SLURM_JOB_NODELIST) or ""
        )
        if not nodes:
            raise ConfigError("Slurm set no SLURM_STEP_NODELIST or SLURM_JOB_NODELIST for this step")
        addr = master_address(nodes[0], env)
    port = (
        _int(env, rank_env.MASTER_PORT)
        if env.get(rank_env.MASTER_PORT)
        else master_port(_int(env, rank_env.SLURM_JOB_ID))
    )
    return Rendezvous(rank, world, local, addr, port, "slurm", local_world_size(env))


def local_world_size(env: Mapping[str, str]) -> int:
    """Ranks of this step on this node, from ``SLURM_STEP_TASKS_PER_NODE`` (``2(x3),1``: two on
    each of the first three nodes, one on the fourth) at this node's index ``SLURM_NODEID``."""
    text = env.get(rank_env.SLURM_STEP_TASKS_PER_NODE) or env.get(rank_env.SLURM_TASKS_PER_NODE) or ""
    counts: list[int] = []
    for part in filter(None, text.split(",")):
        count, _, repeat = part.partition("(x")
        try:
            counts.extend([int(count)] * (int(repeat.rstrip(")")) if repeat else 1))
        except ValueError:
            raise ConfigError(f"Slurm set a tasks-per-node list {text!r} that is not N or N(xM)") from None
    node = _int(env, rank_env.SLURM_NODEID) if rank_env.SLURM_NODEID in env else 0
    return counts[node] if node < len(counts) else 1
