"""A run's step time, one definition everywhere: the median over its timed steps after the
task's declared warm-up, with p10, p90 and p99, and each rank's median step and busy time.

The ranks report every timed step (``timed_step_s``: a random sample of steps where steps are
micro-steps and only some are stamped) and its all-reduce seconds (``timed_step_comm_s``); a
rank's busy time per step is the median of ``step - all-reduce`` over its timed steps, so it is
never more than the step it is part of. Runs recorded before timed steps existed have only the
report windows' mean step times (``step_time``): their figures come from the windows that start
after the warm-up, each window weighted by its steps, and say so (``basis: windows``). The
server computes the figures once (``summary.summarize_run``); ``status``, ``results``, the TUI,
the report and the export all show ``StepTimeFigures`` through ``step_time_text``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from mlbench_worker import wire

from mlbench_tui.formatting import format_step
from mlbench_tui.results.model import RankStepTime, StepTimeFigures
from mlbench_tui.results.quantiles import quantile, weighted_quantile
from mlbench_tui.results.time_to_accuracy import MetricPoint

STEP_SERIES = (wire.TIMED_STEP, wire.TIMED_STEP_COMM, wire.STEP_TIME)
"""The metrics the figures are read from."""


def _finite(value: float) -> bool:
    return math.isfinite(value) and value > 0


def timed_steps(metrics: Iterable[MetricPoint], warmup_steps: int = 0) -> dict[int, list[float]]:
    """Each rank's timed step seconds (steps after ``warmup_steps`` only), in step order."""
    by_rank: dict[int, list[tuple[int, float]]] = {}
    for p in metrics:
        if p.name == wire.TIMED_STEP and _finite(p.value) and (p.step or 0) > warmup_steps:
            by_rank.setdefault(p.rank, []).append((p.step or 0, p.value))
    return {rank: [v for _, v in sorted(values)] for rank, values in sorted(by_rank.items())}


def step_time_figures(metrics: Iterable[MetricPoint], warmup_steps: int) -> StepTimeFigures | None:
    """The run's step-time figures from its timed steps, else from its report windows after the
    warm-up; None when no step after the warm-up was reported."""
    metrics = list(metrics)
    seconds: dict[tuple[int, int], float] = {}
    comm: dict[tuple[int, int], float] = {}
    windows: list[MetricPoint] = []
    for p in metrics:
        if p.step is None or not math.isfinite(p.value):
            continue
        if p.name == wire.TIMED_STEP and p.value > 0 and p.step > warmup_steps:
            seconds[(p.rank, p.step)] = p.value
        elif p.name == wire.TIMED_STEP_COMM and p.value >= 0:
            comm[(p.rank, p.step)] = p.value
        elif p.name == wire.STEP_TIME and p.value > 0:
            windows.append(p)
    if seconds:
        return _from_steps(seconds, comm, warmup_steps)
    return _from_windows(windows, warmup_steps)


def _from_steps(
    seconds: Mapping[tuple[int, int], float], comm: Mapping[tuple[int, int], float], warmup_steps: int
) -> StepTimeFigures:
    ordered = sorted(seconds.values())
    ranks: dict[int, tuple[list[float], list[float]]] = {}
    for (rank, step), value in seconds.items():
        steps, busy = ranks.setdefault(rank, ([], []))
        steps.append(value)
        if (rank, step) in comm:
            busy.append(max(0.0, value - comm[(rank, step)]))
    return StepTimeFigures(
        median_s=quantile(ordered, 0.5),
        p10_s=quantile(ordered, 0.1),
        p90_s=quantile(ordered, 0.9),
        p99_s=quantile(ordered, 0.99),
        steps=len(ordered),
        warmup_steps=warmup_steps,
        basis="steps",
        ranks=[
            RankStepTime(
                rank=rank,
                median_s=quantile(sorted(steps), 0.5),
                busy_s=quantile(sorted(busy), 0.5) if busy else None,
                steps=len(steps),
            )
            for rank, (steps, busy) in sorted(ranks.items())
        ],
    )


def _from_windows(windows: Sequence[MetricPoint], warmup_steps: int) -> StepTimeFigures | None:
    """Report windows (a mean step time at the step each window ended) that began after the
    warm-up, each standing for its steps."""
    by_rank: dict[int, list[MetricPoint]] = {}
    for p in windows:
        by_rank.setdefault(p.rank, []).append(p)
    pairs: list[tuple[float, int]] = []
    ranks = []
    for rank, points in sorted(by_rank.items()):
        previous = 0
        mine: list[tuple[float, int]] = []
        for p in sorted(points, key=lambda p: p.step or 0):
            end = p.step or 0
            if end > previous and previous >= warmup_steps:
                mine.append((p.value, end - previous))
            previous = max(previous, end)
        if mine:
            pairs += mine
            ranks.append(
                RankStepTime(rank=rank, median_s=weighted_quantile(mine, 0.5), steps=sum(w for _, w in mine))
            )
    if not pairs:
        return None
    return StepTimeFigures(
        median_s=weighted_quantile(pairs, 0.5),
        p10_s=weighted_quantile(pairs, 0.1),
        p90_s=weighted_quantile(pairs, 0.9),
        p99_s=weighted_quantile(pairs, 0.99),
        steps=sum(w for _, w in pairs),
        warmup_steps=warmup_steps,
        basis="windows",
        windows=len(pairs),
        ranks=ranks,
    )


def step_time_text(figures: StepTimeFigures) -> str:
    """``9.84 ms median of 44 timed steps after a 20-step warm-up (p10 9.06, p90 11.0, p99
    11.0 ms)``; a run that reported windows only says so."""
    spread = (
        f"p10 {format_step(figures.p10_s).removesuffix(' ms')}, "
        f"p90 {format_step(figures.p90_s).removesuffix(' ms')}, p99 {format_step(figures.p99_s)}"
    )
    n = figures.warmup_steps
    warmup = f"after {_article(n)} {n}-step warm-up" if n else "(no warm-up)"
    if figures.basis == "windows":
        what = f"{figures.steps} steps in {figures.windows} report windows {warmup}"
        return (
            f"{format_step(figures.median_s)} median of {what} ({spread}; window means: no per-step record)"
        )
    return f"{format_step(figures.median_s)} median of {figures.steps} timed steps {warmup} ({spread})"


def _article(n: int) -> str:
    """``an`` before a number read with a vowel sound (8, 11, 18, 80, 800, 11000), else ``a``."""
    digits = str(n)
    eleven = len(digits) % 3 == 2 and digits.startswith(("11", "18"))  # eleven, eighteen (thousand)
    return "an" if digits.startswith("8") or eleven else "a"


def no_step_time_text(warmup_steps: int, steps_taken: int | None) -> str:
    """Why a run that trained has no step time: every step it took was in its warm-up."""
    took = f" (the run took {steps_taken})" if steps_taken is not None else ""
    return f"no timed step after the {warmup_steps}-step warm-up{took}"


def live_window_text(step_time_s: float, window_steps: int | None) -> str:
    """A running rank's latest report window, labelled as such: ``623 ms (last 10 steps)``."""
    steps = f"last {window_steps} steps" if window_steps else "latest window"
    return f"{format_step(step_time_s)} ({steps})"
