"""The tracker: MLBench's phases, category totals and train/validation wall time."""

from __future__ import annotations

import time

import pytest
import torch
from mlbench_worker.tracker import CATEGORIES, PHASES, Tracker


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
    for _ in range(3):
        tracker.batch_start()
        _busy(0.002)
        tracker.record("batch_load")
        _busy(0.006)
        tracker.record("fwd_pass")
        tracker.record("comp_loss")
        _busy(0.004)
        tracker.record("agg")
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
    tracker.train()
    _busy(0.02)
    tracker.validation()
    _busy(0.01)
    tracker.pause()
    _busy(0.1)
    train, val = tracker.train_time, tracker.validation_time
    assert 0.02 <= train < 0.1 and 0.01 <= val < 0.1  # the paused 100 ms counts for neither
    tracker.train()
    _busy(0.01)
    assert tracker.train_time >= train + 0.01  # includes the running interval
    assert tracker.validation_time == val
