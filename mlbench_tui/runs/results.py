"""``mlbench results``: the results of a run, a spec or every finished run, as a table (with
repeat scores, the all-reduce curves of 0a runs per message size, and one run's ranks summarised
or listed) or JSON. Results are the ones the server stored when each run ended; ``mlbench
report`` draws the same runs.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlbench_tui.errors import NotFound, UsageError
from mlbench_tui.results.allreduce import PREFIX as ALLREDUCE_PREFIX
from mlbench_tui.results.allreduce import (
    SweepCurve,
    SweepRun,
    aggregate,
    run_curves,
    sweep_json,
    sweep_tables,
)
from mlbench_tui.results.history import HistoryEntry
from mlbench_tui.results.model import RunResult
from mlbench_tui.results.ranks import RankFigures
from mlbench_tui.results.scoring import is_sweep, left_out_reason, score_configs
from mlbench_tui.results.table import render_results
from mlbench_tui.runs.lookup import RUN_ID, resolve_run
from mlbench_tui.runs.ranks import RankChoice, rank_figures, ranks_json, ranks_section
from mlbench_tui.runs.reads import read_metrics

if TYPE_CHECKING:
    from mlbench_tui.server.client import MlbenchClient
    from mlbench_tui.store.api_models import RunDetail, RunInfo
    from mlbench_tui.store.read_api import RunReader


def collect_results(client: RunReader, ref: str | None) -> list[RunResult]:
    """Results of one run (id or name), of a spec (a spec file/directory, or a spec name: the
    latest run of each plan), or of every finished run; newest first, as ``mlbench status``."""
    if ref is None:
        runs = [r for r in client.list_runs() if r.state.is_terminal()]
    elif RUN_ID.fullmatch(ref):
        one = resolve_run(client, ref)
        return [one.known_result()]
    elif Path(ref).exists():
        from mlbench_tui.runs.plans import load_plans

        wanted = {(p.plan.name, p.plan.spec_hash) for p in load_plans([ref])}
        runs = [r for r in client.list_runs() if (r.name, r.spec_hash) in wanted]
    else:
        runs = client.list_runs(spec_name=ref) or [r for r in client.list_runs() if r.name == ref]
    if ref is not None and not runs:
        raise NotFound(f"no runs for {ref!r}", hint="list runs with: mlbench status")
    latest: dict[str, RunInfo] = {}
    for run in sorted(runs, key=lambda r: r.created):
        latest[run.name if ref is not None else run.id] = run
    chosen = sorted(latest.values(), key=lambda r: r.created, reverse=True)  # newest first, as status
    return [run.known_result() for run in chosen]


def recompute(client: MlbenchClient, results: Sequence[RunResult]) -> list[RunResult]:
    """``results`` recomputed by the server from their runs' stored metrics and events, with its
    version's rules (``mlbench results --recompute``); a run that has not ended keeps its own."""
    from mlbench_tui.errors import MlbenchError

    fresh = []
    for result in results:
        if result.run_id is None or not result.state.is_terminal():
            fresh.append(result)
            continue
        try:
            fresh.append(client.recompute_result(result.run_id).known_result())
        except MlbenchError as exc:
            print(f"note: {result.name}: not recomputed: {exc.message}", file=sys.stderr)
            fresh.append(result)
    stamps = {
        f"mlbench {r.computed_by.mlbench}, result rules {r.computed_by.rules}" for r in fresh if r.computed_by
    }
    done = sum(1 for r in fresh if r.computed_by is not None and r.computed_by.recomputed_from is not None)
    print(f"recomputed {done} result(s) with {', '.join(sorted(stamps)) or 'this version'}", file=sys.stderr)
    return fresh


def history_entries(reader: RunReader, ref: str | None) -> list[HistoryEntry]:
    """Every run ``ref`` names (every finished run without one), each with today's figures, for
    ``results --history``."""
    from mlbench_tui.runs.compare import named_runs

    runs = named_runs(reader, ref) if ref is not None else reader.list_runs(limit=100_000)
    entries = []
    for run in runs:
        if run.state.is_terminal() and run.result is not None:
            entries.append(HistoryEntry(run.created, run.known_result()))
    return entries


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
        curves = run_curves(points)
        why = left_out_reason(result)
        runs.append(
            SweepRun(
                result.framework,
                result.backend,
                result.workers,
                curves,
                result.name,
                why,
                result.network_label,
            )
        )
    return aggregate(runs)


@dataclass(frozen=True)
class RunRanks:
    """One run's ranks with their figures, and which of them to list."""

    run: RunDetail
    figures: dict[int, RankFigures]
    choice: RankChoice = None


def run_ranks(
    client: MlbenchClient, results: Sequence[RunResult], choice: RankChoice = None
) -> RunRanks | None:
    """The ranks of the one run ``results`` hold, when it had several (or ``choice`` asks for
    them): its states and every rank's figures, in two requests. ``choice`` needs one run."""
    runs = [r for r in results if r.run_id]
    if choice is not None and len(runs) != 1:
        raise UsageError(
            f"--ranks lists the ranks of one run; these results hold {len(runs)}",
            hint="name one run: mlbench results RUN --ranks all",
        )
    if len(runs) != 1 or (runs[0].workers <= 1 and choice is None):
        return None
    run_id = runs[0].run_id
    assert run_id is not None
    return RunRanks(client.get_run(run_id), rank_figures(client, run_id, runs[0].step_time), choice)


def results_output(
    results: Sequence[RunResult],
    output: str,
    curves: Sequence[SweepCurve] = (),
    ranks: RunRanks | None = None,
    width: int | None = None,
) -> str:
    """The results table (and the all-reduce tables of 0a runs, and a run's ranks), or with
    ``output == "json"`` every result, the repeat scores, the all-reduce curves and the ranks;
    the table fits ``width`` characters (None: as wide as it takes)."""
    if output == "json":
        scores = [score.as_dict() for score in score_configs(results)]
        runs = [result.model_dump(mode="json") for result in results]
        document: dict[str, Any] = {"runs": runs, "scores": scores, "allreduce": sweep_json(curves)}
        if ranks is not None:
            document["ranks"] = ranks_json(ranks.run, ranks.figures, ranks.choice)
        return json.dumps(document, indent=2, default=str)
    text = render_results(results, sweep_tables=bool(curves), width=width) or "no finished runs"
    if curves:
        text += "\n\n" + sweep_tables(curves)
    if ranks is not None:
        text += "\n\n" + "\n".join(ranks_section(ranks.run, ranks.figures, ranks.choice))
    return text
