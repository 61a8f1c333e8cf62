"""Task 3a: AWD-LSTM trainer rules in one process (fast) and a 2-rank smoke run via ``mlbench apply``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from mlbench_worker.comm import SingleComm
from mlbench_worker.config import parse_config
from mlbench_worker.context import RunContext
from mlbench_worker.launch.rendezvous import Rendezvous
from mlbench_worker.tasks.awd_lstm import AWDLSTMTrainer
from mlbench_worker.timing.tracker import Tracker
from support.smoke import apply_one

SMOKE_DATA = {
    "source": "synthetic",
    "options": {
        "train_tokens": 4000,
        "val_tokens": 800,
        "vocab_size": 50,
        "emb_size": 16,
        "hidden_size": 24,
        "num_layers": 3,
        "bptt": 10,
    },
}


class _Quiet:
    def metric(self, name: str, value: float, **kw: Any) -> None: ...
    def log(self, text: str, stream: str = "stdout") -> None: ...
    def event(self, kind: str, payload: dict[str, Any]) -> None: ...
    def flush(self, timeout: float | None = None) -> bool:
        return True

    def close(self, timeout: float = 10.0) -> None: ...


def _trainer(hp: dict[str, Any]) -> AWDLSTMTrainer:
    config = parse_config(
        {
            "run_id": "r-t",
            "task": "3a",
            "backend": "gloo",
            "world_size": 1,
            "seed": 1,
            "data": SMOKE_DATA,
            "hyperparameters": hp,
        }
    )
    ctx = RunContext(
        config=config,
        rendezvous=Rendezvous(0, 1, 0, None, None, "single"),
        comm=SingleComm(),
        device=torch.device("cpu"),
        reporter=_Quiet(),
    )
    return AWDLSTMTrainer(ctx)


def test_step_lr_follows_warmup_and_sequence_length() -> None:
    trainer = _trainer({"batch_size": 4, "lr": 60.0, "base_lr": 30.0, "warmup_epochs": 1.0})
    assert trainer.lr == 30.0 and trainer.warmup_steps == trainer.expected_steps
    batches = list(trainer.train_batches(1))
    assert len(batches) == len(list(trainer.train_batches(1)))  # seeded by (seed, epoch)
    inputs, target, seq_len = batches[0]
    assert inputs.shape == target.shape == (seq_len, 4)
    assert torch.equal(inputs[1:], target[:-1])  # targets are the inputs shifted by one token
    trainer.before_step(trainer.warmup_steps // 2 - 1)
    assert trainer.lr == pytest.approx(45.0)
    trainer.train_step(batches[0], Tracker().clock.record)
    assert trainer.optimizer.lr == pytest.approx(45.0 * seq_len / 10)
    trainer.before_step(trainer.warmup_steps)
    assert trainer.lr == 60.0


def test_switches_to_averaged_sgd_after_nonmono_epochs_and_validates_the_average() -> None:
    trainer = _trainer({"batch_size": 4, "lr": 30.0, "nonmono": 2})
    for epoch, loss in enumerate([5.0, 4.0, 4.5, 4.6], start=1):
        trainer.after_validation(epoch, {"val_global_loss": loss}, step=epoch)
        assert not trainer.asgd
    trainer.after_validation(5, {"val_global_loss": 4.7}, step=5)  # worse than min of all but the last 2
    assert trainer.asgd
    tracker = Tracker(sample_every=1)
    for (batch, record), _ in zip(tracker.each_batch(trainer.train_batches(6)), range(3), strict=False):
        trainer.train_step(batch, record)
    assert trainer.averaged_steps == 3
    current = [p.detach().clone() for p in trainer.params]
    assert trainer.averaged is not None
    assert any(not torch.equal(a, c) for a, c in zip(trainer.averaged, current, strict=True))
    metrics = trainer.validate()
    assert metrics["val_global_Perplexity"] == pytest.approx(
        torch.tensor(metrics["val_global_loss"]).exp().item()
    )
    for p, c in zip(trainer.params, current, strict=True):  # the training weights are restored
        assert torch.equal(p, c)


SPEC = """\
apiVersion: mlbench/v1
kind: Benchmark
metadata:
  name: awd-smoke
spec:
  task: awd-lstm-wikitext2
  goal: light
  max_time: 3m
  workers: 2
  backend: gloo
  hardware:
    cpu: "1"
  target: local
  data:
    source: synthetic
    options:
      train_tokens: 20000
      val_tokens: 4000
      vocab_size: 200
      emb_size: 96
      hidden_size: 96
      num_layers: 3
      bptt: 15
  hyperparameters:
    batch_size: 16
    max_epochs: 8
"""


@pytest.mark.slow
def test_two_ranks_reach_the_light_perplexity_goal_through_mlbench_apply(tmp_path: Path) -> None:
    run = apply_one(tmp_path, SPEC)
    assert run["state"] == "succeeded" and run["reached"] is True, run["stop_reason"]
    assert run["task"] == "3a" and run["best_value"] <= 90.0
