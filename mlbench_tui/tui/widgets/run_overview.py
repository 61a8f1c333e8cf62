"""The run screen's overview tab: the run (spec, plan, resources, hyperparameters), its result
and its environment, as Rich renderables built from the wire models (no Textual state)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from mlbench_worker import wire
from rich.console import Group
from rich.table import Table
from rich.text import Text

from mlbench_tui.formatting import DEFAULT_CURRENCY, format_duration, format_money
from mlbench_tui.lifecycle import RunState
from mlbench_tui.plan import RunPlan
from mlbench_tui.report.environment import readable, readable_fingerprint
from mlbench_tui.results.table import (
    allreduce_text,
    checks_lines,
    network_detail_lines,
    step_line,
    telemetry_lines,
    value_text,
)
from mlbench_tui.store.api_models import RunDetail
from mlbench_tui.tui.goal import goal_label
from mlbench_tui.tui.rows import _ts


def _kv_table(rows: Iterable[tuple[str, Any]], title: str) -> Table:
    table = Table.grid(padding=(0, 2))
    table.title = title
    table.title_justify = "left"
    table.title_style = "bold"
    table.add_column(style="grey62", no_wrap=True)
    table.add_column()
    for key, value in rows:
        table.add_row(key, value if isinstance(value, Text) else Text(str(value)))
    return table


def _when(value: Any) -> str:
    ts = _ts(value)
    if not ts:
        return "—"
    import datetime as dt

    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def summary_renderable(run: RunDetail) -> Group:
    plan = run.stored_plan()
    goal_text = f"{goal_label(run.goal)} ({run.goal.kind})" if run.goal else "none (measurement task)"
    # as stored: a plan from an older version shows no newer defaults (gpu_type_strict)
    resources = plan.resources.model_dump(exclude_unset=True) if plan is not None else {}
    data = "—"
    if plan is not None:
        options = ", ".join(f"{key}: {readable(key, value)}" for key, value in plan.data.options.items())
        data = f"{plan.data.source} ({options})" if options else plan.data.source
    rows = [
        ("name", run.name),
        ("id", run.id),
        ("spec", f"{run.spec_name}  (sha256 {run.spec_hash[:12]})" if run.spec_hash else run.spec_name),
        ("task", f"{run.task} {plan.task_name if plan is not None else ''}".strip()),
        ("backend", run.backend),
        ("workers", run.workers),
        ("goal", goal_text),
        *network_detail_lines(run.network, run.result.network if run.result is not None else None),
        ("target", run.target_kind + (f"  {run.handle}" if run.handle else "")),
        (
            "resources",
            ", ".join(f"{k}={_spec_value(v)}" for k, v in resources.items() if v not in (None, 0, "")),
        ),
        ("data", data),
        ("created", _when(run.created)),
        ("started", _when(run.started)),
        ("finished", _when(run.finished)),
    ]
    hyper = ran_hyperparameters(plan) if plan is not None else []
    parts: list[Any] = [_kv_table(rows, "Run")]
    if hyper:
        parts.append(Text(""))
        parts.append(_kv_table(hyper, "Hyperparameters (as run)"))
    return Group(*parts)


def ran_hyperparameters(plan: RunPlan) -> list[tuple[str, Text]]:
    """The plan's hyperparameters as the ranks used them: a synthetic run's ``data.options`` may
    shrink the model (``bptt``, ``hidden_size``, ...), and the ranks take those over the plan's."""
    options = plan.data.options if plan.data.source == "synthetic" else {}
    rows = []
    for key, value in sorted(plan.hyperparameters.items()):
        if key in options and options[key] != value:
            text = Text(_spec_value(options[key]), style="bold")
            text.append(f"  (data.options; plan {_spec_value(value)})", style="grey50")
            rows.append((key, text))
        else:
            rows.append((key, Text(_spec_value(value))))
    return rows


def result_renderable(run: RunDetail, failures: list[wire.RankFailed], stop: wire.RunStop | None) -> Group:
    result = run.result
    parts: list[Any] = [Text("")]
    if result is None:
        line = Text("Result: ", style="bold")
        active = run.state in (RunState.RUNNING, RunState.PENDING)
        line.append("pending — the summary is stored when the run ends" if active else "none")
        parts.append(line)
    else:
        split = result.time_split
        rows: list[tuple[str, Any]] = [
            ("reached goal", {True: "yes", False: "no", None: "—"}[result.reached]),
            ("implementation", result.variant),
            ("time to accuracy", format_duration(result.time_to_accuracy_s, unknown="—")),
            ("validation time", format_duration(result.validation_time_s, unknown="—")),
            ("epochs / steps", f"{result.epochs_to_goal or '—'} / {result.steps_to_goal or '—'}"),
            ("best / last", f"{_num(result.best_value)} / {_num(result.last_value)}"),
            ("wall time", format_duration(result.wall_time_s, unknown="—")),
        ]
        step = step_line(result)
        if step is not None:
            rows.append(("step time", step))
        if result.graph_capture_s is not None:
            capture = format_duration(result.graph_capture_s)
            rows.append(("graph capture", f"{capture} (not in the time to accuracy)"))
        if split is not None:
            rows.append(
                ("compute / comm", f"{_pct(split.compute_fraction)} / {_pct(split.communication_fraction)}")
            )
        if result.cost_to_target is not None:
            rows.append(("cost to target", format_money(result.cost_to_target, result.currency)))
        if result.telemetry is not None:
            rows += telemetry_lines(result.telemetry, result.currency or DEFAULT_CURRENCY)
        for dtype, entry in (result.allreduce or {}).items():
            text = allreduce_text(dtype, entry).removeprefix(f"{dtype} ")
            if entry.peak_busbw_size is not None:
                text += f" at {entry.peak_busbw_size} elements"
            rows.append((f"all-reduce {dtype}", text))
            if entry.note:
                rows.append(("", entry.note))
        rows += checks_lines(result)
        parts.append(_kv_table(rows, "Result"))
    # a failure is said once: the stop reason and the run's error repeat a rank's failure
    failed = [f"rank {failure.rank} failed: {failure.exception}" for failure in failures]
    said = {*failed, *([run.error] if run.error else [])}
    if stop:
        reason = "" if stop.reason in said else stop.reason or ""
        parts.append(Text(f"stopped: {stop.status} {reason}".rstrip(), style="grey62"))
    if run.error and run.error not in failed:
        parts.append(Text(f"error: {run.error}", style="bold red"))
    for failure, failure_line in zip(failures, failed, strict=True):
        parts.append(Text(failure_line, style="bold red"))
        tb = failure.traceback.strip()
        if tb:
            parts.append(Text(tb, style="red"))
    return Group(*parts)


def environment_renderable(env: dict[str, Any]) -> Group:
    if not env:
        return Group(Text(""), Text("Environment: not reported yet", style="grey50"))
    rows = list(readable_fingerprint(env, per_run=True).items())  # as the report shows them
    return Group(Text(""), _kv_table(rows, "Environment"))


def _spec_value(value: Any) -> str:
    """A value as a spec writes it: ``true``, ``[fp32, fp16]``, never Python's ``True`` or ``['fp32']``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_spec_value(v) for v in value) + "]"
    if value is None:
        return "null"
    return str(value)


def _num(value: float | None) -> str:
    return value_text(value) if value is not None and math.isfinite(value) else "—"


def _pct(value: float | None) -> str:
    return f"{value * 100:.1f}%" if value is not None else "—"
