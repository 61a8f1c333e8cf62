"""Regressed or not, on generated samples of known difference (seeded): the bootstrap's interval
holds the true change, a 10% slowdown is called with repeats and an equal pair is not, Mann-
Whitney agrees, and the repeats needed to see 5% follow the measured noise."""

from __future__ import annotations

import random

import pytest

from mlbench_tui.results.compare import (
    ONE_RUN,
    RUN_NOISE_FLOOR,
    RunSamples,
    Side,
    compare_figure,
    mann_whitney,
    regressions,
    repeats_needed,
)
from mlbench_tui.results.reference_figures import BUSBW, STEP_TIME, TIME_TO_ACCURACY


def runs(label: str, n: int, median: float, *, run_noise: float, step_noise: float, seed: int) -> Side:
    """``n`` runs whose medians scatter by ``run_noise`` around ``median``, each of 200 steps that
    scatter by ``step_noise`` around its own median."""
    rng = random.Random(seed)
    made = []
    for i in range(n):
        centre = median * (1 + rng.gauss(0, run_noise))
        steps = tuple(centre * (1 + rng.gauss(0, step_noise)) for _ in range(200))
        made.append(RunSamples(f"{label}-r{i}", sorted(steps)[100], steps))
    return Side(label, tuple(made))


def test_a_ten_percent_slowdown_is_called_regressed_with_its_interval() -> None:
    base = runs("base", 5, 100.0, run_noise=0.01, step_noise=0.05, seed=1)
    slow = runs("slow", 5, 110.0, run_noise=0.01, step_noise=0.05, seed=2)
    found = compare_figure(STEP_TIME, base, slow)
    assert found.verdict == "regressed" and found.worse and found.basis == "runs"
    assert found.low < 0.10 < found.high and found.low > 0.05  # the true change is inside
    assert found.mann_whitney_on == "runs" and found.mann_whitney_p is not None
    assert found.mann_whitney_p < 0.05
    assert found.noise_basis == "runs" and found.repeats_needed is not None
    assert regressions([found], 5.0) == [found] and regressions([found], 15.0) == []
    faster = compare_figure(STEP_TIME, slow, base)
    assert faster.verdict == "improved" and not faster.worse


def test_equal_configurations_show_no_significant_difference() -> None:
    a = runs("a", 5, 100.0, run_noise=0.01, step_noise=0.05, seed=3)
    b = runs("b", 5, 100.0, run_noise=0.01, step_noise=0.05, seed=4)
    found = compare_figure(STEP_TIME, a, b)
    assert found.verdict == "no significant difference" and found.low < 0 < found.high


def test_a_rate_that_fell_regressed() -> None:
    base = Side("b", tuple(RunSamples(f"b{i}", v, ()) for i, v in enumerate((10.0, 10.2, 9.9, 10.1))))
    fell = Side("c", tuple(RunSamples(f"c{i}", v, ()) for i, v in enumerate((8.0, 8.1, 7.9, 8.2))))
    found = compare_figure(BUSBW, base, fell)
    assert found.verdict == "regressed" and found.change == pytest.approx(8.05 / 10.05 - 1)


def test_one_run_a_side_resamples_its_steps_with_an_assumed_run_to_run_noise() -> None:
    base = runs("base", 1, 100.0, run_noise=0.0, step_noise=0.05, seed=5)
    slow = runs("slow", 1, 110.0, run_noise=0.0, step_noise=0.05, seed=6)
    found = compare_figure(STEP_TIME, base, slow)
    assert found.basis == "samples" and found.mann_whitney_on == "samples"
    assert found.verdict == "regressed" and found.notes == (f"step: {ONE_RUN}",)
    assert found.noise == RUN_NOISE_FLOOR and "assumed run-to-run noise 2.0%" in found.row()["REPEATS FOR 5%"]
    # 200 steps a side would see 3% on their own; the noise one run cannot show keeps it from a call
    near = compare_figure(STEP_TIME, base, runs("near", 1, 103.0, run_noise=0.0, step_noise=0.05, seed=6))
    assert near.verdict == "no significant difference" and near.low < 0.03 < near.high
    # a time to accuracy is one value a run: with one run a side there is nothing to resample
    tta = compare_figure(
        TIME_TO_ACCURACY, Side("b", (RunSamples("b", 60.0),)), Side("c", (RunSamples("c", 66.0),))
    )
    assert tta.verdict == "not comparable" and tta.notes and "repeat the runs" in tta.notes[0]


def test_the_bootstrap_is_seeded() -> None:
    base = runs("base", 3, 100.0, run_noise=0.02, step_noise=0.05, seed=7)
    cand = runs("cand", 3, 103.0, run_noise=0.02, step_noise=0.05, seed=8)
    first, again = (
        compare_figure(STEP_TIME, base, cand, seed=11),
        compare_figure(STEP_TIME, base, cand, seed=11),
    )
    assert (first.low, first.high) == (again.low, again.high)


def test_repeats_needed_follow_the_noise() -> None:
    # two-sided 5%, 80% power, 5% change: 2 x (2.80 x cv / 0.05)^2 runs a side
    assert repeats_needed(0.05) == 16 and repeats_needed(0.02) == 3 and repeats_needed(0.001) == 2
    assert repeats_needed(0.10) == 63


def test_mann_whitney_matches_known_values() -> None:
    # no overlap at 5 a side: exact p = 2/252 = 0.0079; the normal approximation gives ~0.012
    assert mann_whitney([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) == pytest.approx(0.0122, abs=0.001)
    assert mann_whitney([1, 2, 3], [1, 2, 3]) == pytest.approx(1.0)
    assert mann_whitney([], [1.0]) is None and mann_whitney([2.0, 2.0], [2.0]) is None
