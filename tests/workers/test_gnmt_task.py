"""Task 4a: the reference GNMT's layout, and a 2-rank synthetic smoke run to a relaxed BLEU via
``mlbench apply``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from mlbench_worker.models.gnmt import GNMT, GNMTConfig
from support.smoke import apply_one


def test_reference_model_has_the_mlperf_layout() -> None:
    with torch.device("meta"):
        model = GNMT(GNMTConfig(vocab_size=32000))
    assert model.enc_bi.bidirectional and model.enc_bi.hidden_size == 1024
    assert len(model.enc_layers) == 3 and len(model.dec_layers) == 3  # 4 layers each side
    assert model.enc_layers[0].input_size == 2048  # both directions of the first layer
    assert all(layer.input_size == 2048 for layer in model.dec_layers)  # [x; attention context]
    assert model.src_embed is model.tgt_embed  # shared embeddings
    with pytest.raises(ValueError):
        GNMTConfig(vocab_size=10, num_layers=1)


SPEC = """\
apiVersion: mlbench/v1
kind: Benchmark
metadata:
  name: gnmt-smoke
spec:
  task: gnmt-wmt16
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
      train_samples: 2400
      val_samples: 100
      vocab_words: 8
      min_len: 2
      max_len: 5
      hidden_size: 64
      num_layers: 2
      dropout: 0.0
      init_weight: 0.3
      embedding_init_std: 1.0
  hyperparameters:
    global_batch_size: 64
    lr: 0.01
    warmup_steps: 10
    max_epochs: 4
"""


@pytest.mark.slow
def test_two_ranks_reach_the_light_bleu_goal_through_mlbench_apply(tmp_path: Path) -> None:
    run = apply_one(tmp_path, SPEC)
    assert run["state"] == "succeeded" and run["reached"] is True, run["stop_reason"]
    assert run["task"] == "4a" and run["best_value"] >= 20.0
