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


def _run(name: str, workers: int, t: float | None, state: str = "succeeded", **extra: object) -> RunResult:
    goal = {"metric": "val_global_Prec@1", "target": 70.0}
    return RunResult.model_validate(
        {"name": name, "spec_name": "s", "backend": "nccl", "workers": workers, "goal": goal}
        | {"state": state, "reached": t is not None, "time_to_accuracy_s": t}
        | extra
    )


def test_scores_rest_on_succeeded_runs_and_name_the_others() -> None:
    rows = [
        _run("s-1w-r0", 1, 10.0),
        _run("s-1w-r1", 1, 11.0),
        _run("s-1w-r2", 1, 1.0, state="cancelled"),  # stopped after it reached: still left out
        _run("s-1w-r3", 1, None, state="failed", message="rank 0 failed: OOM\nTraceback ..."),
        _run("s-1w-r4", 1, None),  # succeeded without reaching the goal
    ]
    (score,) = score_configs(rows)
    assert (score.runs, score.reached, score.time_to_accuracy_s) == (5, 2, 10.5)
    assert score.counted == ("s-1w-r0", "s-1w-r1")
    assert [(lo.name, lo.reason) for lo in score.left_out] == [
        ("s-1w-r2", "cancelled"),
        ("s-1w-r3", "failed: rank 0 failed: OOM"),
        ("s-1w-r4", "goal not reached"),
    ]
    table = render_results(rows)
    assert "s nccl fp32 1w  2 of 5" in table
    assert (
        "left out of s nccl fp32 1w: s-1w-r2 (cancelled), s-1w-r3 (failed: rank 0 failed: OOM), "
        "s-1w-r4 (goal not reached)" in table
    )
    failed = next(line for line in table.splitlines() if line.startswith("s-1w-r3"))
    assert failed.split()[1] == "failed" and "Prec@1 - (goal >= 70.0): rank 0 failed: OOM  " in failed


def test_repeats_show_their_spread_and_a_wide_one_is_flagged() -> None:
    tight = [_run(f"t-{i}", 1, t, spec_name="t") for i, t in enumerate((10.0, 10.2, 9.9))]
    wide = [_run(f"w-{i}", 1, t, spec_name="w") for i, t in enumerate((10.0, 12.0, 9.0))]
    scores = {s.spec_name: s for s in score_configs(tight + wide)}
    assert scores["t"].cv == pytest.approx(0.0153, abs=1e-4) and not scores["t"].too_wide
    assert scores["w"].cv == pytest.approx(0.1478, abs=1e-4) and scores["w"].too_wide
    table = render_results(tight + wide)
    header = next(line for line in table.splitlines() if line.startswith("CONFIG"))
    assert header.split() == ["CONFIG", "RUNS", "OLYMPIC", "MEAN", "MIN", "MAX", "CV"]
    assert "t nccl fp32 1w  3 of 3  10.0 s        9.90 s  10.2 s  1.5%" in table
    assert "w nccl fp32 1w  3 of 3  10.0 s        9.00 s  12.0 s  14.8% !" in table
    assert "! spread too wide to compare (CV above 5%): w nccl fp32 1w" in table
    assert score_configs(tight[:1])[0].cv is None  # one run has no spread


def test_efficiency_compares_worker_counts_never_implementations() -> None:
    graphs = {"implementation": {"cuda_graphs": True}}
    rows = [
        _run("eager-1w", 1, 10.0),
        _run("graphs-1w", 1, 4.0, **graphs),
        _run("eager-2w", 2, 6.0),
        _run("bf16-1w", 1, 8.0, precision="bf16"),
    ]
    scores = {(s.variant, s.workers): s for s in score_configs(rows)}
    assert sorted(scores) == [("bf16", 1), ("fp32", 1), ("fp32", 2), ("fp32 graphs", 1)]
    assert scores["fp32", 2].speedup == pytest.approx(10.0 / 6.0) and scores["fp32", 2].baseline_runs == 1
    assert scores["fp32", 1].speedup == pytest.approx(1.0)
    # no other worker count to compare with: no speedup, rather than 1.00x against itself
    assert scores["fp32 graphs", 1].speedup is None and scores["bf16", 1].speedup is None
    rows_by_name = {r.split()[0]: r for r in render_results(rows).split("\n\n")[0].splitlines()[1:]}
    assert rows_by_name["graphs-1w"].split()[2:4] == ["fp32", "graphs"]
    assert " - " in rows_by_name["graphs-1w"] and "1.67x" in rows_by_name["eager-2w"]
    scores_table = render_results([*rows, _run("eager-2w-r1", 2, 7.0)]).split("\n\n")[1]
    assert (
        "s nccl fp32 2w  2 of 2  6.50 s        6.00 s  7.00 s  10.9% !  1.54x    77%         1w x1"
        in scores_table
    )
    cancelled = render_results([*rows, _run("eager-2w-r1", 2, None, state="cancelled")])
    assert "1.67x" not in next(line for line in cancelled.splitlines() if line.startswith("eager-2w-r1"))
