"""``mlbench results``: the result summaries of a run, a spec or every finished run, as a table
(with repeat scores) or JSON.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlbench_tui.lifecycle import RunState

if TYPE_CHECKING:
    from mlbench_tui.plan import RunPlan
    from mlbench_tui.server.client import MlbenchClient
    from mlbench_tui.store.api_models import RunDetail, RunInfo

from mlbench_tui.runs.lookup import RUN_ID, RunNotFound, resolve_run
from mlbench_tui.runs.reads import fetch_result_inputs


def summary_of(client: MlbenchClient, run: RunDetail) -> dict[str, Any]:
    """The stored result summary, or one computed now from the stored metrics and events."""
    if run.result:
        return {**run.result, "run_id": run.id}
    from mlbench_tui.plan import RunPlan
    from mlbench_tui.results.report import summarize_run

    try:
        plan: RunPlan | None = RunPlan.model_validate(run.plan)
    except ValueError:
        plan = None
    metrics, events = fetch_result_inputs(client, run.id, plan)
    summary = summarize_run(
        run.plan or {"name": run.name}, str(run.state), metrics, events, message=run.error
    )
    summary["run_id"] = run.id
    return summary


def collect_results(client: MlbenchClient, ref: str | None) -> list[dict[str, Any]]:
    """Result summaries of one run (id or name), of a spec (a spec file/directory, or a spec
    name: the latest run of each plan), or of every finished run."""
    if ref is None:
        runs = [r for r in client.list_runs() if RunState(r.state).is_terminal()]
    elif RUN_ID.match(ref):
        return [summary_of(client, resolve_run(client, ref))]
    elif Path(ref).exists():
        from mlbench_tui.runs.plans import load_plans

        wanted = {(p.plan.name, p.plan.spec_hash) for p in load_plans([ref])}
        runs = [r for r in client.list_runs() if (r.name, r.spec_hash) in wanted]
    else:
        runs = client.list_runs(spec_name=ref) or [r for r in client.list_runs() if r.name == ref]
    if ref is not None and not runs:
        raise RunNotFound(f"no runs for {ref!r}", hint="list runs with: mlbench status")
    latest: dict[str, RunInfo] = {}
    for run in sorted(runs, key=lambda r: r.created):
        latest[run.name if ref is not None else run.id] = run
    chosen = sorted(latest.values(), key=lambda r: r.created)
    return [summary_of(client, client.get_run(run.id)) for run in chosen]


def results_output(summaries: Sequence[dict[str, Any]], output: str) -> str:
    from mlbench_tui.results.report import render_results
    from mlbench_tui.results.scoring import score_configs

    if output == "json":
        scores = [score.as_dict() for score in score_configs(summaries)]
        return json.dumps({"runs": list(summaries), "scores": scores}, indent=2, default=str)
    return render_results(summaries) or "no finished runs"
