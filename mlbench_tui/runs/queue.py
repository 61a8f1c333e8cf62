"""The runs an ``apply`` has planned but not started yet, registered in the store as ``pending``
so ``mlbench status`` and the TUI show a sweep's queue, as k9s and SkyPilot show theirs.

Each queued run carries a label naming the apply that queued it (host and pid): if that apply
ends without starting it (Ctrl-C, a crash, ``kill -9``), the run is ended ``cancelled`` with that
reason, by the apply itself or, when it could not, by the next command that reads the run.
"""

from __future__ import annotations

import os
import socket

from mlbench_tui.lifecycle import QUEUED_BY, queue_owner
from mlbench_tui.server.daemon import alive
from mlbench_tui.store.api_models import RunInfo


def queue_label() -> dict[str, str]:
    """The label of the runs this process queues: ``HOST:PID``."""
    return {QUEUED_BY: f"{socket.gethostname()}:{os.getpid()}"}


def queued_by(run: RunInfo) -> tuple[str, int] | None:
    """The (host, pid) of the apply that queued ``run`` while it waits; None otherwise."""
    return queue_owner(run.state, run.handle, run.labels)


def queued_text(run: RunInfo) -> str | None:
    """``queued by apply (pid 4242)`` for a run waiting in an apply's queue; None otherwise."""
    owner = queued_by(run)
    return None if owner is None else f"queued by apply (pid {owner[1]})"


def orphan_reason(run: RunInfo) -> str | None:
    """Why a queued run will never start: the apply that queued it, on this host, is gone."""
    owner = queued_by(run)
    if owner is None or owner[0] != socket.gethostname() or alive(owner[1]):
        return None
    return f"the apply that queued it (pid {owner[1]}) ended before starting it"
