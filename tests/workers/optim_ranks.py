"""One rank of the optimizer equivalence check (run by tests/workers/test_optim.py, 2 ranks).

Trains a small model for a few steps with every distributed optimizer on this rank's half of a
fixed global batch and writes the final parameters to ``<out>/rank<r>.json``. Launched either
with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (gloo) or by mpiexec (mpi).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import torch
from mlbench_worker.comm import Comm, MpiComm, TorchComm
from mlbench_worker.hyperparams import OptimizerSettings
from mlbench_worker.optim import build_optimizer

STEPS = 4
GLOBAL_BATCH = 16
CASES: dict[str, dict[str, Any]] = {
    "sgd_by_model": {
        "optimizer": "centralized_sgd",
        "lr": 0.1,
        "momentum": 0.9,
        "nesterov": True,
        "weight_decay": 1e-3,
        "aggregation": "by_model",
    },
    "sgd_by_layer": {"optimizer": "centralized_sgd", "lr": 0.1, "momentum": 0.9, "aggregation": "by_layer"},
    "adam_by_model": {"optimizer": "centralized_adam", "lr": 0.01, "aggregation": "by_model"},
    "adam_by_layer": {
        "optimizer": "centralized_adam",
        "lr": 0.01,
        "adam_betas": (0.8, 0.99),
        "aggregation": "by_layer",
    },
    "powersgd_full": {"optimizer": "power_sgd", "lr": 0.1, "momentum": 0.9, "powersgd_rank": 8},
    "powersgd_rank1": {"optimizer": "power_sgd", "lr": 0.1, "momentum": 0.9, "powersgd_rank": 1},
}


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(12, 10), torch.nn.Tanh(), torch.nn.Linear(10, 6))


def global_batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(STEPS, GLOBAL_BATCH, 12, generator=g), torch.randint(
        0, 6, (STEPS, GLOBAL_BATCH), generator=g
    )


def train(case: dict[str, Any], comm: Comm) -> list[float]:
    """Run the case on this rank's shard; returns the flattened final parameters."""
    model = make_model()
    hp = dict(case)
    opt = build_optimizer(hp.pop("optimizer"), model.parameters(), comm, OptimizerSettings(**hp))
    xs, ys = global_batch()
    per = GLOBAL_BATCH // comm.world_size
    lo, hi = comm.rank * per, (comm.rank + 1) * per
    for step in range(STEPS):
        loss = torch.nn.functional.cross_entropy(model(xs[step, lo:hi]), ys[step, lo:hi])
        loss.backward()
        opt.aggregate()
        opt.step()
        opt.zero_grad()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist()


def main() -> None:
    out = Path(sys.argv[1])
    torch.set_num_threads(1)
    comm: Comm
    if "OMPI_COMM_WORLD_RANK" in os.environ:
        comm = MpiComm()
    else:
        import torch.distributed as dist

        dist.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{os.environ['MASTER_PORT']}",
            rank=int(os.environ["RANK"]),
            world_size=int(os.environ["WORLD_SIZE"]),
        )
        comm = TorchComm("gloo")
    result = {name: train(case, comm) for name, case in CASES.items()}
    (out / f"rank{comm.rank}.json").write_text(json.dumps(result))
    comm.close()


if __name__ == "__main__":
    main()
