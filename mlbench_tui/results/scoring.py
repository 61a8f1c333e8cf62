"""Scores across runs: olympic mean over repeats, speedup and efficiency versus one worker, cost.

MLPerf scores a benchmark as the mean time over N repeats after dropping the fastest and the
slowest run (the olympic mean), which keeps one lucky or unlucky run from deciding the result.
Pure functions over ``RunResult``s; ``speedup`` is the one definition of speedup and efficiency.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from mlbench_tui.lifecycle import RunState
from mlbench_tui.results.model import RunResult
from mlbench_tui.spec.tasks import TASKS


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


SPREAD_LIMIT = 0.05
"""A configuration whose repeats vary by more than this coefficient of variation is too noisy to compare."""


@dataclass(frozen=True)
class LeftOut:
    """A run an aggregate does not rest on, and why (``cancelled``, ``failed: ...``, ``goal not reached``)."""

    name: str
    reason: str


def left_out_reason(result: RunResult) -> str | None:
    """Why ``result`` does not count in an aggregate (only succeeded runs that reached their goal,
    if they had one, do); None when it counts."""
    if not result.succeeded:
        reason = result.reason if result.state is RunState.FAILED else None
        return f"{result.state}: {reason}" if reason else str(result.state)
    if result.goal is not None and not result.reached:
        return "goal not reached"
    return None


def variation(values: Sequence[float]) -> float | None:
    """Coefficient of variation (sample standard deviation over the mean); None below 2 values."""
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    return statistics.stdev(values) / mean if mean else None


@dataclass(frozen=True)
class ConfigScore:
    """The score of one configuration (spec, framework, backend, workers, variant, network) over
    its repeats: only succeeded runs that reached the goal count; the others are named in ``left_out``."""

    spec_name: str
    framework: str
    backend: str
    workers: int
    runs: int
    reached: int  # the runs the score rests on
    time_to_accuracy_s: float | None  # olympic mean over the repeats that count
    stdev_s: float | None
    min_s: float | None
    max_s: float | None
    speedup: float | None = None
    efficiency: float | None = None
    variant: str = "fp32"
    cv: float | None = None
    counted: tuple[str, ...] = ()
    left_out: tuple[LeftOut, ...] = ()
    baseline_runs: int | None = None  # the 1-worker runs the speedup rests on
    network: str = ""  # the links (RunResult.network_label); '' for the machine's own network

    @property
    def too_wide(self) -> bool:
        """The repeats vary too much (CV above ``SPREAD_LIMIT``) for the score to be compared."""
        return self.cv is not None and self.cv > SPREAD_LIMIT

    @property
    def label(self) -> str:
        framework = "" if self.framework == "pytorch" else f"{self.framework} "
        network = f" {self.network}" if self.network else ""
        return f"{self.spec_name} {framework}{self.backend} {self.variant} {self.workers}w{network}"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"too_wide": self.too_wide}


def speedup(
    base_time_s: float | None, time_s: float | None, workers: int, base_workers: int = 1
) -> tuple[float | None, float | None]:
    """Speedup ``T(base) / T(run)`` scaled by the baseline's workers (MLBench compares against
    1 worker), and efficiency ``speedup / workers``; (None, None) unless both times are known."""
    if not base_time_s or not time_s:
        return None, None
    value = base_time_s / time_s * base_workers
    return value, value / max(1, workers)


ConfigKey = tuple[str, str, str, int, str, str]


def config_key(result: RunResult) -> ConfigKey:
    """What makes runs repeats of one configuration: spec, framework, backend, world size, variant
    (precision, CUDA graphs) and network: efficiency compares worker counts, never implementations
    or links."""
    return (
        result.spec_name,
        result.framework,
        result.backend,
        result.workers,
        result.variant,
        result.network_label,
    )


def reached_time(result: RunResult) -> float | None:
    """The run's time to accuracy when it succeeded and reached its goal, else None."""
    return result.time_to_accuracy_s if result.reached and result.succeeded else None


def is_sweep(result: RunResult) -> bool:
    """A run without a goal that measured all-reduce curves, or any run of a sweep task such as 0a
    (failed ones too): it has no time to accuracy; its repeats are aggregated per message size
    (``results.allreduce``)."""
    task = TASKS.get(result.task)
    return result.goal is None and ((task is not None and task.sweep is not None) or bool(result.allreduce))


def _family(score: ConfigScore) -> tuple[str, str, str, str, str]:
    """The configurations a speedup compares: the same spec, framework, backend, variant and
    network (a networked run falls back to the family's 1-worker run, which has no network)."""
    return (score.spec_name, score.framework, score.backend, score.variant, score.network)


def score_configs(results: Iterable[RunResult]) -> list[ConfigScore]:
    """Group results by configuration (``config_key``), score each group over the repeats that
    count, and add speedup and efficiency where the same spec, framework, backend and variant
    has a 1-worker score and another worker count to compare it with; a configuration on
    emulated links compares with the 1-worker score on its links, else on none (one rank has no
    link). All-reduce sweeps (``is_sweep``) are left out: they have no goal to score."""
    groups: dict[ConfigKey, list[RunResult]] = {}
    for result in results:
        if not is_sweep(result):
            groups.setdefault(config_key(result), []).append(result)
    scores: list[ConfigScore] = []
    for (spec_name, framework, backend, workers, variant, network), members in sorted(groups.items()):
        counted = [m for m in members if reached_time(m) is not None]
        times = [m.time_to_accuracy_s for m in counted if m.time_to_accuracy_s is not None]
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
                variant=variant,
                network=network,
                cv=variation(times),
                counted=tuple(m.name for m in counted),
                left_out=tuple(
                    LeftOut(m.name, why) for m in members if (why := left_out_reason(m)) is not None
                ),
            )
        )
    baseline = {_family(s): s for s in scores if s.workers == 1 and s.time_to_accuracy_s is not None}
    counts: dict[tuple[str, str, str, str, str], set[int]] = {}
    for score in scores:
        if score.time_to_accuracy_s is not None:
            counts.setdefault(_family(score), set()).add(score.workers)
    scored = []
    for score in scores:
        base = baseline.get(_family(score)) or baseline.get((*_family(score)[:4], ""))
        compared = counts.get(_family(score), set()) | ({1} if base is not None else set())
        if base is not None and len(compared) > 1:
            gain, efficiency = speedup(base.time_to_accuracy_s, score.time_to_accuracy_s, score.workers)
            if gain is not None:
                score = replace(score, speedup=gain, efficiency=efficiency, baseline_runs=base.reached)
        scored.append(score)
    return scored
