"""Library behind ``mlbench status|logs|cancel|delete|results|export``: runs as the store knows them.

Every function takes a server client (``ensure_server().client()``), so the same commands work
while ``apply`` runs in another shell (they reuse its server) or after it ended (they start one on
the same store). A run is named by its id (``r-0123456789ab``) or its name (the latest run with
that name).
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from mlbench_tui.errors import MlbenchError, UsageError
from mlbench_tui.executors.api import RunHandle, RunState

if TYPE_CHECKING:
    from mlbench_tui.plan import RunPlan
    from mlbench_tui.results.time_to_accuracy import EventRecord, MetricPoint
    from mlbench_tui.server.client import MlbenchClient
    from mlbench_tui.store.api_models import RunDetail, RunInfo

RUN_ID = re.compile(r"^r-[0-9a-f]{12}$")
# Executors whose runs any shell can look up (process table, run directory, Slurm's queue).
RECONCILED = ("local", "slurm")


class RunNotFound(MlbenchError):
    exit_code = 1


def resolve_run(client: MlbenchClient, ref: str) -> RunDetail:
    """The run with id ``ref``, or the latest run named ``ref``."""
    from mlbench_tui.server.client import ServerHTTPError

    if RUN_ID.match(ref):
        try:
            return client.get_run(ref)
        except ServerHTTPError as exc:
            if exc.status == 404:
                raise RunNotFound(f"no run {ref}", hint="list runs with: mlbench status") from None
            raise
    matches = [run for run in client.list_runs() if run.name == ref]
    if not matches:
        raise RunNotFound(f"no run named {ref!r}", hint="list runs with: mlbench status")
    latest = max(matches, key=lambda run: run.created)
    return client.get_run(latest.id)


def _executor_for_handle(handle: RunHandle) -> Any:
    from mlbench_tui.executors import get_executor

    return get_executor(handle.scheme)


def reconcile(client: MlbenchClient, run: RunInfo) -> RunInfo:
    """Fix a run the store still thinks active whose processes are gone (its ``apply`` died)."""
    if RunState(run.state).is_terminal() or not run.handle:
        return run
    try:
        handle = RunHandle.parse(run.handle)
        if handle.scheme not in RECONCILED:
            return run
        status = _executor_for_handle(handle).describe(handle)
    except MlbenchError:
        return run
    if status is None or not (status.state.is_terminal() or status.state is RunState.UNKNOWN):
        return run
    state = RunState.FAILED if status.state is RunState.UNKNOWN else status.state
    updated = client.update_run(
        run.id,
        state=state,
        finished=datetime.now(UTC),
        error=status.message if state != RunState.SUCCEEDED else None,
    )
    return updated


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
    """For an active run: the latest value of its goal metric (or sizes measured, for 0a)."""
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
    sizes = sum(n.count for n in names if n.name.endswith("_latency_p50"))
    return f"{sizes} sizes measured so far"


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


def _log_line(line_rank: int, text: str, only_rank: int | None) -> str:
    """Prefix a line with its rank when several ranks are shown (unless the worker already did)."""
    prefix = f"[rank {line_rank}]"
    if only_rank is not None or text.startswith(prefix):
        return text
    return f"{prefix} {text}"


def iter_logs(
    client: MlbenchClient,
    ref: str,
    *,
    follow: bool = False,
    rank: int | None = None,
    grep: str | None = None,
    poll_s: float = 0.5,
) -> Iterator[str]:
    """Stored log lines of a run (``[rank N]``-prefixed unless one rank is asked for); with
    ``follow``, keeps reading until the run has ended."""
    if grep is not None:
        try:
            re.compile(grep)
        except re.error as exc:
            raise UsageError(f"invalid --grep expression {grep!r}: {exc}") from None
    run = resolve_run(client, ref)
    cursor = 0
    while True:
        page = client.logs(run.id, cursor, rank=rank, regex=grep, limit=5000)
        for line in page.lines:
            yield _log_line(line.rank, line.text, rank)
        cursor = page.cursor
        if page.lines:
            continue
        if not follow:
            return
        current = client.get_run(run.id)
        if RunState(current.state).is_terminal():
            tail = client.logs(run.id, cursor, rank=rank, regex=grep, limit=5000)
            for line in tail.lines:
                yield _log_line(line.rank, line.text, rank)
            if not tail.lines:
                return
            cursor = tail.cursor
            continue
        time.sleep(poll_s)


def cancel_run(client: MlbenchClient, ref: str) -> str:
    """Stop every rank of a run and mark it cancelled; a finished run is left as it is."""
    run = resolve_run(client, ref)
    if RunState(run.state).is_terminal():
        return f"{run.name} ({run.id}) already {run.state}; nothing to cancel"
    if run.handle:
        handle = RunHandle.parse(run.handle)
        _executor_for_handle(handle).cancel(handle)
    client.update_run(run.id, state=RunState.CANCELLED, finished=datetime.now(UTC), error="cancelled by user")
    return f"cancelled {run.name} ({run.id})"


def delete_run(client: MlbenchClient, ref: str) -> str:
    """Cancel a run if it is still going, then delete it from the store and its local files."""
    run = resolve_run(client, ref)
    if not RunState(run.state).is_terminal() and run.handle:
        handle = RunHandle.parse(run.handle)
        _executor_for_handle(handle).cancel(handle)
    client.delete_run(run.id)
    if run.handle:
        _remove_run_files(RunHandle.parse(run.handle))
    return f"deleted {run.name} ({run.id})"


def _remove_run_files(handle: RunHandle) -> None:
    """The run's working directory (config, rank logs): locally, or on the Slurm cluster's
    shared filesystem when its record is still known."""
    if handle.scheme == "local":
        from mlbench_tui.executors.local import LocalExecutor

        shutil.rmtree(LocalExecutor().run_dir(handle.run_id), ignore_errors=True)
    elif handle.scheme == "slurm":
        from mlbench_tui.executors.slurm import SlurmExecutor, parse_handle

        executor = SlurmExecutor()
        try:
            run_dir = executor.run_dir(executor.cluster(parse_handle(handle)[2]), handle.run_id)
        except MlbenchError:
            return
        shutil.rmtree(run_dir, ignore_errors=True)


def read_metrics(client: MlbenchClient, run_id: str, names: Sequence[str] | None = None) -> list[MetricPoint]:
    """Every stored point of a run's metrics (of ``names``, or all), following the cursor."""
    from mlbench_tui.results.time_to_accuracy import MetricPoint

    batches: list[list[str] | None] = [None]
    if names is not None:
        wanted = list(names)
        if not wanted:
            return []
        batches = [wanted[i : i + 50] for i in range(0, len(wanted), 50)]
    points: list[MetricPoint] = []
    for batch in batches:
        cursor = 0
        while True:
            page = client.metrics(run_id, names=batch, since=cursor)
            count = 0
            for series in page.series:
                for step, value, t, epoch in zip(
                    series.step, series.value, series.t, series.epoch, strict=False
                ):
                    if value is not None:
                        points.append(MetricPoint(series.name, value, series.rank, step, epoch, t))
                        count += 1
            if count == 0 or page.cursor == cursor:
                break
            cursor = page.cursor
    return points


def read_events(client: MlbenchClient, run_id: str) -> list[EventRecord]:
    """Every stored event of a run, oldest first."""
    from mlbench_tui.results.time_to_accuracy import EventRecord

    events: list[EventRecord] = []
    cursor = 0
    while True:
        page = client.events(run_id, since=cursor, limit=50_000)
        events.extend(EventRecord(e.kind, e.payload, e.rank or 0, e.t) for e in page.events)
        if not page.events or page.cursor == cursor:
            return events
        cursor = page.cursor


def fetch_result_inputs(
    client: MlbenchClient, run_id: str, plan: RunPlan | None = None
) -> tuple[list[MetricPoint], list[EventRecord]]:
    """What a result summary needs: the goal and validation metrics, tracker totals, all-reduce
    figures (not the per-step training series), and every event."""
    from mlbench_tui.results.time_to_accuracy import TRACKER_TOTALS

    wanted = {"time_train", "time_validation", *TRACKER_TOTALS}
    goal_metric = plan.goal.metric if plan is not None and plan.goal is not None else None
    selected = [
        n.name
        for n in client.metric_names(run_id)
        if n.name in wanted or n.name == goal_metric or n.name.startswith(("allreduce_", "val_"))
    ]
    return read_metrics(client, run_id, selected), read_events(client, run_id)


def _summary(client: MlbenchClient, run: RunDetail) -> dict[str, Any]:
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
        return [_summary(client, resolve_run(client, ref))]
    elif Path(ref).exists():
        from mlbench_tui.runner import load_plans

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
    return [_summary(client, client.get_run(run.id)) for run in chosen]


def results_output(summaries: Sequence[dict[str, Any]], output: str) -> str:
    from mlbench_tui.results.report import render_results
    from mlbench_tui.results.scoring import score_configs

    if output == "json":
        scores = [score.as_dict() for score in score_configs(summaries)]
        return json.dumps({"runs": list(summaries), "scores": scores}, indent=2, default=str)
    return render_results(summaries) or "no finished runs"


@dataclass(frozen=True)
class Exported:
    """A written archive, and what it leaves out and why (notes for the user)."""

    path: Path
    left_out: tuple[str, ...] = ()


def export_run(client: MlbenchClient, ref: str, output: str | Path, *, org: str | None = None) -> Exported:
    """Write a run's zip archive (see ``results.export``). Its MLPerf log needs MLCommons'
    ``mlperf-logging`` (the ``mlperf`` extra): without it the archive has everything else, and says
    so. ``org``: the log's ``submission_org`` (default: the spec's ``org`` label)."""
    from mlbench_tui.plan import RunPlan
    from mlbench_tui.results.export import LogRecord, write_export
    from mlbench_tui.results.mllog import INSTALL_HINT, MllogUnavailable, mllog_lines

    target = Path(output)
    if target.is_dir():
        raise UsageError(f"{target} is a directory", hint=f"name the archive, e.g. {target / 'run.zip'}")
    run = resolve_run(client, ref)
    summary = _summary(client, run)
    metrics = read_metrics(client, run.id)
    events = read_events(client, run.id)
    lines: list[str] | None = None
    left_out: list[str] = []
    try:
        plan = RunPlan.model_validate(run.plan)
        lines = mllog_lines(plan, metrics, events, state=str(run.state), org=org, message=run.error)
    except MllogUnavailable:
        left_out.append(f"mllog.txt (MLPerf's log): {INSTALL_HINT}")
    except ValueError as exc:  # a plan stored by an older version that this one cannot read
        left_out.append(f"mllog.txt (MLPerf's log): the run's stored plan is not readable ({exc})")
    logs: list[LogRecord] = []
    cursor = 0
    while True:
        lpage = client.logs(run.id, cursor, limit=50_000)
        logs.extend(LogRecord(line.rank, line.text, line.stream, line.t) for line in lpage.lines)
        if not lpage.lines or lpage.cursor == cursor:
            break
        cursor = lpage.cursor
    record = run.model_dump(mode="json")
    try:
        path = write_export(target, record, summary, metrics, events, logs, mllog=lines)
    except OSError as exc:
        raise MlbenchError(f"cannot write {target}: {exc.strerror or exc}") from None
    return Exported(path, tuple(left_out))


def write_text(stream: TextIO, text: str) -> None:
    if text:
        stream.write(text if text.endswith("\n") else text + "\n")
