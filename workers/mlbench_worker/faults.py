"""Deliberate failure of one rank, for exercising failure handling end to end (chaos testing).

``MLBENCH_INJECT_FAULT="rank=1,step=3"`` makes rank 1 raise ``InjectedFault`` before training
step 3 (``step=0``: before the first step; tasks without steps check step 0 at their start).
``mode=hang`` makes it stop there instead (it sleeps until killed: a stuck rank, for time
limits). ``step=exit`` acts after the rank has reported how it stopped and closed its process
group: a process that never exits although its rank's work is done (a teardown that hangs).
``mode=slow,factor=2`` makes the rank's compute phases take about twice as long from the start
(it sleeps after each for what it took times ``factor - 1``): a straggler, for the rule that
names the rank the others wait for. Unset, it costs one dictionary lookup at startup. The value is
parsed by ``mlbench_worker.env_settings``, which the spec's checks use too.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from mlbench_worker import rank_env
from mlbench_worker.env_settings import Fault, parse_fault

__all__ = ["Fault", "InjectedFault", "parse_fault"]  # Fault and its parser are the contract's


class InjectedFault(RuntimeError):
    """Raised on purpose by ``MLBENCH_INJECT_FAULT``."""


@functools.cache
def _fault() -> Fault | None:
    """This process's fault, read from its environment at first use, not at import (a rank
    forked by a warm start was imported by a process with another environment)."""
    return parse_fault(os.environ.get(rank_env.INJECT_FAULT))


def _act(fault: Fault, where: str) -> None:
    if fault.mode == "hang":
        print(f"[rank {fault.rank}] hanging on purpose (MLBENCH_INJECT_FAULT) {where}", flush=True)
        while True:
            time.sleep(3600)
    raise InjectedFault(f"fault injected by MLBENCH_INJECT_FAULT on rank {fault.rank} {where}")


def maybe_inject_fault(rank: int, step: int) -> None:
    """Raise ``InjectedFault`` (or hang) if a fault was requested for this rank at this step."""
    fault = _fault()
    if fault is not None and fault.mode != "slow" and fault.rank == rank and fault.step == step:
        _act(fault, f"at step {step}")


def maybe_inject_fault_at_exit(rank: int) -> None:
    """Raise (or hang) if a fault was requested for this rank once it has reported its stop."""
    fault = _fault()
    if fault is not None and fault.mode != "slow" and fault.rank == rank and fault.step is None:
        _act(fault, "after its stop was reported")


def slowdown_for(rank: int) -> float:
    """How many times as long this rank's compute is to take (1.0: not slowed)."""
    fault = _fault()
    if fault is not None and fault.mode == "slow" and fault.rank == rank:
        return fault.factor
    return 1.0


S = TypeVar("S")


def slowed(
    phases: Sequence[tuple[str, Callable[[S], Any]]],
    factor: float,
    names: frozenset[str],
    sync: Callable[[], Any] | None = None,
) -> list[tuple[str, Callable[[S], Any]]]:
    """``phases`` with each one named in ``names`` followed by a sleep of what it took times
    ``factor - 1`` (``sync`` waits for queued device work first, so the time is the device's)."""
    extra = factor - 1.0

    def slow(run: Callable[[S], Any]) -> Callable[[S], Any]:
        def phase(step: S) -> None:
            started = time.perf_counter()
            run(step)
            if sync is not None:
                sync()
            time.sleep(extra * (time.perf_counter() - started))

        return phase

    return [(name, slow(run) if name in names else run) for name, run in phases]
