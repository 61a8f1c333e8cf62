"""Runs as their owners leave them: which runs something still drives, and runs whose ``apply``
ended before it launched them.

A run row exists only with a live launch or a recorded reason. A run still ``pending`` without a
handle whose owner (the ``apply`` that created it, ``mlbench_tui.owners``) is gone on this
machine was never launched and never will be: the server records it failed, saying so. Only runs
whose owner lives keep a detached server from exiting when idle; a run whose owner is gone but
whose ranks still run keeps it up through their requests, and ``mlbench status`` settles it from
its executor once they stopped.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from functools import partial

from sqlalchemy import Connection

from mlbench_tui.errors import MlbenchError
from mlbench_tui.lifecycle import QUEUED_BY, RunState
from mlbench_tui.owners import RunOwner
from mlbench_tui.server.results import with_result
from mlbench_tui.store.api_models import RunUpdate
from mlbench_tui.store.store import Store

log = logging.getLogger("mlbench.server")

_GOING = "SELECT id, handle, owner, labels FROM runs WHERE state NOT IN ('succeeded', 'failed', 'cancelled')"


def _going(conn: Connection) -> list[tuple[str, str | None, RunOwner | None, bool]]:
    """(id, handle, owner, queued) of every run that has not ended; queued: it waits in an
    apply's queue (``runs.queue``)."""
    rows = conn.exec_driver_sql(_GOING).fetchall()
    return [
        (run_id, handle, _owner(owner), QUEUED_BY in json.loads(labels))
        for run_id, handle, owner, labels in rows
    ]


def _owner(text: str | None) -> RunOwner | None:
    return RunOwner.model_validate_json(text) if text else None


def owners_alive(store: Store) -> bool:
    """Whether some run that has not ended has an owner that still runs."""
    return any(owner is not None and owner.alive() for _, _, owner, _ in store.read(_going))


def end_stranded(store: Store) -> list[str]:
    """Record failed every run never launched whose owner is gone from this machine (cancelled,
    for a run that waited in its queue: it did not fail, it was never started); returns their
    ids."""
    if store.writer is None:
        return []
    ended = []
    for run_id, handle, owner, queued in store.read(_going):
        if handle or owner is None or not owner.local() or owner.alive():
            continue
        update = RunUpdate(
            state=RunState.CANCELLED if queued else RunState.FAILED,
            finished=datetime.now(UTC),
            error=f"the apply that queued it (pid {owner.pid}) ended before starting it"
            if queued
            else f"its {owner} ended before launching it",
        )
        try:
            store.update_run(run_id, store.read(partial(with_result, store, run_id=run_id, update=update)))
        except MlbenchError as exc:
            log.warning("could not record run %s as failed: %s", run_id, exc.message)
            continue
        ended.append(run_id)
    return ended
