"""Task 2a: the trainer in one process (fast), and a 2-rank smoke run through ``mlbench apply``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from mlbench_worker.tasks import load_task
from mlbench_worker.tasks.logreg import LogRegTrainer, RegularizedBCE
from support.smoke import apply_one
from support.trainers import single_rank_context


def test_one_rank_reaches_the_light_goal_on_synthetic_epsilon() -> None:
    ctx, reporter = single_rank_context(
        "2a",
        {"batch_size": 128, "lr": 4.0, "max_epochs": 4, "l2": 2.5e-6},
        {"source": "synthetic", "options": {"train_samples": 2048, "val_samples": 512}},
        {"metric": "val_global_Prec@1", "target": 80.0, "direction": "max"},
    )
    outcome = load_task("2a")(ctx)
    assert outcome.status == "success", outcome.reason
    names = {name for name, _, _ in reporter.metrics}
    assert {"train_loss", "train_Prec@1", "val_global_loss", "val_global_Prec@1", "phase_agg"} <= names
    assert any(kind == "goal_reached" for kind, _ in reporter.events)


def test_loss_includes_l2_and_its_gradient_comes_from_weight_decay() -> None:
    ctx, _ = single_rank_context(
        "2a",
        {"lr": 1.0, "l2": 0.5},
        {"source": "synthetic", "options": {"train_samples": 64, "val_samples": 16, "features": 5}},
        None,
    )
    trainer = LogRegTrainer(ctx)
    assert isinstance(trainer.loss_fn, RegularizedBCE)
    with torch.no_grad():
        for p in trainer.model.parameters():
            p.fill_(2.0)
    x, y = torch.ones(4, 5), torch.ones(4, dtype=torch.uint8)
    loss = trainer.loss_fn(trainer.model(x), y)
    bce = torch.nn.functional.binary_cross_entropy_with_logits(torch.full((4,), 10.0), torch.ones(4))
    torch.testing.assert_close(loss, bce + 0.25 * 20.0)  # l2/2 * ||w||^2 = 0.25 * 5 * 4
    assert trainer.optimizer.param_groups[0]["weight_decay"] == 0.5
    assert trainer.optimizer.param_groups[0]["momentum"] == 0.0


SPEC = """\
apiVersion: mlbench/v1
kind: Benchmark
metadata:
  name: logreg-smoke
spec:
  task: logreg-epsilon
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
      train_samples: 2048
      val_samples: 512
  hyperparameters:
    max_epochs: 5
"""


@pytest.mark.slow
def test_two_ranks_reach_the_light_goal_through_mlbench_apply(tmp_path: Path) -> None:
    run = apply_one(tmp_path, SPEC, timeout=180)
    assert run["state"] == "succeeded" and run["reached"] is True
    assert run["task"] == "2a" and run["workers"] == 2
    assert run["best_value"] >= 80.0
