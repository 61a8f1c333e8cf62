"""Deliberate failure of one rank, for exercising failure handling end to end (chaos testing).

``MLBENCH_INJECT_FAULT="rank=1,step=3"`` makes rank 1 raise ``InjectedFault`` before training
step 3 (``step=0``: before the first step; tasks without steps check step 0 at their start).
``mode=hang`` makes it stop there instead (it sleeps until killed: a stuck rank, for time
limits). Unset, it costs one dictionary lookup at startup.
"""

from __future__ import annotations

import os
import time


class InjectedFault(RuntimeError):
    """Raised on purpose by ``MLBENCH_INJECT_FAULT``."""


def _parse(spec: str | None) -> tuple[int, int, str] | None:
    if not spec:
        return None
    fields = dict(part.split("=", 1) for part in spec.split(",") if "=" in part)
    mode = fields.get("mode", "raise")
    if mode not in ("raise", "hang"):
        raise ValueError(f"MLBENCH_INJECT_FAULT={spec!r}: mode must be 'raise' or 'hang'")
    try:
        return int(fields.get("rank", "0")), int(fields.get("step", "0")), mode
    except ValueError:
        raise ValueError(f"MLBENCH_INJECT_FAULT={spec!r}: expected 'rank=R,step=S' with integers") from None


_FAULT = _parse(os.environ.get("MLBENCH_INJECT_FAULT"))


def maybe_inject_fault(rank: int, step: int) -> None:
    """Raise ``InjectedFault`` (or hang) if a fault was requested for this rank at this step."""
    if _FAULT is None or (rank, step) != _FAULT[:2]:
        return
    if _FAULT[2] == "hang":
        print(f"[rank {rank}] hanging on purpose (MLBENCH_INJECT_FAULT) at step {step}", flush=True)
        while True:
            time.sleep(3600)
    raise InjectedFault(f"fault injected by MLBENCH_INJECT_FAULT on rank {rank} at step {step}")
