"""Distributed optimizers: 2 real ranks stay in sync and match a single-process reference.

Both ranks train on their halves of the same global batch; the result must equal one process
training on the whole batch with the stock torch optimizer (SGD, Adam, and PowerSGD at full
rank, which is exact), and rank-1 PowerSGD must equal its own single-process run on the global
batch (PowerSGD's output depends only on the mean gradient) while differing from exact SGD.
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from mlbench_worker.comm import SingleComm
from mlbench_worker.hyperparams import OptimizerSettings
from mlbench_worker.optim import build_optimizer
from mlbench_worker.optim.powersgd import PowerSGDAggregator

sys.path.insert(0, str(Path(__file__).parent))
import optim_ranks

SCRIPT = Path(__file__).parent / "optim_ranks.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_gloo(out: Path) -> None:
    port = _free_port()
    procs = []
    for rank in range(2):
        env = {
            **os.environ,
            "RANK": str(rank),
            "WORLD_SIZE": "2",
            "MASTER_PORT": str(port),
            "OMP_NUM_THREADS": "1",
        }
        procs.append(subprocess.Popen([sys.executable, str(SCRIPT), str(out)], env=env))
    for p in procs:
        assert p.wait(timeout=120) == 0


def _reference(case: dict[str, Any]) -> torch.Tensor:
    """One process, whole global batch, the stock torch optimizer (no aggregation at all)."""
    model = optim_ranks.make_model()
    hp = dict(case)
    name = hp.pop("optimizer")
    params = list(model.parameters())
    if name == "centralized_adam":
        betas = hp.get("adam_betas", [0.9, 0.999])
        opt: torch.optim.Optimizer = torch.optim.Adam(params, lr=hp["lr"], betas=(betas[0], betas[1]))
    else:
        momentum = hp.get("momentum", 0.0)
        opt = torch.optim.SGD(
            params,
            lr=hp["lr"],
            momentum=momentum,
            nesterov=hp.get("nesterov", False),
            weight_decay=hp.get("weight_decay", 0.0),
        )
    xs, ys = optim_ranks.global_batch()
    for step in range(optim_ranks.STEPS):
        torch.nn.functional.cross_entropy(model(xs[step]), ys[step]).backward()
        opt.step()
        opt.zero_grad()
    return torch.cat([p.detach().reshape(-1) for p in params])


@pytest.mark.slow
def test_two_ranks_stay_in_sync_and_match_single_process(tmp_path: Path) -> None:
    _run_gloo(tmp_path)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for name, case in optim_ranks.CASES.items():
        a, b = torch.tensor(ranks[0][name]), torch.tensor(ranks[1][name])
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6, msg=f"{name}: ranks diverged")
        if name == "powersgd_rank1":
            single = torch.tensor(_single_powersgd(case))
            torch.testing.assert_close(a, single, rtol=1e-4, atol=1e-5, msg=name)
            assert not torch.allclose(a, _reference(case), atol=1e-4), "rank-1 PowerSGD should not be exact"
        else:
            torch.testing.assert_close(a, _reference(case), rtol=1e-4, atol=1e-5, msg=name)


def _single_powersgd(case: dict[str, Any]) -> list[float]:
    """PowerSGD in one process on the whole global batch."""
    model = optim_ranks.make_model()
    hp = dict(case)
    opt = build_optimizer(hp.pop("optimizer"), model.parameters(), SingleComm(), OptimizerSettings(**hp))
    xs, ys = optim_ranks.global_batch()
    for step in range(optim_ranks.STEPS):
        torch.nn.functional.cross_entropy(model(xs[step]), ys[step]).backward()
        opt.aggregate()
        opt.step()
        opt.zero_grad()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist()


def test_powersgd_compresses_matrices_and_keeps_vectors_exact() -> None:
    first, second = torch.nn.Linear(64, 32), torch.nn.Linear(32, 10)
    model = torch.nn.Sequential(first, second)
    agg = PowerSGDAggregator(SingleComm(), list(model.parameters()), rank=2)
    # (32x64) and (10x32) are compressed to rank 2; the two bias vectors are sent as they are.
    assert agg.elements_per_step() == 2 * (32 + 64) + 2 * (10 + 32) + 32 + 10
    assert agg.full_elements() == 32 * 64 + 32 + 10 * 32 + 10
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    assert first.bias.grad is not None and first.weight.grad is not None
    bias_grad, weight_grad = first.bias.grad.clone(), first.weight.grad.clone()
    agg.aggregate()
    torch.testing.assert_close(first.bias.grad, bias_grad)
    assert int(torch.linalg.matrix_rank(first.weight.grad)) <= 2
    # Error feedback: what was not transmitted is remembered exactly.
    torch.testing.assert_close(agg.matrices[0].error + first.weight.grad, weight_grad)


def powersgd_error_feedback_run(seed: int, steps: int) -> tuple[float, float, float, float]:
    """Rank-1 PowerSGD on a constant 20x30 gradient ``g`` for ``steps`` steps (float64).

    Returns the relative error of the mean transmitted gradient, the bound error feedback
    guarantees for it, the largest conservation error and the largest overlap between a step's
    transmitted gradient and the memory it leaves (both relative, rounding-sized when correct).
    """
    gen = torch.Generator().manual_seed(seed)
    g = torch.randn(20, 30, generator=gen, dtype=torch.float64)
    param = torch.nn.Parameter(torch.zeros(20, 30, dtype=torch.float64))
    agg = PowerSGDAggregator(SingleComm(), [param], rank=1, seed=seed)
    memory = agg.matrices[0].error
    sent_sum = torch.zeros_like(g)
    contraction = 0.0  # the largest sqrt(1 - captured share) over the steps
    overlap = 0.0
    for _ in range(steps):
        before = g + memory
        param.grad = g.clone()
        agg.aggregate()
        assert param.grad is not None
        sent = param.grad
        sent_sum += sent
        energy = float(before.pow(2).sum())
        overlap = max(overlap, abs(float((sent * memory).sum())) / energy)
        contraction = max(contraction, math.sqrt(max(0.0, 1.0 - float(sent.pow(2).sum()) / energy)))
    g_norm = float(g.norm())
    conservation = float((sent_sum + memory - steps * g).norm()) / (steps * g_norm)
    rel = float((sent_sum / steps - g).norm()) / g_norm
    bound = contraction / (1.0 - contraction) / steps if contraction < 1.0 else math.inf
    return rel, bound, conservation, overlap


def test_powersgd_error_feedback_recovers_a_constant_gradient_over_steps() -> None:
    """Error feedback delays what compression drops and loses none of it.

    Each step sends the orthogonal projection of m_t = g + E_{t-1} onto a rank-1 subspace and
    keeps E_t = m_t - sent_t, so (1) sum(sent) + E_T = T g exactly, and (2) sent_t is orthogonal
    to E_t, hence ||E_t|| = c_t ||m_t|| <= c (||g|| + ||E_{t-1}||) with c = max_t c_t < 1 (c_t^2
    is the share of m_t's energy left behind) and ||E_T|| <= c / (1 - c) ||g|| for every T. By
    (1) the mean of what was sent is g - E_T / T: its relative error is at most c / ((1 - c) T).
    Both identities hold for any gradient and any seed; only float64 rounding separates them
    from exact.
    """
    steps = 200
    rel, bound, conservation, overlap = powersgd_error_feedback_run(seed=0, steps=steps)
    assert conservation < 1e-12  # (1): nothing is lost
    assert overlap < 1e-12  # (2): each step sends a projection, the memory keeps the rest
    assert bound < 1.0  # every step sends part of m_t, so the memory stays bounded
    assert rel <= bound * (1 + 1e-9)


def test_unknown_optimizer_and_bad_rank_are_clear_errors() -> None:
    model = torch.nn.Linear(3, 2)
    with pytest.raises(ValueError, match="unknown optimizer 'lamb'"):
        build_optimizer("lamb", model.parameters(), SingleComm(), OptimizerSettings(lr=0.1))
    with pytest.raises(ValueError, match="powersgd_rank must be >= 1"):
        build_optimizer(
            "power_sgd", model.parameters(), SingleComm(), OptimizerSettings(lr=0.1, powersgd_rank=0)
        )
