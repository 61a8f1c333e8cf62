"""Scores across runs: olympic mean over repeats, speedup and efficiency versus one worker, cost.

MLPerf scores a benchmark as the mean time over N repeats after dropping the fastest and the
slowest run (the olympic mean), which keeps one lucky or unlucky run from deciding the result.
Pure functions over ``RunResult``s; ``speedup`` is the one definition of speedup and efficiency.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from mlbench_tui.results.model import RunResult


def olympic_mean(values: Sequence[float]) -> float:
    """Mean after dropping the single fastest and slowest value (plain mean below 3 values)."""
    if not values:
        raise ValueError("olympic_mean of no values")
    ordered = sorted(values)
    if len(ordered) >= 3:
        ordered = ordered[1:-1]
    return sum(ordered) / len(ordered)


def cost_to_target(time_s: float | None, price_per_hour: float | None, machines: int = 1) -> float | None:
    """Money spent until the goal: ``time x price per machine-hour x machines``."""
    if time_s is None or price_per_hour is None:
        return None
    return time_s / 3600.0 * price_per_hour * machines


@dataclass(frozen=True)
class ConfigScore:
    """The score of one configuration (spec, backend, workers) over its repeats."""

    spec_name: str
    framework: str
    backend: str
    workers: int
    runs: int
    reached: int
    time_to_accuracy_s: float | None  # olympic mean over the repeats that reached the goal
    stdev_s: float | None
    min_s: float | None
    max_s: float | None
    speedup: float | None = None
    efficiency: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def speedup(
    base_time_s: float | None, time_s: float | None, workers: int, base_workers: int = 1
) -> tuple[float | None, float | None]:
    """Speedup ``T(base) / T(run)`` scaled by the baseline's workers (MLBench compares against
    1 worker), and efficiency ``speedup / workers``; (None, None) unless both times are known."""
    if not base_time_s or not time_s:
        return None, None
    value = base_time_s / time_s * base_workers
    return value, value / max(1, workers)


def config_key(result: RunResult) -> tuple[str, str, str, int]:
    """What makes runs repeats of one configuration: spec, framework, backend and world size."""
    return result.spec_name, result.framework, result.backend, result.workers


def reached_time(result: RunResult) -> float | None:
    """The run's time to accuracy when it reached its goal, else None."""
    return result.time_to_accuracy_s if result.reached else None


def is_sweep(result: RunResult) -> bool:
    """A run without a goal that measured all-reduce curves, or any task 0a run (failed ones too):
    it has no time to accuracy; its repeats are aggregated per message size (``results.allreduce``)."""
    return result.goal is None and (result.task == "0a" or bool(result.allreduce))


def score_configs(results: Iterable[RunResult]) -> list[ConfigScore]:
    """Group results by (spec, framework, backend, workers), score each group over its repeats,
    and add speedup and efficiency where the same spec, framework and backend has a 1-worker score.
    All-reduce sweeps (``is_sweep``) are left out: they have no goal to score."""
    groups: dict[tuple[str, str, str, int], list[RunResult]] = {}
    for result in results:
        if not is_sweep(result):
            groups.setdefault(config_key(result), []).append(result)
    scores: list[ConfigScore] = []
    for (spec_name, framework, backend, workers), members in sorted(groups.items()):
        times = [t for t in map(reached_time, members) if t is not None]
        scores.append(
            ConfigScore(
                spec_name=spec_name,
                framework=framework,
                backend=backend,
                workers=workers,
                runs=len(members),
                reached=len(times),
                time_to_accuracy_s=olympic_mean(times) if times else None,
                stdev_s=statistics.stdev(times) if len(times) >= 2 else None,
                min_s=min(times) if times else None,
                max_s=max(times) if times else None,
            )
        )
    baseline = {(s.spec_name, s.framework, s.backend): s.time_to_accuracy_s for s in scores if s.workers == 1}
    scored = []
    for score in scores:
        gain, efficiency = speedup(
            baseline.get((score.spec_name, score.framework, score.backend)),
            score.time_to_accuracy_s,
            score.workers,
        )
        if gain is not None:
            score = ConfigScore(**{**score.__dict__, "speedup": gain, "efficiency": efficiency})
        scored.append(score)
    return scored
