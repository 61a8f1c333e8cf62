"""Task 4a: GNMT on WMT16 English-German to a newstest2014 BLEU goal (24 full, 20 light).

As in the MLBench / MLPerf reference: GNMT with 4 layers of 1024 units and a shared 32k BPE
vocabulary, Adam (0.9, 0.999, eps 1e-8) on all-reduced gradients, global batch
``global_batch_size`` = 2048 sentences split over workers x ``update_freq`` (gradient
accumulation), an exponential warm-up over 200 steps to 2e-3 and x0.5 decays from 40% of
training every 5%, at most 4 times; label smoothing 0.1, gradient-norm clipping at 5.0,
training pairs up to ``max_len_train`` = 75 tokens, evaluation on pairs up to ``max_len_test``
= 150 with beam search (``beam_size`` 5). fp16 uses ``torch.amp`` with a gradient scaler from
``loss_scale_init`` 1024, ``loss_scale_factor`` 2, ``loss_scale_window`` 128 and
``loss_scale_max`` 8192.

Data: ``path`` / ``download`` (``mlbench data prepare wmt16``) or ``synthetic``
(``mlbench_worker.data.toy_translation``). Synthetic runs are smoke tests, never official results,
so their ``data.options`` may also shrink the model: ``hidden_size``, ``num_layers``,
``dropout``, and set its initialisation (``init_weight``, ``embedding_init_std``: a tiny model
with the reference's uniform(-0.1, 0.1) embeddings learns its attention too slowly for a smoke
run).
"""

from __future__ import annotations

from mlbench_worker import hyperparams as hps
from mlbench_worker.context import RunContext
from mlbench_worker.data.options import GnmtSynthetic
from mlbench_worker.models.gnmt import GNMT, GNMTConfig
from mlbench_worker.tasks.base import Outcome
from mlbench_worker.tasks.training import run_training
from mlbench_worker.translation.schedules import GNMTSchedule
from mlbench_worker.translation.trainer import Schedule, TranslationTask, TranslationTrainer


def build_model(vocab_size: int, sizes: GnmtSynthetic) -> GNMT:
    return GNMT(
        GNMTConfig(
            vocab_size=vocab_size,
            hidden_size=sizes.hidden_size,
            num_layers=sizes.num_layers,
            dropout=sizes.dropout,
            init_weight=sizes.init_weight,
            embedding_init_std=sizes.embedding_init_std,
        )
    )


def make_schedule(hp: hps.Gnmt, total_steps: int) -> Schedule:
    return GNMTSchedule(
        lr=hp.lr,
        total_steps=total_steps,
        warmup_steps=hp.warmup_steps,
        decay_start=hp.decay_start,
        decay_interval=hp.decay_interval,
        decay_steps=hp.decay_steps,
        decay_factor=hp.decay_factor,
    )


TASK = TranslationTask(
    dataset="wmt16",
    hyperparameters=hps.Gnmt,
    build_model=build_model,
    make_schedule=make_schedule,
    options=GnmtSynthetic,
)


def run(ctx: RunContext) -> Outcome:
    """Train GNMT until the BLEU goal, ``max_time`` or ``max_epochs``."""
    trainer = TranslationTrainer(ctx, TASK)
    return run_training(ctx, trainer, max_epochs=trainer.hp.max_epochs)
