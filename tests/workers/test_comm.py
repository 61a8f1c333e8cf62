"""The Comm layer gives the same answers on torch.distributed (gloo) and mpi4py (Open MPI); gradient
averaging (blocking or overlapped) and collective stop decisions work on both."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
LAUNCHERS = {
    "gloo": [str(BIN / "torchrun"), "--standalone", "--nproc_per_node", "2", "--no-python"],
    "mpi": [str(BIN / "mpiexec"), "--allow-run-as-root", "-n", "2"],
}

SCRIPT = """
import json, sys
import torch
from mlbench_worker.config import parse_config
from mlbench_worker.context import init_comm
from mlbench_worker.launch.detect import detect_rendezvous
backend = sys.argv[2]
config = parse_config({"run_id": "c", "task": "0a", "backend": backend, "world_size": 2})
comm = init_comm(config, detect_rendezvous())
r = comm.rank
out = {"rank": r, "world": comm.world_size}
for op in ("sum", "avg", "max", "min"):
    t = torch.tensor([1.0 + r, 10.0 * (r + 1)])
    comm.all_reduce(t, op)
    out[op] = t.tolist()
view = torch.arange(6, dtype=torch.float32).view(2, 3).t()  # non-contiguous: reduced through a copy
comm.all_reduce(view, "sum")
out["noncontig"] = view.tolist()
b = torch.full((3,), float(r + 5))
comm.broadcast(b, src=1)
out["broadcast"] = b.tolist()
out["gather"] = comm.allgather_object({"r": r})
out["bcast_obj"] = comm.broadcast_object(f"from {r}", src=0)
out["fp16"] = comm.supports_dtype(torch.float16)
# gradient averaging: overlapped buckets (hooks during backward) == one blocking all-reduce == mean
from mlbench_worker.optim.aggregation import ByModelAllReduce
def net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(300, 200), torch.nn.ReLU(), torch.nn.Linear(200, 10))
x = torch.randn(8, 300, generator=torch.Generator().manual_seed(r))
grads = {}
for overlap in (False, True):
    model = net()
    agg = ByModelAllReduce(comm, list(model.parameters()), overlap=overlap, bucket_mb=0.1)
    for _ in range(2):  # two steps: hooks re-arm after each aggregate
        agg.zero_grad()
        model(x).pow(2).sum().backward()
        out[f"started_in_backward_{overlap}"] = len(agg._pending)  # before aggregate() is called
        agg.aggregate()
    grads[overlap] = [p.grad.clone() for p in model.parameters()]
    out[f"buckets_{overlap}"] = len(agg._buckets)
local = net()
local(x).pow(2).sum().backward()
mean = [p.grad.clone() for p in local.parameters()]
for g in mean:
    comm.all_reduce(g, "avg")
out["overlap_equal"] = all(torch.allclose(a, b, atol=1e-5) for a, b in zip(grads[True], grads[False]))
out["mean_equal"] = all(torch.allclose(a, b, atol=1e-5) for a, b in zip(grads[True], mean))
# stop decisions are rank 0's on every rank, even when clocks and local values disagree
import time
from mlbench_worker.config import GoalConfig
from mlbench_worker.goals import StopController
start = time.time() - (100 if r == 1 else 0)  # rank 1's clock says the budget is spent
stop = StopController(comm, GoalConfig("val_global_Prec@1", 70.0), 50.0, start=start)
out["decisions"] = [int(stop.decide()), int(stop.decide({"val_global_Prec@1": 80.0 if r == 1 else 60.0}))]
rank0 = StopController(comm, GoalConfig("val_global_Prec@1", 70.0), None)
out["decisions"].append(int(rank0.decide({"val_global_Prec@1": 75.0 if r == 0 else 10.0})))
comm.barrier()
with open(f"{sys.argv[1]}/rank{r}.json", "w") as fh:
    json.dump(out, fh)
comm.close()
"""


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["gloo", "mpi"])
def test_collectives_agree_across_backends(backend: str, tmp_path: Path) -> None:
    script = tmp_path / "comm.py"
    script.write_text(SCRIPT)
    proc = subprocess.run(
        [*LAUNCHERS[backend], sys.executable, str(script), str(tmp_path), backend],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for r, out in enumerate(results):
        assert out["rank"] == r and out["world"] == 2
        assert out["sum"] == [3.0, 30.0] and out["avg"] == [1.5, 15.0]
        assert out["max"] == [2.0, 20.0] and out["min"] == [1.0, 10.0]
        assert out["noncontig"] == [[0.0, 6.0], [2.0, 8.0], [4.0, 10.0]]
        assert out["broadcast"] == [6.0, 6.0, 6.0]
        assert out["gather"] == [{"r": 0}, {"r": 1}] and out["bcast_obj"] == "from 0"
        assert out["fp16"] is (backend == "gloo")  # MLBench skipped fp16 on MPI too
        assert out["buckets_True"] == out["buckets_False"] > 1
        assert out["overlap_equal"] and out["mean_equal"]
        assert out["decisions"] == [0, 0, 1]  # CONTINUE, CONTINUE, GOAL: rank 0's view everywhere
        assert (
            out["started_in_backward_True"] == out["buckets_True"] and out["started_in_backward_False"] == 0
        )
