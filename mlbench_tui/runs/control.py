"""``mlbench cancel`` and ``mlbench delete``: stop a run's ranks through its executor, record it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from mlbench_tui.executors import executor_for_handle
from mlbench_tui.formatting import format_age
from mlbench_tui.lifecycle import RunHandle, RunState
from mlbench_tui.runs.lookup import resolve_run
from mlbench_tui.store.api_models import RunUpdate

if TYPE_CHECKING:
    from mlbench_tui.server.client import MlbenchClient
    from mlbench_tui.store.api_models import RunDetail


def cancel_run(client: MlbenchClient, ref: str) -> str:
    """Stop every rank of a run and mark it cancelled; a finished run is left as it is."""
    run = resolve_run(client, ref)
    if run.state.is_terminal():
        return f"{run.name} ({run.id}) already {run.state}; nothing to cancel"
    if run.handle:
        handle = RunHandle.parse(run.handle)
        executor_for_handle(handle).cancel(handle)
    update = RunUpdate(state=RunState.CANCELLED, finished=datetime.now(UTC), error="cancelled by user")
    recorded = client.update_run(run.id, update)
    if not run.handle and recorded.handle:  # its launcher recorded the handle meanwhile
        handle = RunHandle.parse(recorded.handle)
        executor_for_handle(handle).cancel(handle)
    return f"cancelled {run.name} ({run.id})"


def delete_question(run: RunDetail) -> str:
    """What ``mlbench delete`` asks before deleting ``run``."""
    going = "" if run.state.is_terminal() else f" It is {run.state}: its ranks are stopped first."
    return (
        f"Delete run {run.name} ({run.id}, {run.state}, created {format_age(run.created)}) with its "
        f"metrics, logs and events?{going}"
    )


def delete_run(client: MlbenchClient, ref: str) -> str:
    """Cancel a run if it is still going, then delete it from the store and its files."""
    run = resolve_run(client, ref)
    if not run.state.is_terminal() and run.handle:
        handle = RunHandle.parse(run.handle)
        executor_for_handle(handle).cancel(handle)
    client.delete_run(run.id)
    if run.handle:  # the run's working directory (config, rank logs), where its executor keeps one
        handle = RunHandle.parse(run.handle)
        executor_for_handle(handle).remove_files(handle)
    return f"deleted {run.name} ({run.id})"
