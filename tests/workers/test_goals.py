"""Goals and collective stop decisions: ranks always agree, even when their clocks do not."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlbench_worker.comm import SingleComm
from mlbench_worker.config import GoalConfig
from mlbench_worker.goals import Stop, StopController

TORCHRUN = str(Path(sys.executable).with_name("torchrun"))


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


SCRIPT = """
import json, os, sys, time
import torch.distributed as dist
from mlbench_worker.comm import TorchComm
from mlbench_worker.config import GoalConfig
from mlbench_worker.goals import StopController
dist.init_process_group("gloo")
comm = TorchComm("gloo")
# rank 1's clock says the budget is spent, rank 0's does not; the goal value differs per rank too
start = time.time() - (100 if comm.rank == 1 else 0)
stop = StopController(comm, GoalConfig("val_global_Prec@1", 70.0), 50.0, start=start)
out = [int(stop.decide()), int(stop.decide({"val_global_Prec@1": 80.0 if comm.rank == 1 else 60.0}))]
rank0 = StopController(comm, GoalConfig("val_global_Prec@1", 70.0), None)
out.append(int(rank0.decide({"val_global_Prec@1": 75.0 if comm.rank == 0 else 10.0})))
with open(os.path.join(sys.argv[1], f"rank{comm.rank}.json"), "w") as fh:
    json.dump(out, fh)
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_two_ranks_take_rank_zeros_decision(tmp_path: Path) -> None:
    script = tmp_path / "decide.py"
    script.write_text(SCRIPT)
    proc = subprocess.run(
        [TORCHRUN, "--standalone", "--nproc_per_node", "2", str(script), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    decisions = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert decisions[0] == decisions[1] == [Stop.CONTINUE, Stop.CONTINUE, Stop.GOAL]
