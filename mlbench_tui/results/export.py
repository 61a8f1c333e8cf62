"""Export one run as a zip: spec, plan, metrics (CSV and JSON), events, logs per rank,
``official_result.json`` and an MLPerf-style ``:::MLLOG`` log.

The archive is self-contained: ``results.summarize_run`` over its metrics and events gives the
same summary as the store, so a result can be checked by someone without the store.
"""

from __future__ import annotations

import csv
import io
import json
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlbench_tui.results.time_to_accuracy import EventRecord, MetricPoint

MLLOG_NAMESPACE = "mlbench"


@dataclass(frozen=True)
class LogRecord:
    rank: int
    text: str
    stream: str = "stdout"
    t: float | None = None


def metrics_csv(metrics: Iterable[MetricPoint]) -> str:
    """Long, narrow CSV: ``rank,name,step,epoch,t,value`` (one row per reported value)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["rank", "name", "step", "epoch", "t", "value"])
    for p in metrics:
        writer.writerow(
            [
                p.rank,
                p.name,
                "" if p.step is None else p.step,
                "" if p.epoch is None else p.epoch,
                p.t or "",
                p.value,
            ]
        )
    return buf.getvalue()


def _mllog(
    time_s: float | None,
    key: str,
    value: Any = None,
    *,
    event_type: str = "POINT_IN_TIME",
    meta: Mapping[str, Any] | None = None,
) -> str:
    record = {
        "namespace": MLLOG_NAMESPACE,
        "time_ms": round((time_s or 0.0) * 1000),
        "event_type": event_type,
        "key": key,
        "value": value,
        "metadata": dict(meta or {}),
    }
    return ":::MLLOG " + json.dumps(record, sort_keys=False)


def mllog_lines(
    plan: Mapping[str, Any], metrics: Sequence[MetricPoint], events: Sequence[EventRecord]
) -> list[str]:
    """MLPerf-style compliance log lines built from rank 0's events and global metrics."""
    hp = plan.get("hyperparameters") or {}
    events0 = sorted((e for e in events if e.rank == 0), key=lambda e: e.t or 0.0)
    start = next((e.t for e in events0 if e.kind == "run_start"), None)
    lines = [
        _mllog(start, "submission_benchmark", plan.get("task_name") or plan.get("task")),
        _mllog(
            start,
            "submission_platform",
            "local" if (plan.get("target") or {}).get("kind") == "local" else None,
        ),
        _mllog(start, "seed", plan.get("seed")),
        _mllog(start, "number_of_ranks", plan.get("workers")),
        _mllog(start, "comm_backend", plan.get("backend")),
    ]
    batch = hp.get("batch_size")
    if batch is not None:
        lines.append(_mllog(start, "global_batch_size", int(batch) * int(plan.get("workers") or 1)))
    for key in ("lr", "momentum", "weight_decay", "max_epochs"):
        if key in hp:
            lines.append(_mllog(start, f"opt_{key}" if key != "max_epochs" else "max_epochs", hp[key]))
    goal = plan.get("goal")
    evals = sorted(
        (p for p in metrics if goal and p.name == goal.get("metric") and p.rank == 0),
        key=lambda p: p.t or 0.0,
    )
    timeline: list[tuple[float, str]] = []
    for event in events0:
        if event.kind == "run_start":
            timeline.append((event.t or 0.0, _mllog(event.t, "run_start", event_type="INTERVAL_START")))
        elif event.kind == "epoch_end":
            epoch = event.payload.get("epoch")
            timeline.append(
                (
                    event.t or 0.0,
                    _mllog(event.t, "epoch_stop", event_type="INTERVAL_END", meta={"epoch_num": epoch}),
                )
            )
        elif event.kind == "goal_reached":
            timeline.append(
                (
                    event.t or 0.0,
                    _mllog(event.t, "target_reached", event.payload.get("value"), meta=event.payload),
                )
            )
        elif event.kind == "run_stop":
            status = event.payload.get("status", "aborted")
            timeline.append(
                (
                    event.t or 0.0,
                    _mllog(
                        event.t,
                        "run_stop",
                        event_type="INTERVAL_END",
                        meta={"status": status, "reason": event.payload.get("reason")},
                    ),
                )
            )
    for point in evals:
        value = point.value / 100.0 if str(goal and goal.get("metric")).endswith("Prec@1") else point.value
        timeline.append(
            (point.t or 0.0, _mllog(point.t, "eval_accuracy", value, meta={"epoch_num": point.epoch}))
        )
    timeline.sort(key=lambda item: item[0])
    return lines + [line for _, line in timeline]


def official_result(run: Mapping[str, Any], summary: Mapping[str, Any]) -> dict[str, Any]:
    """The one-file result to publish: what ran, on what, and its score."""
    plan = run.get("plan") or {}
    return {
        "format": "mlbench-result/v1",
        "run_id": run.get("id"),
        "run_name": run.get("name"),
        "spec_name": run.get("spec_name"),
        "spec_hash": run.get("spec_hash"),
        "task": plan.get("task") or run.get("task"),
        "task_name": plan.get("task_name"),
        "backend": run.get("backend"),
        "workers": run.get("workers"),
        "repeat": run.get("repeat"),
        "state": run.get("state"),
        "goal": summary.get("goal"),
        "reached": summary.get("reached"),
        "time_to_accuracy_s": summary.get("time_to_accuracy_s"),
        "validation_time_s": summary.get("validation_time_s"),
        "epochs_to_goal": summary.get("epochs_to_goal"),
        "steps_to_goal": summary.get("steps_to_goal"),
        "time_split": summary.get("time_split"),
        "allreduce": summary.get("allreduce"),
        "cost_to_target": summary.get("cost_to_target"),
        "wall_time_s": summary.get("wall_time_s"),
        "hyperparameters": plan.get("hyperparameters"),
        "fingerprint": summary.get("fingerprint"),
    }


def write_export(
    path: str | Path,
    run: Mapping[str, Any],
    summary: Mapping[str, Any],
    metrics: Sequence[MetricPoint],
    events: Sequence[EventRecord],
    logs: Iterable[LogRecord],
) -> Path:
    """Write the run's archive to ``path`` (a ``.zip``); returns the path."""
    path = Path(path)
    plan = run.get("plan") or {}
    by_rank: dict[int, list[str]] = {}
    for record in logs:
        prefix = "" if record.stream == "stdout" else f"[{record.stream}] "
        by_rank.setdefault(record.rank, []).append(prefix + record.text)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("spec.yaml", str(run.get("spec_text") or ""))
        archive.writestr("plan.json", json.dumps(plan, indent=2, sort_keys=True))
        archive.writestr(
            "run.json", json.dumps({k: v for k, v in run.items() if k != "spec_text"}, indent=2, default=str)
        )
        archive.writestr("metrics.csv", metrics_csv(metrics))
        archive.writestr("metrics.json", json.dumps([p.__dict__ for p in metrics]))
        archive.writestr(
            "events.json", json.dumps([{**e.__dict__, "payload": dict(e.payload)} for e in events])
        )
        for rank, lines in sorted(by_rank.items()):
            archive.writestr(f"logs/rank-{rank}.log", "\n".join(lines) + "\n")
        archive.writestr(
            "official_result.json", json.dumps(official_result(run, summary), indent=2, default=str)
        )
        archive.writestr("mllog.txt", "\n".join(mllog_lines(plan, metrics, events)) + "\n")
    tmp.replace(path)
    return path
