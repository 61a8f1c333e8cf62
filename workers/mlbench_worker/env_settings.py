"""Environment variables a run's ``env`` may set that mlbench's ranks read, and those that load code.

Standard library only; the names are ``rank_env``'s. The ranks parse these values here
(``faults``, ``context``, ``data.fetch``) and the engine checks a spec's ``env`` with the same
functions, so a value ``validate`` accepts is one the ranks accept. ``CODE_LOADING`` names the
variables that make a program load or run code it would not otherwise (the dynamic linker's,
Python's, the shells', NCCL's and CUDA's plugins, a different ``PATH``); a spec sets them only by
naming them again, and then only the ranks get them (the rank starts again with them before its
imports), never the launchers before them.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from mlbench_worker.rank_env import COLLECTIVE_TIMEOUT_S, DATA_DIR, INJECT_FAULT, THREAD_VARIABLES

DEFAULT_COLLECTIVE_TIMEOUT_S = 1800.0
MIN_COLLECTIVE_TIMEOUT_S = 1.0
MAX_COLLECTIVE_TIMEOUT_S = 7 * 86400.0
MAX_THREADS = 4096

FAULT_MODES = ("raise", "hang", "slow")
FAULT_AT_EXIT = "exit"
_FAULT_KEYS = ("rank", "step", "mode", "factor")
MAX_SLOWDOWN = 100.0


@dataclass(frozen=True)
class Fault:
    """Which rank fails, where (a training step, or ``None``: at exit) and how."""

    rank: int
    step: int | None
    mode: str = "raise"
    factor: float = 1.0
    """How many times as long a slowed rank's compute takes (``mode=slow``)."""


def parse_fault(text: str | None) -> Fault | None:
    """The fault ``MLBENCH_INJECT_FAULT=text`` asks for (``rank=1,step=3``, ``mode=hang``,
    ``mode=slow,factor=2``, ``step=exit``); None when unset. ValueError names what is wrong."""
    if not text:
        return None
    usage = "rank=R,step=S (S an integer or 'exit'), mode=raise|hang|slow, factor=F (with mode=slow)"
    fields: dict[str, str] = {}
    for part in text.split(","):
        key, eq, value = part.strip().partition("=")
        if not eq or key not in _FAULT_KEYS:
            raise ValueError(f"{INJECT_FAULT}={text!r}: {part.strip()!r} is not one of {usage}")
        if key in fields:
            raise ValueError(f"{INJECT_FAULT}={text!r}: {key} is given twice")
        fields[key] = value.strip()
    mode = fields.get("mode", "raise")
    if mode not in FAULT_MODES:
        raise ValueError(f"{INJECT_FAULT}={text!r}: mode must be 'raise', 'hang' or 'slow', got {mode!r}")
    step_text = fields.get("step", "0")
    try:
        rank = int(fields.get("rank", "0"))
        step = None if step_text == FAULT_AT_EXIT else int(step_text)
        factor = float(fields.get("factor", "2" if mode == "slow" else "1"))
    except ValueError:
        raise ValueError(
            f"{INJECT_FAULT}={text!r}: expected 'rank=R,step=S' with integers (or step=exit) and a number "
            "as factor"
        ) from None
    if rank < 0 or (step is not None and step < 0):
        raise ValueError(f"{INJECT_FAULT}={text!r}: rank and step count from 0")
    if "factor" in fields and mode != "slow":
        raise ValueError(f"{INJECT_FAULT}={text!r}: factor is for mode=slow only")
    if mode == "slow" and not (math.isfinite(factor) and 1.0 < factor <= MAX_SLOWDOWN):
        raise ValueError(
            f"{INJECT_FAULT}={text!r}: a slow rank's factor must be above 1 and at most {MAX_SLOWDOWN:g}"
        )
    return Fault(rank, step, mode, factor)


def parse_collective_timeout(text: str | None) -> float:
    """Seconds a collective may wait (``MLBENCH_COLLECTIVE_TIMEOUT_S``); the default when unset."""
    if text is None or not text.strip():
        return DEFAULT_COLLECTIVE_TIMEOUT_S
    try:
        seconds = float(text)
    except ValueError:
        raise ValueError(f"{COLLECTIVE_TIMEOUT_S}={text!r} is not a number of seconds") from None
    if not (math.isfinite(seconds) and MIN_COLLECTIVE_TIMEOUT_S <= seconds <= MAX_COLLECTIVE_TIMEOUT_S):
        raise ValueError(
            f"{COLLECTIVE_TIMEOUT_S}={text!r}: a collective timeout is between "
            f"{MIN_COLLECTIVE_TIMEOUT_S:g} s and {MAX_COLLECTIVE_TIMEOUT_S:g} s (7 days)"
        )
    return seconds


def parse_data_dir(text: str | None) -> str | None:
    """The dataset cache directory (``MLBENCH_DATA_DIR``): an absolute path, since a rank runs in
    its run's directory; None when unset."""
    if not text:
        return None
    if not os.path.isabs(os.path.expanduser(text)):
        raise ValueError(
            f"{DATA_DIR}={text!r} is relative: ranks run in their run directory, give an absolute path"
        )
    return text


def parse_thread_count(text: str | None) -> int | None:
    """A thread count as OpenMP and the BLAS libraries read it (``OMP_NUM_THREADS``): a positive
    integer; None when unset."""
    if text is None:
        return None
    try:
        count = int(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is not a thread count (a positive integer)") from None
    if not 1 <= count <= MAX_THREADS:
        raise ValueError(f"{text!r} is not a thread count between 1 and {MAX_THREADS}")
    return count


RANK_SETTINGS: Mapping[str, Callable[[str], object]] = MappingProxyType(
    {
        INJECT_FAULT: parse_fault,
        COLLECTIVE_TIMEOUT_S: parse_collective_timeout,
        DATA_DIR: parse_data_dir,
        **dict.fromkeys(THREAD_VARIABLES, parse_thread_count),
    }
)
"""The variables a run's env may set that its ranks read, each with the parser they read it with."""

CODE_LOADING: Mapping[str, str] = MappingProxyType(
    {
        "LD_PRELOAD": "the dynamic linker loads these libraries into every program first",
        "LD_LIBRARY_PATH": "the dynamic linker takes every program's libraries from there first",
        "LD_AUDIT": "the dynamic linker loads these auditing libraries into every program",
        "GCONV_PATH": "the C library loads character-set converters from there",
        "PATH": "every program and launcher is looked up there",
        "PYTHONPATH": "Python imports modules from there first",
        "PYTHONHOME": "Python loads its standard library from there",
        "PYTHONSTARTUP": "Python runs this file when it starts interactively",
        "PYTHONUSERBASE": "Python imports modules (and runs .pth files) from the user site there",
        "PYTHONPYCACHEPREFIX": "Python loads compiled modules from there",
        "PYTHONBREAKPOINT": "Python imports and calls this on breakpoint()",
        "PYTHONWARNINGS": "Python imports the modules its warning filters name",
        "BASH_ENV": "bash runs this file before every script",
        "ENV": "sh runs this file when it starts",
        "SHELLOPTS": "bash takes its options from it (xtrace runs PS4's commands)",
        "BASHOPTS": "bash takes its options from it",
        "PS4": "bash runs the commands in it when tracing",
        "NCCL_NET_PLUGIN": "NCCL loads this network plugin library",
        "NCCL_TUNER_PLUGIN": "NCCL loads this tuner plugin library",
        "NCCL_PROFILER_PLUGIN": "NCCL loads this profiler plugin library",
        "CUDA_INJECTION64_PATH": "CUDA loads this library into every process that uses it",
        "OMP_TOOL_LIBRARIES": "the OpenMP runtime loads these tool libraries",
        "OMPI_MCA_mca_base_component_path": "Open MPI loads its components from there",
        "PMIX_MCA_mca_base_component_path": "PMIx loads its components from there",
        "OMPI_MCA_plm_rsh_agent": "Open MPI starts remote ranks with this command",
    }
)
"""Variables that make a program load or run code it would not otherwise, and what they do."""
