"""View rows: what the runs table and the compare table show for a run, derived from wire models.

Pure functions (no Textual), so the filtering, sorting and derived figures (progress, best value,
time to goal, speedup, efficiency, comm share, cost) are tested without a screen.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from mlbench_tui.store.api_models import RunInfo
from mlbench_tui.tui.goal import GoalStatus, format_duration, goal_status

STATES = ("all", "running", "pending", "succeeded", "failed", "cancelled")
SORT_KEYS = ("age", "name", "task", "backend", "workers", "state", "progress", "best", "time to goal")


@dataclass(frozen=True)
class RunRow:
    """One line of the runs table."""

    id: str
    name: str
    spec_name: str
    task: str
    backend: str
    workers: int
    state: str
    progress: float | None  # 0..1, None when the run has no goal
    best: float | None
    metric: str
    time_to_goal_s: float | None
    eta_s: float | None
    created: float  # unix seconds
    error: str | None = None

    def matches(self, text: str, state: str) -> bool:
        if state != "all" and self.state != state:
            return False
        if not text:
            return True
        hay = f"{self.name} {self.spec_name} {self.task} {self.backend} {self.state} {self.id}".lower()
        return all(word in hay for word in text.lower().split())


def _ts(value: datetime | None) -> float:
    if value is None:
        return 0.0
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.timestamp()


def _float(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def run_row(run: RunInfo, goal_points: Sequence[tuple[float, float]] = ()) -> RunRow:
    """Build the table row of ``run``; a finished run's stored result wins over live points."""
    result = run.result or {}
    status: GoalStatus | None = goal_status(run.goal, goal_points)
    best = _float(result.get("best_value"))
    if best is None and status is not None:
        best = status.best
    reached = bool(result.get("reached")) or bool(status and status.reached)
    progress: float | None
    if run.goal:
        progress = 1.0 if reached else (status.fraction if status else 0.0)
        if run.state == "succeeded" and not result and status is None:
            progress = 1.0
    else:
        progress = 1.0 if run.state == "succeeded" else None
    return RunRow(
        id=run.id,
        name=run.name,
        spec_name=run.spec_name,
        task=run.task,
        backend=run.backend,
        workers=run.workers,
        state=str(run.state.value if hasattr(run.state, "value") else run.state),
        progress=progress,
        best=best,
        metric=str((run.goal or {}).get("metric", "")),
        time_to_goal_s=_float(result.get("time_to_accuracy_s")),
        eta_s=status.eta_s if status and run.state in ("running", "pending") else None,
        created=_ts(run.created),
        error=run.error,
    )


def sort_rows(rows: Iterable[RunRow], key: str, reverse: bool = False) -> list[RunRow]:
    """Sort by a ``SORT_KEYS`` column; missing values always go last. ``age`` sorts newest first."""

    def value(row: RunRow) -> Any:
        return {
            "age": -row.created,
            "name": row.name.lower(),
            "task": row.task,
            "backend": row.backend,
            "workers": row.workers,
            "state": row.state,
            "progress": row.progress,
            "best": row.best,
            "time to goal": row.time_to_goal_s,
        }[key]

    present = [r for r in rows if value(r) is not None]
    missing = [r for r in rows if value(r) is None]
    return sorted(present, key=value, reverse=reverse) + missing


def format_age(created: float, now: float) -> str:
    return format_duration(now - created) if created else "—"


# -- compare -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class CompareRow:
    """One run in the compare table, with figures relative to the baseline run."""

    id: str
    name: str
    backend: str
    workers: int
    state: str
    reached: bool | None
    time_to_accuracy_s: float | None
    wall_time_s: float | None
    speedup: float | None
    efficiency: float | None
    comm_share: float | None
    cost: float | None
    best: float | None


def compare_rows(
    runs: Sequence[RunInfo], baseline_id: str | None = None
) -> tuple[list[CompareRow], str | None]:
    """Rows for ``runs`` and the id of the baseline used for speedup.

    The baseline is ``baseline_id`` when given, otherwise the run with the fewest workers that
    reached its goal (MLBench compares against 1 worker). Speedup is T(baseline)/T(run) scaled
    by the baseline's worker count, so a 2-worker baseline still gives efficiency per worker.
    Figures come from each run's stored result summary.
    """
    results: dict[str, Mapping[str, Any]] = {r.id: (r.result or {}) for r in runs}

    def tta(run: RunInfo) -> float | None:
        res = results[run.id]
        return _float(res.get("time_to_accuracy_s")) if res.get("reached") else None

    baseline = next((r for r in runs if r.id == baseline_id), None)
    if baseline is None or tta(baseline) is None:
        reached = [r for r in runs if tta(r) is not None]
        baseline = min(reached, key=lambda r: (r.workers, tta(r) or 0.0)) if reached else None
    base_t = tta(baseline) if baseline else None
    base_k = baseline.workers if baseline else 1
    rows = []
    for run in runs:
        res = results[run.id]
        t = tta(run)
        speedup = base_t / t * base_k if base_t and t else None
        split = res.get("time_split") or {}
        comm = _float(split.get("communication_fraction")) if isinstance(split, Mapping) else None
        rows.append(
            CompareRow(
                id=run.id,
                name=run.name,
                backend=run.backend,
                workers=run.workers,
                state=str(run.state.value if hasattr(run.state, "value") else run.state),
                reached=res.get("reached"),
                time_to_accuracy_s=t,
                wall_time_s=_float(res.get("wall_time_s")),
                speedup=speedup,
                efficiency=speedup / run.workers if speedup else None,
                comm_share=comm,
                cost=_float(res.get("cost_to_target")),
                best=_float(res.get("best_value")),
            )
        )
    return rows, baseline.id if baseline else None
