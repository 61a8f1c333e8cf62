"""CentralizedSGD by model: gradients live in one flat buffer; schedules follow MLBench."""

from __future__ import annotations

import itertools

import pytest
import torch
from mlbench_worker.comm import SingleComm
from mlbench_worker.hyperparams import OptimizerSettings
from mlbench_worker.optim import OPTIMIZERS, build_optimizer
from mlbench_worker.optim.aggregation import ByModelAllReduce
from mlbench_worker.optim.schedules import WarmupPlateau


def test_gradients_accumulate_into_one_flat_buffer_and_match_plain_sgd() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    reference = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    reference.load_state_dict(model.state_dict())
    hp = {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 1e-4}
    opt = build_optimizer("centralized_sgd", model.parameters(), SingleComm(), OptimizerSettings(**hp))
    ref = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4)
    agg = opt.aggregator
    assert isinstance(agg, ByModelAllReduce) and agg.flat is not None and len(agg.flat.flats) == 1
    flat = agg.flat.flats[0]
    first = model[0]
    assert isinstance(first, torch.nn.Linear)
    for step in range(3):
        x = torch.randn(16, 8)
        model(x).pow(2).mean().backward()
        reference(x).pow(2).mean().backward()
        opt.aggregate()
        assert first.weight.grad is not None
        assert (
            first.weight.grad.data_ptr() == flat.data_ptr()
        )  # gathered: the optimizer reads the flat buffer
        opt.step()
        opt.zero_grad()
        ref.step()
        ref.zero_grad()
        assert first.weight.grad is None, step  # the next backward hands over a fresh gradient
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        assert torch.allclose(p, q, atol=1e-6)


def test_grads_replaced_by_someone_else_are_rebound() -> None:
    model = torch.nn.Linear(3, 1)
    opt = build_optimizer("centralized_sgd", model.parameters(), SingleComm(), OptimizerSettings(lr=0.1))
    model.zero_grad(set_to_none=True)  # torch's default elsewhere
    model(torch.ones(1, 3)).sum().backward()
    opt.aggregate()
    agg = opt.aggregator
    assert isinstance(agg, ByModelAllReduce) and model.weight.grad is not None and agg.flat is not None
    assert model.weight.grad.data_ptr() == agg.flat.flats[0].data_ptr()
    assert torch.equal(model.weight.grad, torch.ones(1, 3))


def test_unknown_optimizer_is_a_clear_error() -> None:
    assert "centralized_sgd" in OPTIMIZERS
    with pytest.raises(ValueError, match="unknown optimizer 'adamw'"):
        build_optimizer("adamw", torch.nn.Linear(1, 1).parameters(), SingleComm(), OptimizerSettings(lr=1.0))


def test_warmup_is_linear_per_step_from_base_to_scaled_lr() -> None:
    sched = WarmupPlateau(base_lr=0.02, target_lr=0.08, warmup_epochs=2, steps_per_epoch=10)
    lrs = [sched.on_step(s) for s in range(25)]
    assert lrs[0] == pytest.approx(0.02 + 0.06 / 20)
    assert lrs[19] == pytest.approx(0.08) and lrs[24] == pytest.approx(0.08)
    assert all(a < b for a, b in itertools.pairwise(lrs[:20]))
    assert WarmupPlateau(base_lr=0.02, target_lr=0.02, warmup_epochs=0, steps_per_epoch=10).on_step(0) == 0.02


def test_plateau_halves_after_more_than_patience_bad_epochs() -> None:
    sched = WarmupPlateau(
        base_lr=0.1, target_lr=0.1, warmup_epochs=0, steps_per_epoch=10, patience=2, factor=0.5
    )
    assert sched.on_validation(1.0, 10) == 0.1
    assert sched.on_validation(0.995, 20) == 0.1  # not better by more than the 0.01 threshold
    assert sched.on_validation(1.2, 30) == 0.1
    assert sched.on_validation(1.1, 40) == 0.05  # third epoch without improvement
    assert sched.on_step(41) == 0.05
    assert sched.on_validation(0.5, 50) == 0.05


def test_channels_last_weights_get_gradients_with_their_own_layout() -> None:
    conv = torch.nn.Conv2d(3, 4, 3).to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    opt = build_optimizer("centralized_sgd", conv.parameters(), SingleComm(), OptimizerSettings(lr=0.1))
    x = torch.randn(2, 3, 8, 8).to(memory_format=torch.channels_last)
    conv(x).sum().backward()
    opt.aggregate()
    assert conv.weight.grad is not None and conv.weight.grad.stride() == conv.weight.stride()
    agg = opt.aggregator
    assert isinstance(agg, ByModelAllReduce) and agg.flat is not None
    assert conv.weight.grad.data_ptr() == agg.flat.flats[0].data_ptr()  # still inside the flat buffer
