"""View rows: what the runs table and the compare table show for a run, derived from wire models.

Pure functions (no Textual), so the filtering, sorting and derived figures (progress, best value,
time to goal, speedup, efficiency, comm share, cost) are tested without a screen.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from mlbench_tui.formatting import format_elapsed
from mlbench_tui.lifecycle import RunState, queue_owner
from mlbench_tui.results.scoring import is_sweep, reached_time, speedup
from mlbench_tui.store.api_models import RunInfo
from mlbench_tui.tui.goal import GoalStatus, goal_status

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
    implementation: str = ""  # how it executed (``fp32``, ``bf16 graphs``); "" until it has a result
    queued_by: int | None = None  # the pid of the apply whose queue it waits in

    def matches(self, text: str, state: str) -> bool:
        if state != "all" and self.state != state:
            return False
        if not text:
            return True
        words = (self.name, self.spec_name, self.task, self.backend, self.implementation, self.state, self.id)
        hay = " ".join(words).lower()
        return all(word in hay for word in text.lower().split())


def _ts(value: datetime | None) -> float:
    if value is None:
        return 0.0
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.timestamp()


def run_row(run: RunInfo, goal_points: Sequence[tuple[float, float]] = ()) -> RunRow:
    """Build the table row of ``run``; a finished run's stored result wins over live points."""
    result = run.result
    status: GoalStatus | None = goal_status(run.goal, goal_points)
    best = result.best_value if result is not None else None
    if best is None and status is not None:
        best = status.best
    reached = bool(result is not None and result.reached) or bool(status and status.reached)
    progress: float | None
    if run.goal is not None:
        progress = 1.0 if reached else (status.fraction if status else 0.0)
        if run.state is RunState.SUCCEEDED and result is None and status is None:
            progress = 1.0
    else:
        progress = 1.0 if run.state is RunState.SUCCEEDED else None
    return RunRow(
        id=run.id,
        name=run.name,
        spec_name=run.spec_name,
        task=run.task,
        backend=run.backend,
        workers=run.workers,
        state=run.state.value,
        progress=progress,
        best=best,
        metric=run.goal.metric if run.goal is not None else "",
        time_to_goal_s=result.time_to_accuracy_s if result is not None else None,
        eta_s=status.eta_s if status and run.state in (RunState.RUNNING, RunState.PENDING) else None,
        created=_ts(run.created),
        error=run.error,
        implementation=result.variant if result is not None and not is_sweep(result) else "",
        queued_by=owner[1] if (owner := queue_owner(run.state, run.handle, run.labels)) else None,
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
    return format_elapsed(now - created) if created else "—"


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
    implementation: str
    time_to_accuracy_s: float | None
    wall_time_s: float | None
    vs_baseline: float | None  # how many times faster than the baseline end to end (graph capture in)
    speedup: float | None
    efficiency: float | None
    comm_share: float | None
    cost: float | None
    best: float | None
    network: str = ""  # the run's links (RunResult.network_label); '' for the machine's own


def compare_rows(
    runs: Sequence[RunInfo], baseline_id: str | None = None
) -> tuple[list[CompareRow], str | None]:
    """Rows for ``runs`` and the id of the baseline used for speedup.

    The baseline is ``baseline_id`` when given, otherwise the run with the fewest workers that
    reached its goal (MLBench compares against 1 worker); speedup is ``results.scoring.speedup``
    scaled by the baseline's workers, and only for runs of the baseline's variant (precision,
    CUDA graphs) and links (a one-worker baseline has none, so it serves every link): eager against
    graphs, or 10 Mbit/s against 1 Gbit/s, is not scaling; eager against graphs is an
    implementation comparison, which ``vs_baseline`` gives instead (time to accuracy plus graph
    capture, the baseline's over the run's). Figures come from each run's stored result.
    """
    results = {run.id: run.known_result() for run in runs}

    def tta(run: RunInfo) -> float | None:
        return reached_time(results[run.id])

    baseline = next((r for r in runs if r.id == baseline_id), None)
    if baseline is None or tta(baseline) is None:
        reached = [r for r in runs if tta(r) is not None]
        baseline = min(reached, key=lambda r: (r.workers, tta(r) or 0.0)) if reached else None
    base_t = tta(baseline) if baseline else None
    base_k = baseline.workers if baseline else 1
    variant = results[baseline.id].variant if baseline else None

    def end_to_end(run: RunInfo) -> float | None:
        t = tta(run)
        return None if t is None else t + (results[run.id].graph_capture_s or 0.0)

    base_total = end_to_end(baseline) if baseline else None
    links = results[baseline.id].network_label if baseline else ""
    rows = []
    for run in runs:
        res = results[run.id]
        same = res.variant == variant and (res.network_label == links or (not links and base_k == 1))
        gain, efficiency = speedup(base_t if same else None, tta(run), run.workers, base_k)
        total = end_to_end(run)
        rows.append(
            CompareRow(
                id=run.id,
                name=run.name,
                backend=run.backend,
                workers=run.workers,
                state=run.state.value,
                reached=res.reached,
                implementation="—" if is_sweep(res) else res.variant,  # 0a sweeps its dtypes, as results says
                time_to_accuracy_s=tta(run),
                wall_time_s=res.wall_time_s,
                vs_baseline=base_total / total if base_total and total else None,
                speedup=gain,
                efficiency=efficiency,
                comm_share=res.time_split.communication_fraction if res.time_split else None,
                cost=res.cost_to_target,
                best=res.best_value,
                network=res.network_label,
            )
        )
    return rows, baseline.id if baseline else None
