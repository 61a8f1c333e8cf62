"""What a report is drawn from: each chosen run's stored result, spec text and metric series.

Read through the server's HTTP API (the CLI's embedded server or a remote one, the TUI's own),
two requests per run; long series come downsampled by the server (min/max/last buckets), so a
report of a long run costs about the same as one of a short run. Nothing is re-run or recomputed
beyond what the figures need.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mlbench_tui.results.model import RunResult
from mlbench_tui.results.time_to_accuracy import MetricPoint

if TYPE_CHECKING:
    from mlbench_tui.server.client import MlbenchClient
    from mlbench_tui.store.api_models import MetricsPage

POINTS_PER_SERIES = 400  # buckets per (metric, rank): more than a figure's width in points


@dataclass(frozen=True)
class RunRecord:
    """One run as the report sees it."""

    result: RunResult
    spec_text: str
    metrics: Mapping[str, tuple[MetricPoint, ...]]  # by metric name, every rank's points

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


def metric_points(page: MetricsPage) -> dict[str, tuple[MetricPoint, ...]]:
    """The page's series as points by name (steps in order, missing values dropped)."""
    by_name: dict[str, list[MetricPoint]] = {}
    for series in page.series:
        points = by_name.setdefault(series.name, [])
        for step, value, t, epoch in zip(series.step, series.value, series.t, series.epoch, strict=True):
            if value is not None:
                points.append(MetricPoint(series.name, value, series.rank, step, epoch, t))
    return {
        name: tuple(sorted(points, key=lambda p: (p.rank, p.step if p.step is not None else -1, p.t or 0.0)))
        for name, points in by_name.items()
    }


def load_records(client: MlbenchClient, run_ids: Sequence[str]) -> list[RunRecord]:
    """The records of ``run_ids``, in that order."""
    records = []
    for run_id in run_ids:
        run = client.get_run(run_id)
        page = client.metrics(run_id, points=POINTS_PER_SERIES, timeout=120.0)
        records.append(RunRecord(run.known_result(), run.spec_text, metric_points(page)))
    return records


def training(records: Iterable[RunRecord]) -> list[RunRecord]:
    """Runs with a goal (time-to-accuracy tasks)."""
    return [r for r in records if r.result.goal is not None]


def sweeps(records: Iterable[RunRecord]) -> list[RunRecord]:
    """Runs without a goal that measured all-reduce curves, or that are task 0a (failed ones too)."""
    return [r for r in records if r.result.goal is None and (r.result.task == "0a" or r.result.allreduce)]
