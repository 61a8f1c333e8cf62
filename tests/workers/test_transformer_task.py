"""Task 4b: Transformer base's size, and a 2-rank bf16 synthetic smoke run to a relaxed BLEU via
``mlbench apply``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from mlbench_worker.models.transformer import Transformer, TransformerConfig
from support.smoke import apply_one


def test_reference_model_is_transformer_base_with_shared_embeddings() -> None:
    vocab = 32768
    with torch.device("meta"):
        model = Transformer(TransformerConfig(vocab_size=vocab))
    d, f = 512, 2048
    attn, ln, ffn = 4 * (d * d + d), 2 * d, d * f + f + f * d + d
    expected = vocab * d + 6 * (attn + 2 * ln + ffn) + 6 * (2 * attn + 3 * ln + ffn)  # one embedding matrix
    assert sum(p.numel() for p in model.parameters()) == expected  # 60.9M
    with pytest.raises(ValueError):
        TransformerConfig(vocab_size=10, d_model=10, heads=3)


SPEC = """\
apiVersion: mlbench/v1
kind: Benchmark
metadata:
  name: transformer-smoke
spec:
  task: transformer-wmt17
  goal: light
  max_time: 3m
  workers: 2
  backend: gloo
  hardware:
    cpu: "1"
    precision: bf16
  target: local
  data:
    source: synthetic
    options:
      train_samples: 2400
      val_samples: 100
      vocab_words: 8
      min_len: 2
      max_len: 5
      d_model: 64
      heads: 4
      ffn_dim: 128
      encoder_layers: 2
      decoder_layers: 2
      dropout: 0.0
  hyperparameters:
    global_batch_tokens: 512
    lr: 0.005
    warmup_steps: 30
    max_epochs: 8
"""


@pytest.mark.slow
def test_two_ranks_in_bf16_reach_the_light_bleu_goal_through_mlbench_apply(tmp_path: Path) -> None:
    run = apply_one(tmp_path, SPEC)
    assert run["state"] == "succeeded" and run["reached"] is True, run["stop_reason"]
    assert run["task"] == "4b" and run["best_value"] >= 20.0
