"""Live progress lines: phase, epoch, metric against the goal, ETA; plain lines only on change."""

from __future__ import annotations

import io

import pytest
from mlbench_worker import wire

from mlbench_tui.plan import GoalPlan
from mlbench_tui.runs.progress import ProgressPrinter, RunProgress
from mlbench_tui.spec.tasks import TASKS

GOAL = GoalPlan(kind="light", metric="val_global_Prec@1", target=70.0, direction="max")


def test_eta_extrapolates_the_goal_metric_and_respects_max_epochs() -> None:
    progress = RunProgress("qs", GOAL, max_epochs=10, state="running")
    progress.on_event(wire.RunStart(), 0.0)
    assert progress.eta_s() is None
    progress.on_metric("val_global_Prec@1", 30.0, 1, 10.0)
    progress.on_metric("val_global_Prec@1", 50.0, 2, 20.0)  # +20 per epoch, 10 s per epoch
    assert progress.eta_s() == pytest.approx(10.0)
    line = progress.line()
    assert "epoch 2/10" in line and "Prec@1 50 (goal >= 70.0)" in line and "ETA to goal 10s" in line
    capped = RunProgress("qs", GOAL, max_epochs=3, state="running")
    capped.on_metric("val_global_Prec@1", 10.0, 1, 10.0)
    capped.on_metric("val_global_Prec@1", 11.0, 2, 20.0)  # 59 epochs at this pace, but only 1 left
    assert capped.eta_s() == pytest.approx(10.0)
    capped.state, capped.phase = "running", "training"
    assert "goal not in reach at this pace: max_epochs in 10s" in capped.line()  # never an ETA to the goal


def test_min_goal_and_phases() -> None:
    progress = RunProgress(
        "lm", GoalPlan(kind="light", metric="val_global_Perplexity", target=90, direction="min")
    )
    progress.state = "running"
    progress.on_event(wire.Environment(), 0.0)
    assert progress.phase == "setting up"
    progress.on_event(wire.EpochEnd(epoch=4), 5.0)
    progress.on_event(wire.RankFailed(rank=1), 6.0)
    assert progress.phase == "rank 1 failed" and progress.epoch == 4
    assert "Perplexity - (goal <= 90.0)" in progress.line()


def test_plain_printer_writes_only_changes() -> None:
    stream = io.StringIO()
    printer = ProgressPrinter(stream)
    progress = RunProgress("ar", None, total_steps=4, sweep=TASKS["0a"].sweep, state="running")
    printer.update(progress)
    printer.update(progress)
    progress.done_steps = 2
    printer.update(progress)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and "0/4 sizes" in lines[0] and "2/4 sizes" in lines[1]
    ProgressPrinter(stream, quiet=True).note("hidden")
    assert "hidden" not in stream.getvalue()


def test_a_one_rank_allreduce_says_it_reports_latency_only() -> None:
    progress = RunProgress("ar", None, total_steps=4, sweep=TASKS["0a"].sweep, state="running")
    progress.on_event(wire.AllreduceSweep(latency_only=False, busbw_ceiling_gbps=1000.0), 0.0)
    assert "latency only" not in progress.line()
    progress.on_event(wire.AllreduceSweep(latency_only=True, world_size=1), 0.0)
    assert "0/4 sizes  latency only (1 rank moves no data)" in progress.line()


def test_parallel_runs_only_while_cores_allow() -> None:
    from mlbench_tui.plan import DataPlan, ResourcesPlan, RunPlan
    from mlbench_tui.runs.plans import fits

    def plan(workers: int, threads: int = 1, gpus: int = 0) -> RunPlan:
        return RunPlan(
            name=f"p-gloo-{workers}w",
            spec_name="p",
            spec_hash="h",
            task="0a",
            task_name="allreduce",
            backend="gloo",
            workers=workers,
            seed=0,
            goal=None,
            resources=ResourcesPlan(threads_per_rank=threads, gpus=gpus),
            data=DataPlan(source="synthetic"),
            hyperparameters={},
            target={"kind": "local"},
        )

    assert fits(plan(8), [], parallel=False, cpu_count=2)  # a lone run always starts (oversubscribed)
    assert not fits(plan(1), [plan(1)], parallel=False, cpu_count=16)  # in order by default
    assert fits(plan(2), [plan(1)], parallel=True, cpu_count=4)
    assert not fits(plan(2, threads=2), [plan(1)], parallel=True, cpu_count=4)
    # two GPU runs side by side would both count GPUs from the first: never at once
    assert not fits(plan(1, gpus=1), [plan(1, gpus=1)], parallel=True, cpu_count=16)
    assert fits(plan(1, gpus=1), [plan(1)], parallel=True, cpu_count=16)


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_tty_printer_rewrites_one_live_line_for_all_active_runs() -> None:
    stream = _Tty()
    printer = ProgressPrinter(stream)
    first, second = RunProgress("a", None, state="running"), RunProgress("b", None, state="running")
    printer.update(first)
    printer.update(second)
    assert stream.getvalue().rsplit("\r", 1)[-1].startswith("a ") and " | b " in stream.getvalue()
    printer.done(first)
    tail = stream.getvalue().rsplit("\n", 1)
    assert tail[0].rsplit("\r", 1)[-1].startswith("a ")  # the final line of 'a' stays
    assert tail[1].startswith("b ")  # the live line now shows only 'b'
