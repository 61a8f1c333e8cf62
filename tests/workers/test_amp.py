"""Mixed precision: the GradScaler follows the task's loss scaling; reduced-precision all-reduce."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch
from mlbench_worker.comm import Comm, ReduceOp, SingleComm
from mlbench_worker.hyperparams import Gnmt, Transformer
from mlbench_worker.optim.amp import ReducedPrecisionAllReduce, comm_dtype, make_scaler
from mlbench_worker.tasks.steps import autocast_for

GNMT_HP = Gnmt()  # loss scaling: initial 2^10, factor 2, max 2^13, window 128
CPU = torch.device("cpu")


def _step(scaler: torch.amp.GradScaler, param: torch.nn.Parameter, opt: Any, overflow: bool) -> None:
    opt.zero_grad()
    scaler.scale((param * 2.0).sum()).backward()
    if overflow:
        param.grad.fill_(float("inf"))  # type: ignore[union-attr]
    scaler.unscale_(opt)
    scaler.step(opt)
    scaler.update()


def test_scaler_takes_the_tasks_parameters() -> None:
    transformer = make_scaler(Transformer(), "amp", CPU)
    assert transformer.get_scale() == 128.0 and transformer.get_growth_interval() == 2000
    scaler = make_scaler(GNMT_HP, "fp16", CPU)
    assert scaler.is_enabled()
    assert scaler.get_scale() == 1024.0
    assert scaler.get_growth_factor() == 2.0 and scaler.get_backoff_factor() == 0.5
    assert scaler.get_growth_interval() == 128
    assert not make_scaler(GNMT_HP, "bf16", CPU).is_enabled()  # bf16 has fp32's range: no scaling
    assert not make_scaler(GNMT_HP, "fp32", CPU).is_enabled()
    with pytest.raises(ValueError):
        make_scaler(dataclasses.replace(GNMT_HP, loss_scale_factor=1), "fp16", CPU)


def test_scale_grows_after_a_clean_window_backs_off_on_overflow_and_never_passes_the_max() -> None:
    hp = dataclasses.replace(GNMT_HP, loss_scale_window=3)
    scaler = make_scaler(hp, "fp16", CPU)  # the CPU GradScaler runs the same unscale/inf logic
    param = torch.nn.Parameter(torch.ones(4))
    opt = torch.optim.SGD([param], lr=0.1, fused=True)  # the fused step skips itself on overflow
    for _ in range(3):
        _step(scaler, param, opt, overflow=False)
    assert scaler.get_scale() == 2048.0  # one window without overflow: x2
    before = param.detach().clone()
    _step(scaler, param, opt, overflow=True)
    assert scaler.get_scale() == 1024.0  # overflow: x1/2 and the step is skipped
    assert torch.equal(param.detach(), before)
    for _ in range(30):
        _step(scaler, param, opt, overflow=False)
    assert scaler.get_scale() == 8192.0  # capped at loss_scale_max
    assert torch.allclose(param.grad, torch.full((4,), 2.0))  # type: ignore[arg-type]  # unscaled gradient


def test_bf16_autocast_on_cpu_runs_matmuls_in_bf16() -> None:
    layer = torch.nn.Linear(8, 8)
    with autocast_for("bf16", CPU)():
        out = layer(torch.randn(2, 8))
    assert out.dtype == torch.bfloat16
    with pytest.raises(ValueError, match="GPU"):
        autocast_for("fp16", CPU)


class _TwoIdenticalRanks(Comm):
    """A world of two ranks holding the same tensors: a sum all-reduce doubles (dtype-checked)."""

    backend = "gloo"
    rank = 0
    world_size = 2

    def __init__(self) -> None:
        self.dtypes: list[torch.dtype] = []

    def all_reduce(self, tensor: torch.Tensor, op: ReduceOp = "sum") -> None:
        self.dtypes.append(tensor.dtype)
        tensor.mul_(2)

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> None: ...
    def barrier(self) -> None: ...
    def allgather_object(self, obj: Any) -> list[Any]:
        return [obj, obj]


def test_gradients_travel_in_the_compute_precision() -> None:
    comm = _TwoIdenticalRanks()
    assert comm_dtype(comm, "bf16") is torch.bfloat16
    assert comm_dtype(comm, "fp16") is torch.float16
    assert comm_dtype(comm, "fp32") is torch.float32
    assert comm_dtype(SingleComm(), "bf16") is torch.float32  # nothing to send
    params = [torch.nn.Parameter(torch.zeros(3, 2)), torch.nn.Parameter(torch.zeros(5))]
    grads = [torch.randn(3, 2), torch.randn(5)]
    for p, g in zip(params, grads, strict=True):
        p.grad = g.clone()
    agg = ReducedPrecisionAllReduce(comm, params, dtype=torch.bfloat16)
    agg.aggregate()
    assert comm.dtypes == [torch.bfloat16]  # one flat all-reduce in bf16
    for p, g in zip(params, grads, strict=True):
        assert p.grad is not None and p.grad.dtype == torch.float32
        torch.testing.assert_close(p.grad, g, rtol=1e-2, atol=1e-2)  # the mean of two equal grads
    agg.zero_grad()
    assert all(p.grad is None for p in params)  # the next backward hands over fresh gradients
