"""Finding a run the store knows: by id (``r-0123456789ab``) or by name (the latest run with that
name), and reconciling a run the store still thinks active whose processes are gone.

Every function of this package takes a server client (``ensure_server().client()``), so the
commands work while ``apply`` runs in another shell (they reuse its server) or after it ended.
"""

from __future__ import annotations

import contextlib
import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from mlbench_tui.errors import MlbenchError, NotFound
from mlbench_tui.executors import executor_for_handle
from mlbench_tui.lifecycle import RunHandle, RunState
from mlbench_tui.runs.queue import orphan_reason
from mlbench_tui.store.api_models import RankUpdate

if TYPE_CHECKING:
    from mlbench_tui.server.client import MlbenchClient
    from mlbench_tui.store.api_models import RunDetail, RunInfo
    from mlbench_tui.store.read_api import RunReader


RUN_ID = re.compile(r"^r-[0-9a-f]{12}$")


def resolve_run(client: RunReader, ref: str) -> RunDetail:
    """The run with id ``ref``, or the latest run named ``ref``."""
    if RUN_ID.fullmatch(ref):
        try:
            return client.get_run(ref)
        except NotFound:
            raise NotFound(f"no run {ref}", hint="list runs with: mlbench status") from None
    matches = [run for run in client.list_runs() if run.name == ref]
    if not matches:
        raise NotFound(f"no run named {ref!r}", hint="list runs with: mlbench status")
    latest = max(matches, key=lambda run: run.created)
    return client.get_run(latest.id)


def reconcile(client: MlbenchClient, run: RunInfo) -> RunInfo:
    """Fix a run the store still thinks active whose processes are gone (its ``apply`` died), or
    that waits in the queue of an apply that is gone (``runs.queue``)."""
    orphaned = orphan_reason(run)
    if orphaned is not None:
        return client.update_run(run.id, state=RunState.CANCELLED, finished=datetime.now(UTC), error=orphaned)
    if run.state.is_terminal() or not run.handle:
        return run
    try:
        handle = RunHandle.parse(run.handle)
        executor = executor_for_handle(handle)
        if not executor.reconciles:  # asking it from every shell would be slow (a cluster's API)
            return run
        status = executor.describe(handle)
    except MlbenchError:
        return run
    if status is None or not (status.state.is_terminal() or status.state is RunState.UNKNOWN):
        return run
    # The server settles UNKNOWN (exit status lost) from the ranks' own run_stop events.
    try:
        updated = client.update_run(
            run.id,
            state=status.state,
            finished=datetime.now(UTC),
            error=status.message if status.state != RunState.SUCCEEDED else None,
        )
    except MlbenchError:  # a store that cannot be written now (read-only, full): shown as stored
        return run
    for rank in status.ranks:  # the ranks end as the run did
        with contextlib.suppress(MlbenchError):
            client.update_rank(run.id, rank.rank, RankUpdate(state=updated.state, host=rank.host))
    return updated
