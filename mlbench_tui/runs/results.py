"""``mlbench results``: the results of a run, a spec or every finished run, as a table (with
repeat scores, and the all-reduce curves of 0a runs per message size) or JSON. Results are the
ones the server stored when each run ended; ``mlbench report`` draws the same runs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from mlbench_tui.results.allreduce import PREFIX as ALLREDUCE_PREFIX
from mlbench_tui.results.allreduce import (
    SweepCurve,
    SweepRun,
    aggregate,
    run_curves,
    sweep_json,
    sweep_tables,
)
from mlbench_tui.results.model import RunResult
from mlbench_tui.results.scoring import is_sweep, score_configs
from mlbench_tui.results.table import render_results
from mlbench_tui.runs.lookup import RUN_ID, RunNotFound, resolve_run
from mlbench_tui.runs.reads import read_metrics

if TYPE_CHECKING:
    from mlbench_tui.server.client import MlbenchClient
    from mlbench_tui.store.api_models import RunInfo
    from mlbench_tui.store.reader import RunReader


def collect_results(client: RunReader, ref: str | None) -> list[RunResult]:
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


def report_run_ids(client: RunReader, refs: Sequence[str]) -> list[str]:
    """The runs ``mlbench report`` draws: each ref's runs as ``mlbench results REF`` shows them,
    in order and once each; with no ref, every finished run."""
    ids: dict[str, None] = {}
    wanted: list[str | None] = [*refs] or [None]
    for ref in wanted:
        for result in collect_results(client, ref):
            if result.run_id:
                ids[result.run_id] = None
    return list(ids)


def sweep_curves(client: MlbenchClient, results: Sequence[RunResult]) -> list[SweepCurve]:
    """The all-reduce curves (task 0a) of ``results``, repeats aggregated size by size."""
    runs = []
    for result in results:
        if not result.run_id or not is_sweep(result):
            continue
        names = [m.name for m in client.metric_names(result.run_id) if m.name.startswith(ALLREDUCE_PREFIX)]
        points = [p for p in read_metrics(client, result.run_id, names) if p.rank == 0]
        runs.append(SweepRun(result.framework, result.backend, result.workers, run_curves(points)))
    return aggregate(runs)


def results_output(results: Sequence[RunResult], output: str, curves: Sequence[SweepCurve] = ()) -> str:
    """The results table (and the all-reduce tables of 0a runs), or with ``output == "json"``
    every result, the repeat scores and the all-reduce curves."""
    if output == "json":
        scores = [score.as_dict() for score in score_configs(results)]
        runs = [result.model_dump(mode="json") for result in results]
        document = {"runs": runs, "scores": scores, "allreduce": sweep_json(curves)}
        return json.dumps(document, indent=2, default=str)
    text = render_results(results, sweep_tables=bool(curves)) or "no finished runs"
    return text + ("\n\n" + sweep_tables(curves) if curves else "")
