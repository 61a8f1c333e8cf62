"""The tracker: MLBench's phases, category totals and train/validation wall time."""

from __future__ import annotations

import time

import pytest
import torch
from mlbench_worker.timing.phase_clock import CpuClock
from mlbench_worker.timing.tracker import CATEGORIES, PHASES, Tracker


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_phase_names_and_categories_are_mlbench_s() -> None:
    assert PHASES == ("batch_load", "fwd_pass", "comp_loss", "backprop", "agg", "opt_step", "comp_metrics")
    compute = {p for p, c in CATEGORIES.items() if c == "compute"}
    assert compute == {"fwd_pass", "comp_loss", "backprop", "opt_step"}
    assert CATEGORIES["agg"] == "communication" and CATEGORIES["batch_load"] == "preprocess"
    assert CATEGORIES["comp_metrics"] == "metrics"


def test_each_phase_gets_the_time_since_the_previous_stamp() -> None:
    tracker = Tracker(torch.device("cpu"))
    tracker.train()
    for _, record in tracker.each_batch(range(3)):
        assert record is not None  # the first batches are always stamped (calibration)
        _busy(0.002)
        record("batch_load")
        _busy(0.006)
        record("fwd_pass")
        record("comp_loss")
        _busy(0.004)
        record("agg")
        _busy(0.01)  # between batches: charged to nothing
    tracker.pause()
    phases = tracker.phase_times()
    # lower bounds only: a loaded machine may stretch any interval, never shrink it
    assert phases["batch_load"] >= 0.006 and phases["fwd_pass"] >= 0.018 and phases["agg"] >= 0.012
    assert phases["backprop"] == 0.0
    charged = sum(phases.values())
    assert charged <= tracker.train_time - 0.03  # the busy gaps between batches are charged to no phase
    totals = tracker.totals()
    assert totals["time_compute"] == pytest.approx(phases["fwd_pass"] + phases["comp_loss"])
    assert totals["time_communication"] == phases["agg"]
    assert totals["time_preprocess"] == phases["batch_load"]
    assert totals["time_train"] >= 0.066  # wall time includes the gaps between batches
    assert {f"phase_{p}" for p in PHASES} <= set(totals) and tracker.batches == 3


def test_train_and_validation_time_are_separate_and_pause_stops_both() -> None:
    tracker = Tracker()
    started = time.perf_counter()
    tracker.train()
    _busy(0.02)
    tracker.validation()
    _busy(0.01)
    tracker.pause()
    paused = time.perf_counter()
    _busy(0.1)
    train, val = tracker.train_time, tracker.validation_time
    assert train >= 0.02 and val >= 0.01
    # the paused 100 ms counts for neither: both lie within our own stamps around the switches
    # (not a fixed bound: a loaded machine may stretch any interval)
    assert train + val <= paused - started
    tracker.train()
    _busy(0.01)
    assert tracker.train_time >= train + 0.01  # includes the running interval
    assert tracker.validation_time == val


class _FakeClock:
    """A deterministic ``perf_counter``: tests advance it by the phase durations they script."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _scripted_batches(tracker: Tracker, clock: _FakeClock, n: int) -> dict[str, float]:
    """Run ``n`` batches through ``each_batch`` with known phase durations; returns the true
    totals. ``agg`` alternates 10/30 us so a sampler that aliased with a period of 2 would be biased."""
    truth = dict.fromkeys(PHASES, 0.0)
    for i, (_, record) in enumerate(tracker.each_batch(range(n))):
        for phase, seconds in (("batch_load", 5e-6), ("fwd_pass", 40e-6), ("agg", 10e-6 if i % 2 else 30e-6)):
            clock.now += seconds
            truth[phase] += seconds
            if record:
                record(phase)
        clock.now += 7e-6  # between batches: no phase
    return truth


def test_micro_steps_are_sampled_and_phase_totals_stay_unbiased() -> None:
    clock = _FakeClock()
    tracker = Tracker(torch.device("cpu"), seed=3, clock=CpuClock(PHASES, now=clock))
    truth = _scripted_batches(tracker, clock, 20_000)
    # a 75 us step: the stamps (~5 us) would cost ~7%; sampling brings them under 0.1%
    assert tracker.sample_every == 64 and tracker.batches == 20_000  # the cap
    assert 20_000 / 80 < tracker.stamped < 20_000 / 50
    estimate = tracker.phase_times()
    for phase in ("batch_load", "fwd_pass", "agg"):
        assert estimate[phase] == pytest.approx(truth[phase], rel=0.05)
    assert estimate["backprop"] == 0.0


def test_steps_that_dwarf_the_stamps_are_all_stamped_exactly() -> None:
    clock = _FakeClock()
    tracker = Tracker(torch.device("cpu"), clock=CpuClock(PHASES, now=clock))
    for _, record in tracker.each_batch(range(200)):
        clock.now += 0.05  # a 50 ms step (ResNet-20 on CPU is slower still)
        assert record is not None
        record("fwd_pass")
    assert tracker.sample_every == 1 and tracker.stamped == tracker.batches == 200
    assert tracker.phase_times()["fwd_pass"] == pytest.approx(10.0)


def test_fixed_sampling_and_the_training_loop_s_batch_count() -> None:
    clock = _FakeClock()
    every_batch = Tracker(sample_every=1, clock=CpuClock(PHASES, now=clock))
    truth = _scripted_batches(every_batch, clock, 101)
    assert every_batch.stamped == every_batch.batches == 101
    assert every_batch.phase_times() == pytest.approx(truth)
    sampled = Tracker(sample_every=4, seed=1, clock=CpuClock(PHASES, now=clock))
    _scripted_batches(sampled, clock, 4000)
    assert 800 < sampled.stamped < 1200 and sampled.sample_every == 4
    with pytest.raises(ValueError, match="sample_every"):
        Tracker(sample_every=0)


def test_the_loop_counts_batches_and_an_exhausted_loader_leaves_no_stamp() -> None:
    clock = _FakeClock()
    tracker = Tracker(sample_every=1, clock=CpuClock(PHASES, now=clock))
    for epoch in range(3):
        for _batch, record in tracker.each_batch(range(5)):
            clock.now += 1e-3
            assert record is not None
            record("fwd_pass")
        assert tracker.batches == tracker.stamped == 5 * (epoch + 1)  # the loader's end is no batch
    for n, (_batch, record) in enumerate(tracker.each_batch(range(100))):  # a run stopped mid-epoch
        if n == 7:
            break
        assert record is not None
        record("fwd_pass")
    assert tracker.batches == 15 + 8 and tracker.stamped == 15 + 8
