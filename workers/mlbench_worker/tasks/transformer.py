"""Task 4b: Transformer base on WMT17 English-German to a newstest2014 BLEU goal (25 full, 20 light).

As in the MLBench / MLPerf reference: Transformer base (6+6 layers, d_model 512, 8 heads, FFN
2048, dropout 0.1, shared embeddings over a joint 32k BPE vocabulary), Adam (0.9, 0.98,
eps 1e-9) on all-reduced gradients, ``global_batch_tokens`` = 2^17 tokens per step split over
workers x ``update_freq`` into token-bucketed micro-batches, linear warm-up over 1000 steps to
1.976e-3 then inverse-square-root decay, label smoothing 0.1, pairs up to ``max_len`` = 80
tokens, beam search with ``beam_size`` 4. fp16 uses ``torch.amp`` with a gradient scaler from
``loss_scale_init`` 128, ``loss_scale_factor`` 2 and ``loss_scale_window`` 2000.

Data: ``path`` / ``download`` (``mlbench data prepare wmt17``) or ``synthetic``; synthetic
smoke runs may shrink the model through ``data.options``: ``d_model``, ``heads``, ``ffn_dim``,
``encoder_layers``, ``decoder_layers``, ``dropout``.
"""

from __future__ import annotations

from mlbench_worker import hyperparams as hps
from mlbench_worker.context import RunContext
from mlbench_worker.data.options import TransformerSynthetic
from mlbench_worker.models.transformer import Transformer, TransformerConfig
from mlbench_worker.tasks.base import Outcome
from mlbench_worker.tasks.training import run_training
from mlbench_worker.translation.schedules import InverseSqrtSchedule
from mlbench_worker.translation.trainer import Schedule, TranslationTask, TranslationTrainer


def build_model(vocab_size: int, sizes: TransformerSynthetic) -> Transformer:
    return Transformer(
        TransformerConfig(
            vocab_size=vocab_size,
            d_model=sizes.d_model,
            heads=sizes.heads,
            ffn_dim=sizes.ffn_dim,
            encoder_layers=sizes.encoder_layers,
            decoder_layers=sizes.decoder_layers,
            dropout=sizes.dropout,
        )
    )


def make_schedule(hp: hps.Transformer, total_steps: int) -> Schedule:
    return InverseSqrtSchedule(lr=hp.lr, warmup_steps=hp.warmup_steps)


TASK = TranslationTask(
    dataset="wmt17",
    hyperparameters=hps.Transformer,
    build_model=build_model,
    make_schedule=make_schedule,
    options=TransformerSynthetic,
)


def run(ctx: RunContext) -> Outcome:
    """Train the Transformer until the BLEU goal, ``max_time`` or ``max_epochs``."""
    trainer = TranslationTrainer(ctx, TASK)
    return run_training(ctx, trainer, max_epochs=trainer.hp.max_epochs)
