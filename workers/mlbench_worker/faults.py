"""Deliberate failure of one rank, for exercising failure handling end to end (chaos testing).

``MLBENCH_INJECT_FAULT="rank=1,step=3"`` makes rank 1 raise ``InjectedFault`` before training
step 3 (``step=0``: before the first step; tasks without steps check step 0 at their start).
Unset, it costs one dictionary lookup at startup.
"""

from __future__ import annotations

import os


class InjectedFault(RuntimeError):
    """Raised on purpose by ``MLBENCH_INJECT_FAULT``."""


def _parse(spec: str | None) -> tuple[int, int] | None:
    if not spec:
        return None
    fields = dict(part.split("=", 1) for part in spec.split(",") if "=" in part)
    try:
        return int(fields.get("rank", "0")), int(fields.get("step", "0"))
    except ValueError:
        raise ValueError(f"MLBENCH_INJECT_FAULT={spec!r}: expected 'rank=R,step=S' with integers") from None


_FAULT = _parse(os.environ.get("MLBENCH_INJECT_FAULT"))


def maybe_inject_fault(rank: int, step: int) -> None:
    """Raise ``InjectedFault`` if a fault was requested for this rank at this step."""
    if _FAULT is not None and (rank, step) == _FAULT:
        raise InjectedFault(f"fault injected by MLBENCH_INJECT_FAULT on rank {rank} at step {step}")
