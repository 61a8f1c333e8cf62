"""Goals and collective stop decisions: ranks always agree, even when their clocks do not."""

from __future__ import annotations

import math
import time

import pytest
from mlbench_worker.comm import SingleComm
from mlbench_worker.config import GoalConfig
from mlbench_worker.goals import Stop, StopController


def test_goal_directions_and_nan() -> None:
    top1 = GoalConfig("val_global_Prec@1", 70.0, "max")
    ppl = GoalConfig("val_global_Perplexity", 90.0, "min")
    assert top1.reached(70.0) and not top1.reached(69.99) and not top1.reached(math.nan)
    assert ppl.reached(89.5) and not ppl.reached(90.1) and not ppl.reached(math.nan)


def test_decision_from_global_metrics_and_time_budget() -> None:
    stop = StopController(SingleComm(), GoalConfig("val_global_Prec@1", 70.0), None)
    assert stop.decide({"val_global_Prec@1": 55.0}) == Stop.CONTINUE
    assert stop.decide({"val_global_Prec@1": 71.0}) == Stop.GOAL
    late = StopController(SingleComm(), None, 5.0, start=time.time() - 10)
    assert late.decide() == Stop.MAX_TIME and late.decide({"val_global_loss": 1.0}) == Stop.MAX_TIME
    with pytest.raises(KeyError, match="not produced by this task"):
        stop.decide({"val_global_loss": 1.0})


# The two-rank check (rank 0's decision wins on every rank) runs in test_comm.py on gloo and MPI.
