"""Export one run as a zip: spec, plan, metrics (CSV and JSON), events, logs per rank,
``official_result.json``, and MLPerf's training log ``mllog.txt`` (``results.mllog``) with the
ruleset to check it (``mllog_rules/``).

The archive is self-contained: ``results.summarize_run`` over its metrics and events gives the
same summary as the store, and MLCommons' checker runs on it with the ruleset it carries, so a
result can be checked by someone without the store (or without mlbench).
"""

from __future__ import annotations

import csv
import io
import json
import tempfile
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlbench_tui.errors import MlbenchError
from mlbench_tui.results.mllog import RULES, Compliance, check
from mlbench_tui.results.time_to_accuracy import EventRecord, MetricPoint

MLLOG = "mllog.txt"
MLLOG_RULES = "mllog_rules"


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
        "graph_capture_s": summary.get("graph_capture_s"),
        "implementation": summary.get("implementation"),
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
    *,
    mllog: Sequence[str] | None = None,
) -> Path:
    """Write the run's archive to ``path`` (a ``.zip``); returns the path. ``mllog``: the lines of
    ``mllog.txt`` (``results.mllog.mllog_lines``), left out when None."""
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
        if mllog is not None:
            archive.writestr(MLLOG, "\n".join(mllog) + "\n")
            for rules in sorted(RULES.glob("*.yaml")):
                archive.writestr(f"{MLLOG_RULES}/{rules.name}", rules.read_text(encoding="utf-8"))
    tmp.replace(path)
    return path


def check_export(path: str | Path) -> Compliance:
    """MLCommons' compliance checker on an archive's ``mllog.txt`` with the ruleset it carries: what
    anyone holding the archive can run (see README)."""
    with tempfile.TemporaryDirectory(prefix="mlbench-export-") as tmp, zipfile.ZipFile(path) as archive:
        names = [n for n in archive.namelist() if n == MLLOG or n.startswith(f"{MLLOG_RULES}/")]
        if MLLOG not in names:
            raise MlbenchError(f"{path} has no {MLLOG} to check")
        archive.extractall(tmp, members=names)
        return check(Path(tmp) / MLLOG, Path(tmp) / MLLOG_RULES)
