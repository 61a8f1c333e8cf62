"""A run's result, computed by the server once, when the run reaches its final state.

The server holds the run's plan, metrics and events, so a client that ends a run (``apply``,
``cancel``, a reconcile) sends only what it saw (the executor's final state and message) and
what only it knows (the launching host's fingerprint). Here that state is settled against what
the ranks reported, the ``RunResult`` is computed with speedup against the spec's 1-worker runs
in the store, and both are written with the state update.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection

from mlbench_tui.errors import NotFound
from mlbench_tui.lifecycle import LaunchMilestones, NetworkCheck, RunState
from mlbench_tui.results import provenance
from mlbench_tui.results.events import EventRecord
from mlbench_tui.results.model import RunResult
from mlbench_tui.results.scoring import olympic_mean, reached_time, speedup
from mlbench_tui.results.summary import needed_metrics, settle_state, summarize_run
from mlbench_tui.server.paging import all_events, all_metrics
from mlbench_tui.store import queries
from mlbench_tui.store.api_models import MAX_PAGE, RunDetail, RunInfo, RunUpdate

if TYPE_CHECKING:
    from mlbench_tui.store.store import Store


def ends_run(update: RunUpdate) -> bool:
    """Whether ``update`` ends a run without bringing a result of its own: a final state, or
    ``unknown`` (it ended, its executor cannot tell how), which is settled here."""
    if update.state is None or "result" in update.model_fields_set:
        return False
    return update.state.is_terminal() or update.state is RunState.UNKNOWN


def with_result(
    store: Store, conn: Connection, run_id: str, update: RunUpdate, *, again: bool = False
) -> RunUpdate:
    """``update`` with the run's settled final state, its error and its computed result; as it is
    when the run already ended with a result (a result is computed once), unless ``again``."""
    run = queries.get_run(conn, run_id)
    if run is None:
        raise NotFound(f"run {run_id} not found")
    assert update.state is not None
    if run.result is not None and run.state.is_terminal() and not again:
        return update
    events = all_events(lambda since: queries.events(conn, run_id, since=since, limit=MAX_PAGE))
    plan = run.stored_plan()
    state, message = settle_state(update.state, update.error, events, plan.workers if plan else run.workers)
    milestones = update.launch if update.launch is not None else run.launch
    result = _computed(store, conn, run, state, message, events, update.host, milestones, update.network)
    fields = update.model_dump(exclude_unset=True)
    fields.update(state=state, result=result)
    fields["error"] = message if state is not RunState.SUCCEEDED else None
    return RunUpdate.model_validate(fields)


def _computed(
    store: Store,
    conn: Connection,
    run: RunDetail,
    state: RunState,
    message: str | None,
    events: list[EventRecord],
    host: dict[str, Any] | None,
    milestones: LaunchMilestones | None,
    network: NetworkCheck | None,
) -> RunResult:
    """The result of ``run``, ended in ``state``, from its stored metrics and ``events``."""
    plan = run.stored_plan()
    if plan is None:  # a run registered without a (valid) plan: its identity only
        result = run.known_result().model_copy(
            update={"state": state, "message": message, "computed_by": provenance.current()}
        )
    else:
        names = needed_metrics((n.name for n in store.metric_names(run.id)), plan.goal)
        metrics = all_metrics(
            lambda batch, since: queries.metrics(
                conn, run.id, names=batch or (), since=since, limit=MAX_PAGE
            ),
            names,
        )
        result = summarize_run(
            plan,
            state,
            metrics,
            events,
            host=host,
            message=message,
            launched_at=max(run.created.timestamp(), (milestones.dequeued if milestones else None) or 0.0),
            milestones=milestones,
            network=network,
        )
    result.run_id = run.id
    _add_speedup(conn, run, result)
    return result


def stale(run: RunInfo) -> bool:
    """Whether ``run`` ended with a result that other rules than this version's computed."""
    return run.state.is_terminal() and run.result is not None and not provenance.is_current(run.result)


def recomputed(store: Store, conn: Connection, run_id: str) -> RunUpdate | None:
    """The update that replaces ``run_id``'s stored result with one computed now from its stored
    metrics and events, by this version's rules (its recorded state and error kept: they are what
    happened); None for a run that has not ended with a result."""
    run = queries.get_run(conn, run_id)
    if run is None:
        raise NotFound(f"run {run_id} not found")
    if run.result is None or not run.state.is_terminal():
        return None
    before = run.result
    events = all_events(lambda since: queries.events(conn, run_id, since=since, limit=MAX_PAGE))
    result = _computed(
        store, conn, run, run.state, before.message, events, before.fingerprint, run.launch, _check(before)
    )
    result.computed_by = provenance.current(recomputed_from=provenance.stored_rules(before))
    return RunUpdate(result=result)


def _check(result: RunResult) -> NetworkCheck | None:
    """What the target did to a run's links, as its stored result recorded it (a recompute has
    no executor to ask again)."""
    figures = result.network
    if figures is None or figures.method is None:
        return None
    return NetworkCheck(
        method=figures.method,
        nodes=figures.nodes,
        held=figures.held,
        problems=tuple(figures.problems),
        setup_s=figures.setup_s,
        teardown_s=figures.teardown_s,
    )


def _add_speedup(conn: Connection, run: RunDetail, result: RunResult) -> None:
    """Speedup and efficiency against the succeeded 1-worker runs of the same spec, framework,
    backend and variant (precision, CUDA graphs) that reached the goal (olympic mean over them)."""
    peers = [result] if result.workers == 1 else []
    succeeded = queries.list_runs(conn, state=RunState.SUCCEEDED.value, spec_name=run.spec_name, limit=10_000)
    for other in succeeded:
        if other.id == run.id or other.workers != 1 or other.result is None:
            continue
        mine = other.result
        if (other.spec_hash, other.backend, mine.framework, mine.variant) == (
            run.spec_hash,
            run.backend,
            result.framework,
            result.variant,
        ):
            peers.append(mine)
    times = [t for t in map(reached_time, peers) if t is not None]
    if not times:
        return
    baseline = olympic_mean(times)
    result.speedup, result.efficiency = speedup(baseline, reached_time(result), result.workers)
    result.one_worker_time_s = baseline


def resettled(store: Store, conn: Connection, run_id: str) -> RunUpdate | None:
    """The update that settles an ended run again and recomputes its result from its record as
    it is now (batches imported from its spool after it ended); None for a run still going."""
    run = queries.get_run(conn, run_id)
    if run is None or not run.state.is_terminal():
        return None
    host = run.result.fingerprint if run.result is not None else None
    update = RunUpdate(state=run.state, error=run.error, host=host)
    return with_result(store, conn, run_id, update, again=True)
