"""``mlbench status``: the latest runs as a table, or one run in detail with its ranks and result."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from mlbench_tui.errors import MlbenchError
from mlbench_tui.lifecycle import RunState

if TYPE_CHECKING:
    from mlbench_tui.server.client import MlbenchClient
    from mlbench_tui.store.api_models import RunInfo

from mlbench_tui.runs.lookup import reconcile, resolve_run
from mlbench_tui.spec.tasks import get_task


def _ago(moment: datetime | None) -> str:
    if moment is None:
        return "-"
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    seconds = (datetime.now(UTC) - moment).total_seconds()
    if seconds < 120:
        return f"{seconds:.0f}s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m ago"
    if seconds < 172800:
        return f"{seconds / 3600:.0f}h ago"
    return moment.strftime("%Y-%m-%d")


def _result_text(result: dict[str, Any] | None) -> str:
    if not result:
        return "-"
    from mlbench_tui.results.report import results_rows

    row = results_rows([result])[0]
    if result.get("reached"):
        return f"{row['RESULT']} in {row['TIME TO ACC']}"
    return row["RESULT"]


def status_table(client: MlbenchClient, limit: int = 50) -> str:
    """``mlbench status``: the latest runs, newest first."""
    from mlbench_tui.results.report import render_table

    runs = sorted(client.list_runs(limit=limit), key=lambda r: r.created, reverse=True)
    if not runs:
        return "no runs yet (start one with: mlbench apply specs/quickstart.yaml)"
    rows = []
    for run in runs:
        run = reconcile(client, run)
        rows.append(
            {
                "ID": run.id,
                "NAME": run.name,
                "STATE": str(run.state),
                "TASK": run.task,
                "BACKEND": run.backend,
                "WORKERS": str(run.workers),
                "CREATED": _ago(run.created),
                "RESULT": _result_text(run.result) if run.result else _live_text(client, run),
            }
        )
    return render_table(rows)


def _live_text(client: MlbenchClient, run: RunInfo) -> str:
    """For an active run: the latest value of its goal metric, or how far its sweep got (0a)."""
    if RunState(run.state).is_terminal() or run.state == RunState.PENDING:
        return "-"
    try:
        names = client.metric_names(run.id)
    except MlbenchError:
        return "-"
    if run.goal:
        metric = str(run.goal.get("metric"))
        last = next((n.last_value for n in names if n.name == metric), None)
        op = ">=" if run.goal.get("direction") == "max" else "<="
        shown = "-" if last is None else f"{last:.4g}"
        return f"{metric.removeprefix('val_global_')} {shown} (goal {op} {run.goal.get('target')}) so far"
    task = get_task(run.task)
    if task is None or task.sweep is None:
        return "-"
    measured = sum(n.count for n in names if task.sweep.counts(n.name))
    return f"{measured} {task.sweep.unit} measured so far"


def status_detail(client: MlbenchClient, ref: str) -> str:
    """``mlbench status RUN``: one run with its ranks and result."""
    run = resolve_run(client, ref)
    if reconcile(client, run).state != run.state:
        run = client.get_run(run.id)
    lines = [
        f"run:      {run.id}  ({run.name})",
        f"state:    {run.state}",
        f"spec:     {run.spec_name}  (hash {run.spec_hash[:12]})",
        f"task:     {run.task}  backend {run.backend}  workers {run.workers}  repeat {run.repeat}",
        f"handle:   {run.handle or '-'}",
        f"created:  {run.created:%Y-%m-%d %H:%M:%S}  ({_ago(run.created)})",
    ]
    if run.started:
        lines.append(f"started:  {run.started:%Y-%m-%d %H:%M:%S}")
    if run.finished:
        lines.append(f"finished: {run.finished:%Y-%m-%d %H:%M:%S}")
    if run.goal:
        op = ">=" if run.goal.get("direction") == "max" else "<="
        lines.append(f"goal:     {run.goal.get('metric')} {op} {run.goal.get('target')}")
    if run.error:
        lines.append(f"error:    {run.error}")
    if run.result:
        lines.append(f"result:   {_result_text(run.result)}")
        split = run.result.get("time_split")
        if split:
            lines.append(
                f"time:     compute {split['compute']:.1f}s, communication {split['communication']:.1f}s "
                f"({100 * split['communication_fraction']:.0f}%), preprocess {split['preprocess']:.1f}s"
            )
    if run.ranks:
        lines.append("ranks:")
        for rank in run.ranks:
            where = f"{rank.host or '?'}:{rank.pid}" if rank.pid else rank.host or "-"
            extra = f"  {rank.message}" if rank.message else ""
            lines.append(f"  {rank.rank:>3}  {rank.state!s:<10} {where}{extra}")
    return "\n".join(lines)
