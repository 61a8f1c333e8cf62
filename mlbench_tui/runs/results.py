"""``mlbench results``: the results of a run, a spec or every finished run, as a table (with
repeat scores) or JSON. Results are the ones the server stored when each run ended.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from mlbench_tui.results.model import RunResult
from mlbench_tui.results.scoring import score_configs
from mlbench_tui.results.table import render_results
from mlbench_tui.runs.lookup import RUN_ID, RunNotFound, resolve_run

if TYPE_CHECKING:
    from mlbench_tui.server.client import MlbenchClient
    from mlbench_tui.store.api_models import RunInfo


def collect_results(client: MlbenchClient, ref: str | None) -> list[RunResult]:
    """Results of one run (id or name), of a spec (a spec file/directory, or a spec name: the
    latest run of each plan), or of every finished run."""
    if ref is None:
        runs = [r for r in client.list_runs() if r.state.is_terminal()]
    elif RUN_ID.match(ref):
        return [resolve_run(client, ref).known_result()]
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
    return [run.known_result() for run in sorted(latest.values(), key=lambda r: r.created)]


def results_output(results: Sequence[RunResult], output: str) -> str:
    """The results table, or with ``output == "json"`` every result and the repeat scores."""
    if output == "json":
        scores = [score.as_dict() for score in score_configs(results)]
        runs = [result.model_dump(mode="json") for result in results]
        return json.dumps({"runs": runs, "scores": scores}, indent=2, default=str)
    return render_results(results) or "no finished runs"
