"""``benchmarks/tracker_overhead.py``'s two steps run on the runtime's current interfaces."""

from __future__ import annotations

import torch
from mlbench_worker.timing.tracker import Tracker

from benchmarks.tracker_overhead import make_steps


def test_both_steps_train_and_only_the_tracked_one_stamps_phases() -> None:
    tracker = Tracker(torch.device("cpu"))
    tracker.train()
    step_on, step_off = make_steps(tracker)
    for _ in range(3):
        step_off()
    assert tracker.stamped == 0
    for _ in range(3):
        step_on()
    assert tracker.stamped >= 1  # the first batch is always stamped
    assert tracker.phase_times()["fwd_pass"] > 0
