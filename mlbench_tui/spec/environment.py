"""What a spec's ``env`` may hold: each variable checked at its own line.

Names mlbench, the launchers or the ranks' rendezvous set are refused; the variables the ranks read
(fault injection, the collective timeout, thread counts) are parsed by the ranks' own parsers
(``mlbench_worker.env_settings``); a variable that loads code into every process started with it
(``LD_PRELOAD``, ``PYTHONPATH``, ``PATH``, ...) needs the spec to name it again in
``env_loading_code``, and then reaches the ranks only. Values fit what ``execve`` takes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from mlbench_worker import env_settings as es
from mlbench_worker import rank_env

from mlbench_tui.spec.diagnostics import Loc, PolicyIssue, did_you_mean
from mlbench_tui.spec.targets import SlurmTarget

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_ENV_STRING_BYTES = 128 * 1024  # Linux's MAX_ARG_STRLEN: execve refuses a longer NAME=value

RESERVED_ENV: frozenset[str] = (
    rank_env.RESERVED
    | rank_env.RUN_VARIABLES
    | {
        rank_env.PET_NODE_RANK,
        rank_env.PET_NNODES,
        rank_env.PET_NPROC_PER_NODE,
        rank_env.PET_MASTER_ADDR,
        rank_env.PET_MASTER_PORT,
        rank_env.OMPI_RANK,
        rank_env.OMPI_SIZE,
        rank_env.OMPI_LOCAL_RANK,
        rank_env.OMPI_LOCAL_SIZE,
        rank_env.PMI_RANK,
        rank_env.PMI_SIZE,
        rank_env.PMIX_RANK,
        rank_env.MPI_LOCAL_RANK,
        rank_env.MPI_LOCAL_SIZE,
        rank_env.TF_CONFIG,
        rank_env.TF_WORKERS,
        rank_env.RANK_ENV_APPLIED,
        rank_env.SLURMD_NODENAME,
    }
)
"""Variables mlbench, the launchers or the ranks' rendezvous set for every rank (``rank_env``'s
``RESERVED``, what a run sets per rank, and the rendezvous the worker reads)."""

RESERVED_PREFIXES: dict[str, str] = {
    "SLURM_": "Slurm sets them for its tasks, and srun and the ranks' rendezvous read them",
    "SBATCH_": "sbatch reads them as options mlbench sets",
    "SRUN_": "srun reads them as options mlbench sets",
    "SALLOC_": "Slurm reads them as options mlbench sets",
}
ENGINE_ONLY: dict[str, str] = {
    "MLBENCH_HOME": "mlbench's state directory",
    "MLBENCH_DB": "the metrics store",
    "MLBENCH_WARM_START": "warm starts of local ranks",
    "MLBENCH_SERVER_IDLE_TIMEOUT": "the metrics server's idle timeout",
}
"""``MLBENCH_`` variables mlbench reads from its own environment, never from a run's."""


def env_issues(
    env: dict[str, str], loading_code: list[str], workers: list[int], target: object
) -> Iterator[PolicyIssue]:
    """Every problem of ``spec.env`` and ``spec.env_loading_code``, one per variable."""
    for name, value in env.items():
        yield from _name_issues(name, loading_code, target)
        yield from _value_issues(name, value, workers)
    seen: set[str] = set()
    for index, name in enumerate(loading_code):
        loc: Loc = ("spec", "env_loading_code", index)
        if name in seen:
            yield PolicyIssue(loc, f"{name} is listed twice", "list each variable once")
        elif name not in es.CODE_LOADING:
            yield PolicyIssue(
                loc,
                f"{name} does not load code: only variables that do need listing here",
                "remove it from env_loading_code"
                if name in env
                else did_you_mean(name, sorted(es.CODE_LOADING)),
            )
        elif name not in env:
            yield PolicyIssue(
                loc, f"{name} is not set in spec.env", f"set spec.env.{name}, or remove it here"
            )
        seen.add(name)


def _name_issues(name: str, loading_code: list[str], target: object) -> Iterator[PolicyIssue]:
    loc: Loc = ("spec", "env", name)
    if not ENV_NAME.fullmatch(name):
        yield PolicyIssue(
            loc,
            f"invalid environment variable name {name!r}",
            "use letters, digits and '_', not starting with a digit",
            at_key=True,
        )
    elif name in RESERVED_ENV:
        yield PolicyIssue(
            loc, f"environment variable '{name}' is set by mlbench and cannot be overridden", at_key=True
        )
    elif prefix := next((p for p in RESERVED_PREFIXES if name.startswith(p)), None):
        yield PolicyIssue(
            loc,
            f"environment variable '{name}' cannot be set: {RESERVED_PREFIXES[prefix]}",
            "set the job's layout with spec.workers and spec.target"
            if isinstance(target, SlurmTarget)
            else None,
            at_key=True,
        )
    elif name in ENGINE_ONLY:
        yield PolicyIssue(
            loc,
            f"{name} ({ENGINE_ONLY[name]}) is read by mlbench from its own environment, not by a run's ranks",
            f"export {name} before running mlbench, and remove it here",
            at_key=True,
        )
    elif name.startswith("MLBENCH_") and name not in es.RANK_SETTINGS:
        known = [n for n in es.RANK_SETTINGS if n.startswith("MLBENCH_")]
        yield PolicyIssue(
            loc,
            f"unknown mlbench variable {name}: the ranks read {', '.join(known)}",
            did_you_mean(name, known),
            at_key=True,
        )
    elif name in es.CODE_LOADING and name not in loading_code:
        yield PolicyIssue(
            loc,
            f"{name} loads code into every process started with it ({es.CODE_LOADING[name]}), the "
            "launchers included",
            f"to apply it to the ranks only, name it in spec.env_loading_code: [{name}]; or remove it",
            at_key=True,
        )


def _value_issues(name: str, value: str, workers: list[int]) -> Iterator[PolicyIssue]:
    loc: Loc = ("spec", "env", name)
    if len(f"{name}={value}".encode()) > MAX_ENV_STRING_BYTES:
        yield PolicyIssue(
            loc,
            f"{name} is {len(value.encode())} bytes long: a process cannot start with a variable longer "
            f"than {MAX_ENV_STRING_BYTES // 1024} KiB",
            "put the value in a file the ranks read",
        )
        return
    parser = es.RANK_SETTINGS.get(name)
    if parser is None:
        return
    try:
        parsed = parser(value)
    except ValueError as exc:
        yield PolicyIssue(loc, str(exc))
        return
    if isinstance(parsed, es.Fault):
        short = [size for size in workers if size <= parsed.rank]
        if short:
            sizes = ", ".join(str(size) for size in short)
            yield PolicyIssue(
                loc,
                f"{rank_env.INJECT_FAULT} names rank {parsed.rank}, but the runs of {sizes} worker(s) "
                "have no such rank: the fault would never happen",
                f"name a rank from 0 to {min(workers) - 1}, or sweep world sizes above {parsed.rank}",
            )
