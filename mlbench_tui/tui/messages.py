"""Messages that workers post to screens: the only way data from the server enters the UI.

Workers do the I/O and post one message per fetch cycle (a batch, not a point), so a busy run
costs one handler call and one refresh per cycle whatever its metric rate. Handlers on the
screens own the state the messages update.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from textual.message import Message

from mlbench_tui.store.api_models import EventOut, LogLineOut, MetricName, RankInfo, RunDetail, RunInfo


@dataclass(frozen=True, slots=True)
class Point:
    """One metric value (or one downsampled bucket, with its min and max) of one rank."""

    name: str
    rank: int
    step: int | None
    epoch: float | None
    t: float
    value: float | None
    vmin: float | None = None
    vmax: float | None = None


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
    points: list[Point] = field(default_factory=list)
    lines: list[LogLineOut] = field(default_factory=list)
    events: list[EventOut] = field(default_factory=list)
    names: list[MetricName] | None = None
    initial: bool = False  # the first batch after opening (or after a resync): replaces, not appends

    def is_empty(self) -> bool:
        return (
            self.run is None
            and not self.ranks
            and not self.points
            and not self.lines
            and not self.events
            and self.names is None
        )


class RunChanged(Message):
    """A batch of updates for the run shown by a run screen."""

    def __init__(self, run_id: str, batch: RunBatch) -> None:
        super().__init__()
        self.run_id = run_id
        self.batch = batch


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
