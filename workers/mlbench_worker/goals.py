"""Collective stop decisions: every rank stops at the same step, for the same reason.

Rank 0 decides from the global (all-reduced) validation metrics and its clock, and shares one
integer; every rank acts on that integer. No rank can keep training after another stopped
(MLBench's bug #26), and ranks whose clocks disagree about ``max_time`` still agree. The sharing is
the framework's (``Collective``: a torch ``Comm``, TensorFlow's strategy), so this imports neither.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass
from typing import Protocol

from mlbench_worker.config import GoalConfig


class Collective(Protocol):
    """What a stop decision (and a rank's context) needs of the ranks' collectives."""

    @property
    def rank(self) -> int: ...

    @property
    def world_size(self) -> int: ...

    def share_from_rank0(self, value: int) -> int:
        """Collective: rank 0's ``value``, returned on every rank."""
        ...


class Stop(enum.IntEnum):
    """Why training stops (or ``CONTINUE``)."""

    CONTINUE = 0
    GOAL = 1
    MAX_TIME = 2


@dataclass(frozen=True)
class GoalStatus:
    """The goal metric's value at a validation and whether it met the target."""

    metric: str
    value: float
    target: float
    reached: bool


class StopController:
    """Holds the goal and time budget; ``decide`` is a collective call on every rank."""

    def __init__(
        self,
        comm: Collective,
        goal: GoalConfig | None,
        max_time_s: float | None,
        start: float | None = None,
    ) -> None:
        self.comm = comm
        self.goal = goal
        self.max_time_s = max_time_s
        self.start = time.time() if start is None else start

    def goal_status(self, metrics: dict[str, float]) -> GoalStatus | None:
        """Evaluate the goal on global metrics; a task that does not produce the metric is a bug."""
        if self.goal is None:
            return None
        if self.goal.metric not in metrics:
            raise KeyError(
                f"the goal metric {self.goal.metric!r} is not produced by this task "
                f"(it reports {', '.join(sorted(metrics))})"
            )
        value = float(metrics[self.goal.metric])
        return GoalStatus(self.goal.metric, value, self.goal.target, self.goal.reached(value))

    def local_decision(self, metrics: dict[str, float] | None) -> Stop:
        """What this rank would decide alone (only rank 0's decision counts)."""
        if metrics is not None:
            status = self.goal_status(metrics)
            if status is not None and status.reached:
                return Stop.GOAL
        if self.max_time_s is not None and time.time() - self.start >= self.max_time_s:
            return Stop.MAX_TIME
        return Stop.CONTINUE

    def decide(self, metrics: dict[str, float] | None = None) -> Stop:
        """Collective: rank 0's decision, broadcast so that every rank returns the same value."""
        decision = self.local_decision(metrics)
        if self.comm.world_size == 1:
            return decision
        return Stop(self.comm.share_from_rank0(int(decision)))

    @property
    def has_time_limit(self) -> bool:
        return self.max_time_s is not None
