"""Per-rank figures of a run and how they spread across its ranks: what ``mlbench status``,
``mlbench results``, the TUI's Ranks tab and the report show of a run of any size (median, p90,
the worst ranks) instead of one line per rank.

A rank's figures are its step time and its tracker totals (compute, communication, data, other
seconds so far). While a run goes, the step time is the latest report window's (a live view says
so); once it has a result, the rank's median over its timed steps after the warm-up
(``results.step_time``). Its *busy time* is the part of a step it did not spend communicating:
once finished, the median over its timed steps of each step less its all-reduce; while it runs,
the step time less its communication share so far; never more than the step. In synchronous
training every rank's step takes as long as the slowest one's, and the rank the others wait for is
the one with the most busy time (and the least communication). Ranks are ordered worst first by
busy time, and a rank is a straggler when its busy time is more than 25% above the median of the
*other* ranks: with two ranks that is the other rank's (the median of both would be their mean,
which a rank twice as busy as the other never passes by 25%), with many it is the run's median.
Pure functions over numbers, shared by the CLI, the TUI and the report.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from mlbench_worker import wire

from mlbench_tui.results.model import RankStepTime, StepTimeFigures
from mlbench_tui.results.time_to_accuracy import TRACKER_TOTALS

STEP_TIME = wire.STEP_TIME
RANK_METRICS = (STEP_TIME, *TRACKER_TOTALS)
"""The metrics a rank's figures are read from (their latest value per rank)."""

STRAGGLER_FACTOR = 1.25  # a straggler's busy time exceeds the other ranks' median by 25%
TOTAL_FIELDS = {
    wire.TIME_COMPUTE: "compute",
    wire.TIME_COMMUNICATION: "comm",
    wire.TIME_PREPROCESS: "data",
    wire.TIME_METRICS: "other",
}


def percentile(ordered: Sequence[float], percent: int) -> float:
    """The nearest-rank ``percent`` percentile (1..100) of sorted, non-empty ``ordered``."""
    n = len(ordered)
    return ordered[max(0, (percent * n + 99) // 100 - 1)]


@dataclass
class RankFigures:
    """One rank's latest step time (seconds) and cumulative tracker totals (seconds)."""

    rank: int
    step: int | None = None
    step_time: float | None = None
    compute: float = 0.0
    comm: float = 0.0
    data: float = 0.0
    other: float = 0.0
    totals_step: int | None = None  # the steps taken when the totals were reported
    timed_steps: int | None = None  # set once finished: the timed steps the step time is the median of
    busy_s: float | None = None  # set once finished: the median of its timed steps less their all-reduce

    @property
    def comm_share(self) -> float | None:
        """Communication's share of the tracker totals (None before any total arrived)."""
        total = self.compute + self.comm + self.data + self.other
        return self.comm / total if total > 0 else None

    @property
    def busy(self) -> float | None:
        """Seconds per step not spent communicating, never more than the step: once finished, the
        median of its timed steps less their all-reduce; while running, the step time less the
        communication share of its totals so far (the whole step before any totals arrived)."""
        if self.busy_s is not None:
            return min(self.busy_s, self.step_time) if self.step_time is not None else self.busy_s
        if self.step_time is None or not math.isfinite(self.step_time):
            return None
        share = self.comm_share
        return self.step_time if share is None else self.step_time * (1.0 - share)

    @property
    def final(self) -> bool:
        """Whether the step time is the finished run's median (else the latest report window)."""
        return self.timed_steps is not None

    def settle(self, figures: RankStepTime) -> None:
        """Take the finished run's figures for this rank: its median step and busy time."""
        self.step_time = figures.median_s
        self.busy_s = figures.busy_s
        self.timed_steps = figures.steps

    def take(self, name: str, value: float | None, step: int | None = None) -> bool:
        """Fold in the latest ``value`` of metric ``name``; False for a metric it does not keep."""
        if name == STEP_TIME:
            if value is not None and not self.final:  # a finished run's median outranks any window
                self.step_time = value
        elif name in TOTAL_FIELDS:
            if value is not None:
                setattr(self, TOTAL_FIELDS[name], value)
                if step is not None and (self.totals_step is None or step > self.totals_step):
                    self.totals_step = step
        else:
            return False
        if step is not None and (self.step is None or step > self.step):
            self.step = step
        return True


@dataclass(frozen=True)
class Spread:
    """One figure across ranks: nearest-rank percentiles and the ranks at either end."""

    count: int
    p10: float
    p50: float
    p90: float
    min: float
    max: float
    min_rank: int
    max_rank: int


def spread(values: Mapping[int, float | None]) -> Spread | None:
    """How ``values`` (rank -> figure; None and non-finite ones left out) spread across ranks."""
    pairs = sorted((v, r) for r, v in values.items() if v is not None and math.isfinite(v))
    if not pairs:
        return None
    ordered = [v for v, _ in pairs]
    return Spread(
        count=len(pairs),
        p10=percentile(ordered, 10),
        p50=percentile(ordered, 50),
        p90=percentile(ordered, 90),
        min=pairs[0][0],
        max=pairs[-1][0],
        min_rank=pairs[0][1],
        max_rank=pairs[-1][1],
    )


def against_others(values: Mapping[int, float]) -> dict[int, float]:
    """Each rank's figure (busy time per step) over the median of the other ranks' (1.5: half
    as busy again as the others); empty with fewer than two ranks: nobody to hold up."""
    pairs = sorted((v, r) for r, v in values.items() if math.isfinite(v) and v > 0)
    n = len(pairs)
    if n < 2:
        return {}
    ordered = [v for v, _ in pairs]
    low, high = (n - 2) // 2, (n - 1) // 2  # the median's places among the other n - 1

    def others_median(i: int) -> float:
        return (ordered[low if low < i else low + 1] + ordered[high if high < i else high + 1]) / 2

    return {r: v / others_median(i) for i, (v, r) in enumerate(pairs)}


def find_stragglers(values: Mapping[int, float], factor: float = STRAGGLER_FACTOR) -> set[int]:
    """The ranks that hold the others up: a figure (busy time per step) more than ``factor``
    times the median of the other ranks'."""
    return {r for r, ratio in against_others(values).items() if ratio > factor}


F = TypeVar("F", bound="RankFigures")


def worst_first(ranks: Iterable[F]) -> list[F]:
    """``ranks`` by busy time, largest first; ranks without one last, each group by rank."""
    return sorted(ranks, key=lambda f: (f.busy is None, -(f.busy or 0.0), f.rank))


@dataclass(frozen=True)
class RanksSummary:
    """What a run's ranks look like as a whole."""

    ranks: int  # the run's ranks
    reported: int  # ranks with figures
    step_time: Spread | None
    comm_share: Spread | None
    busy: Spread | None
    worst: list[RankFigures]  # worst first
    stragglers: frozenset[int]


def summarize_ranks(figures: Iterable[RankFigures], ranks: int, worst: int = 5) -> RanksSummary:
    """The spread of step time, comm share and busy time over ``figures``, the ``worst`` worst
    ranks and the stragglers, for a run of ``ranks`` ranks."""
    figures = list(figures)
    busy = {f.rank: f.busy for f in figures}
    return RanksSummary(
        ranks=ranks,
        reported=sum(1 for f in figures if f.step_time is not None or f.comm_share is not None),
        step_time=spread({f.rank: f.step_time for f in figures}),
        comm_share=spread({f.rank: f.comm_share for f in figures}),
        busy=spread(busy),
        worst=[f for f in worst_first(figures) if f.busy is not None][:worst],
        stragglers=frozenset(find_stragglers({r: b for r, b in busy.items() if b is not None})),
    )


def settle_ranks(figures: Mapping[int, RankFigures], step_time: StepTimeFigures | None) -> None:
    """Give each rank of a finished run its median step and busy time from the run's result
    (ranks the result has no timed steps for keep their latest window)."""
    if step_time is None:
        return
    for rank_step in step_time.ranks:
        rank = figures.get(rank_step.rank)
        if rank is not None:
            rank.settle(rank_step)
