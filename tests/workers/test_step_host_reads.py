"""The training step path never makes the host wait for the device.

Every task's trainer runs a few steps through the training loop's step path (batch loading, the
LR schedule hook, the step, the metric window) while ``HostReads`` records each read of a tensor
value on the host. On a GPU each such read stalls the host until the device has finished all
queued work, which is what made the 1a/3a/4a steps host-bound; the only reads the loop may do
are at its report (the metric window) and stop checks, which these steps do not reach.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from mlbench_worker.tasks.awd_lstm import AWDLSTMTrainer
from mlbench_worker.tasks.gnmt import TASK as GNMT
from mlbench_worker.tasks.logreg import LogRegTrainer
from mlbench_worker.tasks.resnet20 import ResNet20Trainer
from mlbench_worker.tasks.steps import Trainer
from mlbench_worker.tasks.training import MetricWindow
from mlbench_worker.tasks.transformer import TASK as TRANSFORMER
from mlbench_worker.timing.tracker import Tracker
from mlbench_worker.translation.trainer import TranslationTrainer
from support.host_reads import HostReads
from support.trainers import single_rank_context

TRANSLATION = {"train_samples": 128, "val_samples": 8, "vocab_words": 8}


def _resnet(precision: str) -> Trainer:
    ctx, _ = single_rank_context(
        "1a",
        {"batch_size": 16},
        {"source": "synthetic", "options": {"train_samples": 64, "val_samples": 16}},
        None,
        precision=precision,
    )
    return ResNet20Trainer(ctx)


def _logreg() -> Trainer:
    ctx, _ = single_rank_context(
        "2a",
        {"batch_size": 16},
        {"source": "synthetic", "options": {"train_samples": 128, "val_samples": 16, "features": 20}},
        None,
    )
    return LogRegTrainer(ctx)


def _awd() -> Trainer:
    options = {"train_tokens": 2000, "val_tokens": 200, "vocab_size": 40, "emb_size": 8}
    options |= {"hidden_size": 12, "num_layers": 2, "bptt": 8}
    ctx, _ = single_rank_context("3a", {"batch_size": 4}, {"source": "synthetic", "options": options}, None)
    return AWDLSTMTrainer(ctx)


def _translation(task: str) -> Trainer:
    sizes = (
        {"hidden_size": 16, "num_layers": 3, "dropout": 0.1}
        if task == "4a"
        else {"d_model": 16, "heads": 2, "ffn_dim": 32, "encoder_layers": 1, "decoder_layers": 1}
    )
    hp = {"global_batch_size": 32} if task == "4a" else {"global_batch_tokens": 400}
    ctx, _ = single_rank_context(
        task, hp, {"source": "synthetic", "options": {**TRANSLATION, **sizes}}, None, seed=5
    )
    return TranslationTrainer(ctx, GNMT if task == "4a" else TRANSFORMER)


TRAINERS: dict[str, Callable[[], Trainer]] = {
    "1a-fp32": lambda: _resnet("fp32"),
    "1a-bf16": lambda: _resnet("bf16"),
    "2a": _logreg,
    "3a": _awd,
    "4a": lambda: _translation("4a"),
    "4b": lambda: _translation("4b"),
}


def _batches(trainer: Trainer, tracker: Tracker) -> Iterator[tuple[Any, Any]]:
    for epoch in itertools.count(1):
        yield from tracker.each_batch(trainer.train_batches(epoch))


@pytest.mark.parametrize("case", list(TRAINERS))
def test_the_step_path_reads_no_tensor_value_on_the_host(case: str) -> None:
    torch.manual_seed(0)
    trainer = TRAINERS[case]()
    trainer.model.train()
    tracker = Tracker(torch.device("cpu"), sample_every=1)
    tracker.train()
    window = MetricWindow(trainer.ctx, trainer, tracker)
    batches = _batches(trainer, tracker)

    def step(n: int) -> None:
        batch, record = next(batches)
        trainer.before_step(n)
        window.add(trainer.train_step(batch, record))

    for n in range(2):  # lazy state (optimizer buffers) is made on the first steps
        step(n)
    with HostReads() as reads:
        for n in range(2, 6):
            step(n)
    assert reads.calls == []
    assert float(window.sums.loss_sum) > 0  # the steps did run (the report reads the window)


def test_a_scaled_fp16_step_does_not_read_the_overflow_flag_on_the_host() -> None:
    """fp16 loss scaling: the fused optimizer checks the scaler's inf flag itself, so the step
    does not wait for the device to learn whether to skip."""
    trainer = _resnet("fp32")
    trainer.scaler = torch.amp.GradScaler("cpu")  # fp16 needs a GPU; the scaler's logic does not
    tracker = Tracker(torch.device("cpu"), sample_every=1)
    batches = _batches(trainer, tracker)
    batch, record = next(batches)
    trainer.train_step(batch, record)
    with HostReads() as reads:
        for _ in range(2):
            batch, record = next(batches)
            trainer.train_step(batch, record)
    assert reads.calls == []
    assert trainer.scaler.get_scale() == 2.0**16  # no overflow: the scale stayed (window 2000)


def test_host_reads_sees_what_would_stall_a_gpu() -> None:
    t = torch.arange(4.0)
    with HostReads() as reads:
        float(t.sum())
        _ = t[t > 1]
        t.masked_select(t > 2)
        if t[0]:
            pass
        t.sum().item()
        torch.where(t > 1, t, 0.0).sum()  # stays on the device
    assert [name for name, _ in reads.calls] == [
        "__float__",
        "__getitem__",
        "masked_select",
        "__bool__",
        "item",
    ]
