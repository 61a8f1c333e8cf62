"""Scores across runs: olympic mean over repeats, speedup and efficiency, cost."""

from __future__ import annotations

import pytest

from mlbench_tui.results.model import RunResult
from mlbench_tui.results.scoring import cost_to_target, olympic_mean, score_configs, speedup
from mlbench_tui.results.table import render_results


def test_olympic_mean_drops_fastest_and_slowest() -> None:
    assert olympic_mean([10.0, 100.0, 20.0, 30.0, 1.0]) == pytest.approx(20.0)
    assert olympic_mean([3.0, 5.0]) == 4.0
    with pytest.raises(ValueError):
        olympic_mean([])


def test_speedup_and_efficiency_versus_one_worker_and_repeats() -> None:
    rows = [
        RunResult(
            spec_name="s", backend="gloo", workers=1, state="succeeded", reached=True, time_to_accuracy_s=t
        )
        for t in (100.0, 90.0, 300.0)
    ] + [
        RunResult(
            spec_name="s", backend="gloo", workers=2, state="succeeded", reached=True, time_to_accuracy_s=60.0
        ),
        RunResult(
            spec_name="s", backend="gloo", workers=2, state="failed", reached=False, time_to_accuracy_s=None
        ),
    ]
    scores = {s.workers: s for s in score_configs(rows)}
    assert scores[1].time_to_accuracy_s == 100.0  # 90 and 300 dropped
    assert scores[2].runs == 2 and scores[2].reached == 1
    assert scores[2].speedup == pytest.approx(100.0 / 60.0)
    assert scores[2].efficiency == pytest.approx(100.0 / 60.0 / 2)
    assert scores[1].speedup == pytest.approx(1.0)


def test_speedup_is_scaled_by_the_baseline_workers() -> None:
    assert speedup(100.0, 25.0, 4) == (4.0, 1.0)
    assert speedup(100.0, 50.0, 4, base_workers=2) == (4.0, 1.0)  # a 2-worker baseline
    assert speedup(None, 50.0, 2) == (None, None) and speedup(100.0, None, 2) == (None, None)


def test_frameworks_of_one_spec_are_scored_apart_and_named_in_the_table() -> None:
    rows = [
        RunResult(
            name=f"s-{tag}-gloo-{w}w",
            spec_name="s",
            framework=fw,
            backend="gloo",
            workers=w,
            state="succeeded",
            reached=True,
            time_to_accuracy_s=t,
        )
        for tag, fw, w, t in (
            ("pt", "pytorch", 1, 100.0),
            ("pt", "pytorch", 2, 50.0),
            ("tf", "tensorflow", 1, 300.0),
            ("tf", "tensorflow", 2, 200.0),
        )
    ]
    scores = {(s.framework, s.workers): s for s in score_configs(rows)}
    assert scores["pytorch", 2].speedup == pytest.approx(2.0)  # against PyTorch's own 1-worker run
    assert scores["tensorflow", 2].speedup == pytest.approx(1.5)
    table = render_results(rows)
    assert table.splitlines()[0].split()[:2] == ["RUN", "FRAMEWORK"]
    assert "s-tf-gloo-2w  tensorflow" in table
    # one framework: no FRAMEWORK column
    assert "FRAMEWORK" not in render_results(rows[:2])


def test_allreduce_sweeps_are_not_scored_against_a_goal() -> None:
    goal = {"metric": "val_global_Prec@1", "target": 70.0}
    sweeps = [RunResult(name=f"ar-{r}", spec_name="ar", task="0a", backend="gloo") for r in (0, 1)]
    missed = [
        RunResult(name="t", spec_name="t", backend="gloo", goal=goal, state="succeeded", reached=False)
    ] * 2
    # a training configuration that never reached its goal is scored ("0 reached" means something)
    assert [(s.spec_name, s.runs, s.reached) for s in score_configs(sweeps + missed)] == [("t", 2, 0)]
    table = render_results(sweeps + missed)
    assert "t gloo fp32 1w" in table and "ar gloo" not in table
    assert "left out of t gloo fp32 1w: t (goal not reached), t (goal not reached)" in table


def test_cost_to_target() -> None:
    assert cost_to_target(1800.0, 2.0) == pytest.approx(1.0)
    assert cost_to_target(1800.0, None) is None
