"""``mlbench status``: the latest runs as a table, or one run in detail with its result and ranks."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from mlbench_tui.errors import MlbenchError
from mlbench_tui.formatting import DEFAULT_CURRENCY, format_age, format_duration, format_money, render_table
from mlbench_tui.lifecycle import RunState
from mlbench_tui.results.model import RunResult
from mlbench_tui.results.table import (
    checks_lines,
    network_detail_lines,
    rank_figures_text,
    result_text,
    step_line,
    telemetry_lines,
    value_text,
)
from mlbench_tui.runs.lookup import reconcile, resolve_run
from mlbench_tui.runs.queue import queued_text
from mlbench_tui.runs.ranks import RankChoice, ranks_lines
from mlbench_tui.spec.tasks import get_task

if TYPE_CHECKING:
    from mlbench_tui.server.client import MlbenchClient
    from mlbench_tui.store.api_models import RunInfo


def _result_text(result: RunResult | None) -> str:
    if result is None:
        return "-"
    if result.reached:
        return f"{result_text(result)} in {format_duration(result.time_to_accuracy_s)}"
    return result_text(result)


def latest_runs(client: MlbenchClient, limit: int = 50) -> list[RunInfo]:
    """The latest ``limit`` runs, newest first, each reconciled with its executor."""
    runs = sorted(client.list_runs(limit=limit), key=lambda r: r.created, reverse=True)
    return [reconcile(client, run) for run in runs]


def status_json(client: MlbenchClient, ref: str | None, limit: int = 50) -> str:
    """``mlbench status -o json``: ``{"runs": [...]}`` as the server records them, newest first;
    with ``ref``, that run's whole record (plan, ranks, result)."""
    if ref is not None:
        run = resolve_run(client, ref)
        if reconcile(client, run).state != run.state:
            run = client.get_run(run.id)
        return json.dumps(run.model_dump(mode="json"), indent=2)
    runs = [run.model_dump(mode="json") for run in latest_runs(client, limit)]
    return json.dumps({"runs": runs}, indent=2)


def status_table(client: MlbenchClient, limit: int = 50) -> str:
    """``mlbench status``: the latest runs, newest first."""
    runs = latest_runs(client, limit)
    if not runs:
        return "no runs yet (start one with: mlbench apply specs/quickstart.yaml)"
    rows = []
    networked = any(run.network is not None for run in runs)
    for run in runs:
        rows.append(
            {
                "ID": run.id,
                "NAME": run.name,
                "STATE": str(run.state),
                "TASK": run.task,
                "BACKEND": run.backend,
                "WORKERS": str(run.workers),
                **({"NETWORK": run.network.label() if run.network else "-"} if networked else {}),
                "CREATED": format_age(run.created),
                "RESULT": _result_text(run.result) if run.result else _live_text(client, run),
            }
        )
    return render_table(rows)


def _live_text(client: MlbenchClient, run: RunInfo) -> str:
    """For an active run: the latest value of its goal metric, or how far its sweep got (0a); for a
    run waiting in an apply's queue, whose."""
    if (queued := queued_text(run)) is not None:
        return queued
    if run.state.is_terminal() or run.state is RunState.PENDING:
        return "-"
    try:
        names = client.metric_names(run.id)
    except MlbenchError:
        return "-"
    goal = run.goal
    if goal is not None:
        last = next((n.last_value for n in names if n.name == goal.metric), None)
        op = ">=" if goal.direction == "max" else "<="
        shown = value_text(last)
        return f"{goal.metric.removeprefix('val_global_')} {shown} (goal {op} {goal.target}) so far"
    task = get_task(run.task)
    if task is None or task.sweep is None:
        return "-"
    measured = sum(n.count for n in names if task.sweep.counts(n.name))
    return f"{measured} {task.sweep.unit} measured so far"


def status_detail(client: MlbenchClient, ref: str, ranks: RankChoice = None) -> str:
    """``mlbench status RUN``: one run with its result and its ranks (listed, or summarised for
    a large run; ``ranks`` chooses which to list)."""
    run = resolve_run(client, ref)
    if reconcile(client, run).state != run.state:
        run = client.get_run(run.id)
    lines = [
        f"run:      {run.id}  ({run.name})",
        f"state:    {run.state}",
        f"spec:     {run.spec_name}  (hash {run.spec_hash[:12]})",
        f"task:     {run.task}  backend {run.backend}  workers {run.workers}  repeat {run.repeat}"
        + (f"  precision {run.result.precision}" if run.result is not None else ""),
        f"handle:   {run.handle or '-'}",
        f"created:  {run.created:%Y-%m-%d %H:%M:%S}  ({format_age(run.created)})",
    ]
    if run.started:
        lines.append(f"started:  {run.started:%Y-%m-%d %H:%M:%S}")
    if run.finished:
        lines.append(f"finished: {run.finished:%Y-%m-%d %H:%M:%S}")
    if run.goal is not None:
        op = ">=" if run.goal.direction == "max" else "<="
        lines.append(f"goal:     {run.goal.metric} {op} {run.goal.target}")
    figures = run.result.network if run.result is not None else None
    lines += [f"{label + ':':<9} {text}" for label, text in network_detail_lines(run.network, figures)]
    if run.error:
        lines.append(f"error:    {run.error}")
    if run.result is not None:
        result = run.known_result()
        lines.append(f"result:   {_result_text(result)}")
        step = step_line(result)
        if step is not None:
            lines.append(f"step:     {step}")
        if result.graph_capture_s is not None:
            capture = format_duration(result.graph_capture_s)
            lines.append(f"graphs:   CUDA graphs, captured in {capture} (apart from the time to accuracy)")
        split = result.time_split
        if split is not None:
            lines.append(
                f"time:     compute {format_duration(split.compute)}, communication "
                f"{format_duration(split.communication)} ({100 * split.communication_fraction:.0f}%), "
                f"preprocess {format_duration(split.preprocess)}"
            )
        currency = result.currency or DEFAULT_CURRENCY
        if result.cost_to_target is not None:
            lines.append(f"cost:     {format_money(result.cost_to_target, currency)} to the goal")
        if result.telemetry is not None:
            hardware_lines = telemetry_lines(result.telemetry, currency)
            lines += [f"{label + ':':<9} {text}" for label, text in hardware_lines]
        lines += [f"{label + ':':<9} {text}" for label, text in checks_lines(result)]
    hardware = {
        r.rank: rank_figures_text(r)
        for r in (run.result.telemetry.ranks if run.result and run.result.telemetry else [])
    }
    if run.ranks:
        lines += ranks_lines(client, run, ranks, hardware)
    return "\n".join(lines)
