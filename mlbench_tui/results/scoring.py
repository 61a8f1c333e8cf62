"""Scores across runs: olympic mean over repeats, speedup and efficiency versus one worker, cost.

MLPerf scores a benchmark as the mean time over N repeats after dropping the fastest and the
slowest run (the olympic mean), which keeps one lucky or unlucky run from deciding the result.
Pure functions over per-run summaries (dicts as produced by ``report.summarize_run``).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


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


def config_key(summary: Mapping[str, Any]) -> tuple[str, str, str, int]:
    """What makes runs repeats of one configuration: spec, framework, backend and world size."""
    return (
        str(summary.get("spec_name", "")),
        str(summary.get("framework") or "pytorch"),
        str(summary.get("backend", "")),
        int(summary.get("workers", 1)),
    )


def score_configs(summaries: Iterable[Mapping[str, Any]]) -> list[ConfigScore]:
    """Group run summaries by (spec, framework, backend, workers), score each group over its
    repeats, and add speedup (``T(1 worker) / T(k)``) and efficiency (``speedup / k``) where the
    same spec, framework and backend has a 1-worker score."""
    groups: dict[tuple[str, str, str, int], list[Mapping[str, Any]]] = {}
    for summary in summaries:
        groups.setdefault(config_key(summary), []).append(summary)
    scores: list[ConfigScore] = []
    for (spec_name, framework, backend, workers), members in sorted(groups.items()):
        times = [
            float(m["time_to_accuracy_s"])
            for m in members
            if m.get("reached") and m.get("time_to_accuracy_s") is not None
        ]
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
    result = []
    for score in scores:
        base = baseline.get((score.spec_name, score.framework, score.backend))
        if base and score.time_to_accuracy_s:
            speedup = base / score.time_to_accuracy_s
            score = ConfigScore(
                **{**score.__dict__, "speedup": speedup, "efficiency": speedup / score.workers}
            )
        result.append(score)
    return result


def speedup_for(
    summary: Mapping[str, Any], one_worker_time_s: float | None
) -> tuple[float | None, float | None]:
    """Speedup and efficiency of one run against a 1-worker time of the same spec."""
    tta = summary.get("time_to_accuracy_s")
    if not one_worker_time_s or not tta:
        return None, None
    speedup = one_worker_time_s / float(tta)
    return speedup, speedup / max(1, int(summary.get("workers", 1)))
