"""Messages that workers post to screens: the only way data from the server enters the UI.

Workers do the I/O and post one message per fetch cycle (a batch, not a point), so a busy run
costs one handler call and one refresh per cycle whatever its metric rate. Handlers on the
screens own the state the messages update.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from textual.message import Message

from mlbench_tui.store.api_models import (
    EventOut,
    LogLineOut,
    MetricBands,
    MetricName,
    RankInfo,
    RanksLatest,
    RunDetail,
    RunInfo,
)


@dataclass(slots=True)
class SeriesDelta:
    """New points of one metric of one rank, as columns (no object per point: this is the hot path).

    ``mins``/``maxs`` are set when the points are downsampled buckets (spikes kept)."""

    name: str
    rank: int
    steps: list[int | None] = field(default_factory=list)
    epochs: list[float | None] = field(default_factory=list)
    ts: list[float] = field(default_factory=list)
    values: list[float | None] = field(default_factory=list)
    mins: list[float | None] | None = None
    maxs: list[float | None] | None = None

    def __len__(self) -> int:
        return len(self.values)

    def last(self) -> tuple[int | None, float | None, float | None]:
        """(last step, last epoch, last finite value) seen in this delta."""
        value = next((v for v in reversed(self.values) if v is not None), None)
        step = next((s for s in reversed(self.steps) if s is not None), None)
        epoch = next((e for e in reversed(self.epochs) if e is not None), None)
        return step, epoch, value

    def xy(self) -> list[tuple[float, float]]:
        """Chart points: x is the step (else the epoch, else the time); buckets add min and max."""
        out: list[tuple[float, float]] = []
        mins, maxs = self.mins, self.maxs
        for i, value in enumerate(self.values):
            if value is None:
                continue
            step = self.steps[i]
            x = (
                float(step)
                if step is not None
                else self.epochs[i]
                if self.epochs[i] is not None
                else self.ts[i]
            )
            assert x is not None
            if mins is not None and maxs is not None:
                lo, hi = mins[i], maxs[i]
                if lo is not None and hi is not None and lo != hi:
                    out.append((x, lo))
                    out.append((x, hi))
            out.append((x, value))
        return out


class RunsUpdated(Message):
    """The run list (newest first) and, for runs still going, their goal metric points."""

    def __init__(self, runs: list[RunInfo], goal_points: dict[str, list[tuple[float, float]]]) -> None:
        super().__init__()
        self.runs = runs
        self.goal_points = goal_points


@dataclass
class RunBatch:
    """Everything new about one run since the last cycle."""

    run: RunDetail | None = None
    ranks: list[RankInfo] = field(default_factory=list)
    series: dict[tuple[str, int], SeriesDelta] = field(default_factory=dict)
    lines: list[LogLineOut] = field(default_factory=list)
    events: list[EventOut] = field(default_factory=list)
    names: list[MetricName] | None = None
    latest: RanksLatest | None = None  # every rank's latest point of some metrics (a wide run opening)
    bands: MetricBands | None = None  # percentiles across ranks (a wide run's step-time history)
    initial: bool = False  # the first batch after opening (or after a resync): replaces, not appends

    def delta(self, name: str, rank: int) -> SeriesDelta:
        key = (name, rank)
        found = self.series.get(key)
        if found is None:
            found = self.series[key] = SeriesDelta(name, rank)
        return found

    def is_empty(self) -> bool:
        return (
            self.run is None
            and not self.ranks
            and not self.series
            and not self.lines
            and not self.events
            and self.names is None
            and self.latest is None
            and self.bands is None
        )


class RunChanged(Message):
    """A batch of updates for the run shown by a run screen."""

    def __init__(self, run_id: str, batch: RunBatch) -> None:
        super().__init__()
        self.run_id = run_id
        self.batch = batch


class RunSlow(Message):
    """Loading the run screen's data failed or timed out, the server being up: the feed retries
    in ``retry_in`` seconds (the screen says so instead of staying blank)."""

    def __init__(self, run_id: str, detail: str, retry_in: float) -> None:
        super().__init__()
        self.run_id = run_id
        self.detail = detail
        self.retry_in = retry_in


class RunGone(Message):
    """The run was deleted (404) while it was open."""

    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id


class ConnectionChanged(Message):
    """The server became unreachable (with the next retry delay) or reachable again."""

    def __init__(self, connected: bool, detail: str = "", retry_in: float | None = None) -> None:
        super().__init__()
        self.connected = connected
        self.detail = detail
        self.retry_in = retry_in


class CommandFinished(Message):
    """A user command (cancel, delete, rerun, launch) finished; ``error`` is None on success."""

    def __init__(self, what: str, message: str, error: str | None = None, data: Any = None) -> None:
        super().__init__()
        self.what = what
        self.message = message
        self.error = error
        self.data = data
