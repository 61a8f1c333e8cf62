"""``mlbench export``: one run as a zip with its spec, plan, metrics (CSV and JSON), events, logs per rank,
``official_result.json``, and MLPerf's training log ``mllog.txt`` (``results.mllog``) with the
ruleset to check it (``mllog_rules/``).

The archive is self-contained: ``results.summarize_run`` over its plan, metrics and events gives
the result the server stored, and MLCommons' checker runs on it with the ruleset it carries, so a
result can be checked by someone without the store (or without mlbench).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import tempfile
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlbench_tui.errors import MlbenchError, UsageError
from mlbench_tui.plan import RunPlan
from mlbench_tui.results.events import EventRecord
from mlbench_tui.results.mllog import RULES, Compliance, check
from mlbench_tui.results.model import RunResult
from mlbench_tui.results.reference import Verdict, verdicts
from mlbench_tui.results.time_to_accuracy import MetricPoint
from mlbench_tui.runs.lookup import resolve_run
from mlbench_tui.runs.reads import read_events, read_metrics

if TYPE_CHECKING:
    from mlbench_tui.server.client import MlbenchClient
    from mlbench_tui.store.api_models import RunDetail

MLLOG = "mllog.txt"
MLLOG_RULES = "mllog_rules"
# The figures of a RunResult that official_result.json publishes.
PUBLISHED = (
    "goal",
    "reached",
    "time_to_accuracy_s",
    "validation_time_s",
    "graph_capture_s",
    "implementation",
    "epochs_to_goal",
    "steps_to_goal",
    "time_split",
    "allreduce",
    "cost_to_target",
    "wall_time_s",
    "telemetry",
    "step_time_s",
    "step_time",
    "step_time_note",
    "sweep",
    "config_digest",
    "preflight",
    "flops",
)


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


def official_result(run: RunDetail, result: RunResult, plan: RunPlan | None) -> dict[str, Any]:
    """The one-file result to publish: what ran, on what, and its score."""
    figures = result.model_dump(mode="json")
    return {
        "format": "mlbench-result/v1",
        "run_id": run.id,
        "run_name": run.name,
        "spec_name": run.spec_name,
        "spec_hash": run.spec_hash,
        "task": run.task,
        "task_name": plan.task_name if plan is not None else result.task_name,
        "backend": run.backend,
        "workers": run.workers,
        "repeat": run.repeat,
        "state": run.state.value,
        **{key: figures[key] for key in PUBLISHED},
        **({"network": figures["network"]} if result.network is not None else {}),
        "hyperparameters": plan.hyperparameters if plan is not None else None,
        "fingerprint": figures["fingerprint"],
        "verdicts": [verdict_json(v) for v in verdicts(result)],
    }


def verdict_json(verdict: Verdict) -> dict[str, Any]:
    """One verdict as published: the figure, its value, the expected one and the band."""
    row, band = verdict.row, verdict.band
    return {
        "figure": verdict.figure,
        "value": verdict.value,
        "outcome": verdict.outcome,
        "expected": row.value if row is not None else None,
        "deviation": verdict.deviation,
        "band": band.half_width if band is not None else None,
        "band_source": band.source if band is not None else None,
        "reference": f"{row.machine}, {row.source} {row.measured}" if row is not None else None,
        "text": verdict.text(),
    }


def write_export(
    path: str | Path,
    run: RunDetail,
    metrics: Sequence[MetricPoint],
    events: Sequence[EventRecord],
    logs: Iterable[LogRecord],
    *,
    mllog: Sequence[str] | None = None,
    power: Mapping[str, Sequence[str]] | None = None,
) -> Path:
    """Write the run's archive to ``path`` (a ``.zip``); returns the path. ``mllog``: the lines of
    ``mllog.txt`` (``results.mllog.mllog_lines``), left out when None; ``power``: MLPerf power
    logs by archive path (``results.power_log.power_logs``)."""
    path = Path(path)
    plan = run.stored_plan()
    by_rank: dict[int, list[str]] = {}
    for record in logs:
        prefix = "" if record.stream == "stdout" else f"[{record.stream}] "
        by_rank.setdefault(record.rank, []).append(prefix + record.text)
    record_json = run.model_dump(mode="json", exclude={"spec_text"})
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("spec.yaml", run.spec_text)
        archive.writestr("plan.json", json.dumps(run.plan, indent=2, sort_keys=True))
        archive.writestr("run.json", json.dumps(record_json, indent=2, default=str))
        archive.writestr("metrics.csv", metrics_csv(metrics))
        archive.writestr("metrics.json", json.dumps([p.__dict__ for p in metrics]))
        archive.writestr(
            "events.json", json.dumps([{**e.__dict__, "payload": dict(e.payload)} for e in events])
        )
        for rank, lines in sorted(by_rank.items()):
            archive.writestr(f"logs/rank-{rank}.log", "\n".join(lines) + "\n")
        official = official_result(run, run.known_result(), plan)
        archive.writestr("official_result.json", json.dumps(official, indent=2, default=str))
        if mllog is not None:
            archive.writestr(MLLOG, "\n".join(mllog) + "\n")
            for rules in sorted(RULES.glob("*.yaml")):
                archive.writestr(f"{MLLOG_RULES}/{rules.name}", rules.read_text(encoding="utf-8"))
        for name, power_lines in (power or {}).items():
            archive.writestr(name, "\n".join(power_lines) + "\n")
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
        verdict = check(Path(tmp) / MLLOG, Path(tmp) / MLLOG_RULES)
    # The checker names the files it read, here in a folder that is gone: name them in the archive.
    inside = str(Path(tmp).resolve())
    report = verdict.report.replace(inside, str(path)).replace(tmp, str(path))
    return dataclasses.replace(verdict, report=report)


@dataclass(frozen=True)
class Exported:
    """A written archive, and what it leaves out and why (notes for the user)."""

    path: Path
    left_out: tuple[str, ...] = ()


def export_run(client: MlbenchClient, ref: str, output: str | Path, *, org: str | None = None) -> Exported:
    """Write the zip archive of run ``ref`` (id or name) to ``output`` (see ``write_export``). Its
    MLPerf log needs MLCommons' ``mlperf-logging`` (the ``mlperf`` extra): without it the archive
    has everything else, and says so. ``org``: the log's ``submission_org`` (default: the spec's
    ``org`` label)."""
    from mlbench_tui.results.mllog import INSTALL_HINT, MllogUnavailable, mllog_lines
    from mlbench_tui.results.power_log import power_logs

    target = Path(output)
    if target.is_dir():
        raise UsageError(f"{target} is a directory", hint=f"name the archive, e.g. {target / 'run.zip'}")
    run = resolve_run(client, ref)
    metrics = read_metrics(client, run.id)
    events = read_events(client, run.id)
    lines: list[str] | None = None
    power: dict[str, list[str]] = {}
    left_out: list[str] = []
    try:
        plan = RunPlan.model_validate(run.plan)
        suspects = run.result.suspects if run.result is not None else []
        lines = mllog_lines(
            plan, metrics, events, state=run.state.value, org=org, message=run.error, suspects=suspects
        )
        power = power_logs(metrics, events)
    except MllogUnavailable:
        left_out.append(f"mllog.txt (MLPerf's log) and power/ (its GPU power logs): {INSTALL_HINT}")
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
    try:
        path = write_export(target, run, metrics, events, logs, mllog=lines, power=power)
    except OSError as exc:
        raise MlbenchError(f"cannot write {target}: {exc.strerror or exc}") from None
    return Exported(path, tuple(left_out))
