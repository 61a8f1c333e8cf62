"""Task 1a's trainer in one process: the memory layout it picks, and that the layout keeps the math."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from mlbench_worker.tasks.resnet20 import ResNet20Trainer, use_channels_last
from support.trainers import single_rank_context

SYNTHETIC = {"source": "synthetic", "options": {"train_samples": 256, "val_samples": 64}}


def trainer(hp: dict[str, Any]) -> ResNet20Trainer:
    ctx, _ = single_rank_context("1a", {"batch_size": 32, **hp}, SYNTHETIC, None)
    torch.manual_seed(0)
    return ResNet20Trainer(ctx)


def test_auto_means_channels_last_on_cpu_only() -> None:
    assert use_channels_last("auto", torch.device("cpu")) is True
    assert use_channels_last("auto", torch.device("cuda", 0)) is False
    assert use_channels_last(False, torch.device("cpu")) is False
    assert use_channels_last(True, torch.device("cuda", 0)) is True
    with pytest.raises(ValueError, match="'auto', true or false"):
        use_channels_last("yes", torch.device("cpu"))


def test_default_trainer_on_cpu_trains_in_channels_last(capsys: pytest.CaptureFixture[str]) -> None:
    t = trainer({})
    assert "channels_last layout" in capsys.readouterr().out
    conv = t.model.prep[0].weight  # type: ignore[union-attr]
    assert conv.is_contiguous(memory_format=torch.channels_last) and not conv.is_contiguous()
    inputs, target = next(iter(t.train_batches(1)))
    assert inputs.is_contiguous(memory_format=torch.channels_last)
    before = conv.detach().clone()
    t.train_step((inputs, target), None)
    assert not torch.equal(before, conv.detach())  # the flat gradient buffer fed the update
    assert conv.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("optimizer", ["centralized_sgd", "power_sgd"])
def test_the_layout_changes_speed_not_results(optimizer: str) -> None:
    """One step from the same weights on the same batch: the same loss and update up to float
    rounding (later steps drift apart the way runs with different thread counts do). PowerSGD
    views conv kernels as matrices, whatever their memory layout. (Adam's elementwise update
    turns rounding in near-zero gradients into +-lr steps, so it is not compared this way.)"""
    nchw = trainer({"channels_last": False, "optimizer": optimizer})
    last = trainer({"channels_last": True, "optimizer": optimizer})
    assert nchw.model.prep[0].weight.is_contiguous()  # type: ignore[index]
    batch = next(iter(nchw.train_batches(1)))
    same_batch = next(iter(last.train_batches(1)))
    torch.testing.assert_close(batch[0], same_batch[0].contiguous())
    loss_nchw = float(nchw.train_step(batch, None).loss)
    loss_last = float(last.train_step(same_batch, None).loss)
    assert loss_nchw == pytest.approx(loss_last, rel=1e-5)
    for a, b in zip(nchw.model.parameters(), last.model.parameters(), strict=True):
        torch.testing.assert_close(a.detach(), b.detach().contiguous(), rtol=1e-3, atol=1e-4)
