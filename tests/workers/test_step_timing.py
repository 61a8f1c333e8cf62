"""Timed steps: every stamped step after the task's warm-up, its seconds from its start to the next
batch's and its all-reduce seconds, on the CPU clock and on the CUDA clock's bookkeeping (fed
recorded event timestamps on a CPU: the same code the GPU runs), and reported by the training
loop as ``timed_step_s``/``timed_step_comm_s`` at their step numbers."""

from __future__ import annotations

from typing import Any

import pytest
from mlbench_worker.timing import phase_clock
from mlbench_worker.timing.phase_clock import CpuClock, CudaClock, TimedStep
from mlbench_worker.timing.tracker import PHASES, Tracker
from mlbench_worker.wire import MODEL_FLOPS, TIMED_STEP, TIMED_STEP_COMM


class Timeline:
    """A scripted device timeline: events record its current time when recorded."""

    def __init__(self) -> None:
        self.now = 0.0
        self.synced = 0

    def event(self) -> FakeEvent:
        return FakeEvent(self)


class FakeEvent:
    """``torch.cuda.Event``'s surface: record, synchronize, elapsed_time in milliseconds."""

    def __init__(self, timeline: Timeline) -> None:
        self.timeline = timeline
        self.at: float | None = None

    def record(self) -> None:
        self.at = self.timeline.now

    def synchronize(self) -> None:
        self.timeline.synced += 1

    def elapsed_time(self, end: FakeEvent) -> float:
        assert self.at is not None and end.at is not None, "an event read before it was recorded"
        return (end.at - self.at) * 1000.0


def cuda_clock(timeline: Timeline) -> CudaClock:
    return CudaClock(PHASES, event=timeline.event, synchronize=lambda: None)


def cpu_clock(timeline: Timeline) -> CpuClock:
    return CpuClock(PHASES, now=lambda: timeline.now)


CLOCKS = [pytest.param(cpu_clock, id="cpu"), pytest.param(cuda_clock, id="cuda-bookkeeping")]


def run_steps(tracker: Tracker, timeline: Timeline, n: int, *, between: float = 1e-3) -> None:
    """``n`` batches of 10 ms: load 1 ms, forward 5 ms, all-reduce 3 ms, optimizer 1 ms (step i
    takes i us longer, so each timed step is recognisable), then ``between`` outside any phase."""
    for i, (_, record) in enumerate(tracker.each_batch(range(n))):
        phases = (("batch_load", 1e-3), ("fwd_pass", 5e-3 + i * 1e-6), ("agg", 3e-3), ("opt_step", 1e-3))
        for phase, seconds in phases:
            timeline.now += seconds
            if record:
                record(phase)
        timeline.now += between


@pytest.mark.parametrize("make", CLOCKS)
def test_steps_after_the_warm_up_are_timed_start_to_start_with_their_all_reduce(make: Any) -> None:
    timeline = Timeline()
    tracker = Tracker(sample_every=1, clock=make(timeline), warmup_steps=3)
    run_steps(tracker, timeline, 8)
    tracker.phase_times()  # resolves a GPU clock's events
    steps = tracker.take_steps()
    assert [s.step for s in steps] == [4, 5, 6, 7, 8]  # steps 1-3 are the warm-up
    # start to the next start: the 10 ms of phases, the 1 ms between batches
    assert [round(s.seconds * 1e6) for s in steps] == [11_003, 11_004, 11_005, 11_006, 11_007]
    assert all(s.comm_s == pytest.approx(3e-3) for s in steps)
    assert all(s.seconds - s.comm_s <= s.seconds for s in steps)
    assert tracker.take_steps() == []  # handed over once


@pytest.mark.parametrize("make", CLOCKS)
def test_unstamped_batches_end_the_stamped_one_and_are_not_timed(make: Any) -> None:
    timeline = Timeline()
    tracker = Tracker(sample_every=4, seed=2, clock=make(timeline))
    run_steps(tracker, timeline, 400)
    tracker.phase_times()
    steps = tracker.take_steps()
    assert len(steps) == tracker.stamped  # one timed step per stamped batch, none for the others
    # each ends at the next batch's start, stamped or not (step n's forward is n - 1 us longer)
    assert all(s.seconds == pytest.approx(11e-3 + (s.step - 1) * 1e-6, abs=1e-9) for s in steps)


@pytest.mark.parametrize("make", CLOCKS)
def test_a_step_that_held_a_capture_or_ended_the_epoch_is_not_mixed_in(make: Any) -> None:
    timeline = Timeline()
    tracker = Tracker(sample_every=1, clock=make(timeline))
    tracker.train()
    for i, (_, record) in enumerate(tracker.each_batch(range(4))):
        assert record is not None
        timeline.now += 2e-3
        record("fwd_pass")
        if i == 1:
            with tracker.aside():  # a CUDA-graph capture inside step 2
                timeline.now += 5.0
        timeline.now += 1e-3
        record("opt_step")
    timeline.now += 60.0  # validation after the epoch: not part of step 4
    tracker.phase_times()
    steps = tracker.take_steps()
    assert [s.step for s in steps] == [1, 3, 4]
    assert all(s.seconds == pytest.approx(3e-3) for s in steps)


@pytest.mark.parametrize("make", CLOCKS)
def test_a_loop_stopped_early_ends_its_last_step_and_the_next_epoch_starts_afresh(make: Any) -> None:
    timeline = Timeline()
    tracker = Tracker(sample_every=1, clock=make(timeline))
    for n, (_, record) in enumerate(tracker.each_batch(range(100))):
        assert record is not None
        timeline.now += 1e-3
        record("fwd_pass")
        if n == 2:
            break  # max_time decided after step 3
    timeline.now += 10.0
    run_steps(tracker, timeline, 2)
    tracker.phase_times()
    steps = tracker.take_steps()
    assert [s.step for s in steps] == [1, 2, 3, 4, 5]
    assert steps[2].seconds == pytest.approx(1e-3)  # step 3 ended with the loop, not 10 s later


def test_the_cuda_clock_resolves_in_bulk_and_keeps_an_open_step_across_resolves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(phase_clock, "RESOLVE_EVERY", 5)  # resolve in the middle of steps
    timeline = Timeline()
    clock = cuda_clock(timeline)
    tracker = Tracker(sample_every=1, clock=clock)
    run_steps(tracker, timeline, 6)
    assert timeline.synced >= 4  # several bulk resolves, each one wait
    tracker.phase_times()
    steps = tracker.take_steps()
    assert [s.step for s in steps] == [1, 2, 3, 4, 5, 6]
    assert [round(s.seconds * 1e6) for s in steps] == [11_000, 11_001, 11_002, 11_003, 11_004, 11_005]
    assert all(s.comm_s == pytest.approx(3e-3) for s in steps)
    assert clock.totals["agg"] == pytest.approx(6 * 3e-3)


def test_the_training_loop_reports_each_timed_step_at_its_number() -> None:
    from support.trainers import single_rank_context

    hp = {"batch_size": 16, "max_epochs": 2, "timing_warmup_steps": 3}
    data = {"source": "synthetic", "options": {"train_samples": 128, "val_samples": 32, "features": 16}}
    ctx, reporter = single_rank_context("2a", hp, data, None)
    from mlbench_worker.tasks import logreg

    outcome = logreg.run(ctx)
    assert outcome.status == "success"
    timed = [(v, s) for n, v, s in reporter.metrics if n == TIMED_STEP]
    comm = {s: v for n, v, s in reporter.metrics if n == TIMED_STEP_COMM}
    # 8 steps per epoch, 2 epochs: steps 4..16 timed (calibration stamps every batch)
    assert sorted(s for _, s in timed) == list(range(4, 17))
    assert all(v > 0 and 0 <= comm[s] <= v for v, s in timed)
    # the first step's model FLOPs, counted once: a 16-feature linear model on 16 samples, its
    # forward matrix product (2 x 16 x 16) and the weight's gradient (the same; the input needs none)
    (flops,) = [(v, s) for n, v, s in reporter.metrics if n == MODEL_FLOPS]
    assert flops == (2 * 2 * 16 * 16, 1)


def test_timed_step_is_a_plain_record() -> None:
    assert TimedStep(3, 0.01, 0.002) == TimedStep(step=3, seconds=0.01, comm_s=0.002)
