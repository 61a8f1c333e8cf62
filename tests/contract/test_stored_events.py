"""Stores written by earlier versions still read: every stored event parses into the wire's payload
for its kind, and a run's result computed again from its stored events equals the stored one.

Copies of the fixture stores (written by earlier workers and engines: the report and TUI stores,
and the two recorded on an H200) are served by a real embedded server; events and metrics are
read back through its HTTP API as the engine reads them. A stored state may differ only where a
later rule settles it (a run whose ranks all stopped normally succeeded).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlbench_worker import wire

from mlbench_tui.lifecycle import RunState
from mlbench_tui.plan import RunPlan
from mlbench_tui.results import events as ev
from mlbench_tui.results.summary import settle_state, summarize_run
from mlbench_tui.server.client import MlbenchClient
from mlbench_tui.server.paging import all_events, all_metrics
from mlbench_tui.server.serve import EmbeddedServer

pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
H200 = FIXTURES / "stores" / "h200-2026-11-27"
STORES = {
    "report": FIXTURES / "report" / "store.sqlite3",
    "tui": FIXTURES / "tui" / "store.sqlite3",
    "h200-suite": H200 / "suite" / "mlbench.db",
    "h200-holdout": H200 / "holdout" / "mlbench.db",
}
SAME = ("reached", "epochs_to_goal", "steps_to_goal", "stop_reason", "failures")
CLOSE = ("time_to_accuracy_s", "validation_time_s", "wall_time_s", "graph_capture_s", "best_value")


@pytest.fixture(params=list(STORES))
def client(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MlbenchClient]:
    copy = tmp_path / "store.sqlite3"
    shutil.copyfile(STORES[request.param], copy)
    with EmbeddedServer(copy, record=False) as server:
        yield MlbenchClient(server.url, server.auth.admin_token)


def test_stored_events_parse_and_give_the_stored_results_again(client: MlbenchClient) -> None:
    finished = [r for r in client.list_runs(limit=500) if r.result is not None and r.state.is_terminal()]
    assert finished
    for run in finished:
        events = all_events(lambda since, run_id=run.id: client.events(run_id, since=since))
        for record in events:
            parsed = ev.parse(record)
            assert parsed is None or type(parsed) is wire.EVENTS[record.kind]
        assert all(ev.parse(r) is not None for r in events if r.kind in wire.EVENTS)
        metrics = all_metrics(
            lambda names, since, run_id=run.id: client.metrics(run_id, names=names, since=since)
        )
        stored = run.result
        assert stored is not None
        plan = RunPlan.model_validate(client.get_run(run.id).plan)
        state, message = settle_state(RunState(run.state), stored.message, events, plan.workers)
        if state is not stored.state:  # only the later rule: a run whose ranks all stopped normally succeeded
            stops = ev.last_stops(events).values()
            assert state is RunState.SUCCEEDED and len(stops) == plan.workers, run.name
            assert all(stop.payload.stopped_normally for stop in stops), run.name
        else:
            assert message == stored.message, run.name
        again = summarize_run(plan, state, metrics, events, host=stored.fingerprint, message=message)
        assert again.fingerprint == stored.fingerprint, run.name
        for name in SAME:
            assert getattr(again, name) == getattr(stored, name), (run.name, name)
        for name in CLOSE:
            assert getattr(again, name) == pytest.approx(getattr(stored, name)), (run.name, name)
