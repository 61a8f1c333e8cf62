"""What a report is drawn from: each chosen run's stored result, spec text and metric series.

Read through the server's HTTP API (a remote server, the TUI's own) or from the store file
(``mlbench report`` on the local store), a few reads per run; long series come downsampled by the
store's query (min/max/last buckets), so a report of a long run costs about the same as one of a
short run. Nothing is re-run or recomputed here: a result that other rules stored is served
recomputed by the server (``server.results``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mlbench_worker import wire

from mlbench_tui.results.model import RunResult
from mlbench_tui.results.scoring import is_sweep
from mlbench_tui.results.time_to_accuracy import MetricPoint
from mlbench_tui.server.paging import all_metrics

if TYPE_CHECKING:
    from mlbench_tui.store.read_api import RunReader

POINTS_PER_SERIES = 400  # buckets per (metric, rank): more than a figure's width in points


@dataclass(frozen=True)
class RunClock:
    """When a run's training started, reached its goal and stopped (unix seconds, from its
    ``run_start``, ``goal_reached`` and ``run_stop`` events): the zero of the time-based figures."""

    start: float | None = None
    goal: float | None = None
    stop: float | None = None


@dataclass(frozen=True)
class RunRecord:
    """One run as the report sees it."""

    result: RunResult
    spec_text: str
    metrics: Mapping[str, tuple[MetricPoint, ...]]  # by metric name, every rank's points
    clock: RunClock = RunClock()

    @property
    def run_id(self) -> str:
        return self.result.run_id or self.result.name

    def points(self, name: str, rank: int | None = None) -> tuple[MetricPoint, ...]:
        """Points of ``name`` (of one rank when given), in step order."""
        points = self.metrics.get(name, ())
        return points if rank is None else tuple(p for p in points if p.rank == rank)

    def lowest_rank(self, name: str) -> tuple[MetricPoint, ...]:
        """One value per step: the lowest rank's (global metrics are equal on every rank)."""
        points = self.metrics.get(name, ())
        return self.points(name, min(p.rank for p in points)) if points else ()

    def ranks(self, name: str) -> list[int]:
        return sorted({p.rank for p in self.metrics.get(name, ())})


def by_name(points: Iterable[MetricPoint]) -> dict[str, tuple[MetricPoint, ...]]:
    """Points grouped by metric name, each in (rank, step) order."""
    grouped: dict[str, list[MetricPoint]] = {}
    for point in points:
        grouped.setdefault(point.name, []).append(point)
    return {
        name: tuple(sorted(points, key=lambda p: (p.rank, p.step if p.step is not None else -1, p.t or 0.0)))
        for name, points in grouped.items()
    }


def read_series(
    client: RunReader, run_id: str, *, rank: int | None = None, points: int | None = POINTS_PER_SERIES
) -> dict[str, tuple[MetricPoint, ...]]:
    """A run's metrics by name (of one rank when given), each series downsampled to ``points``
    buckets by the server (None: every point)."""
    return by_name(
        all_metrics(
            lambda batch, since: client.metrics(
                run_id, names=batch, since=since, rank=rank, points=points, timeout=120.0
            )
        )
    )


def read_clock(client: RunReader, run_id: str) -> RunClock:
    """The first rank's training start and goal, and the last rank's stop."""

    def times(kind: type[wire.Payload]) -> list[float]:
        return [e.t for e in client.events(run_id, kind=kind.KIND).events]

    start, goal, stop = times(wire.RunStart), times(wire.GoalReached), times(wire.RunStop)
    return RunClock(min(start, default=None), min(goal, default=None), max(stop, default=None))


def load_records(client: RunReader, run_ids: Sequence[str]) -> list[RunRecord]:
    """The records of ``run_ids``, in that order."""
    records = []
    for run_id in run_ids:
        run = client.get_run(run_id)
        records.append(
            RunRecord(
                run.known_result(),
                run.spec_text,
                read_series(client, run_id),
                read_clock(client, run_id),
            )
        )
    return records


def training(records: Iterable[RunRecord]) -> list[RunRecord]:
    """Runs with a goal (time-to-accuracy tasks)."""
    return [r for r in records if r.result.goal is not None]


def sweeps(records: Iterable[RunRecord]) -> list[RunRecord]:
    """All-reduce sweeps (``scoring.is_sweep``)."""
    return [r for r in records if is_sweep(r.result)]
