"""The ``Trainer`` shared by the translation tasks: data, accumulation, mixed precision, BLEU.

A task module describes itself with a ``TranslationTask`` (dataset name, model builder, LR
schedule, how batches are sized and the length limits) and hands it to ``TranslationTrainer``;
``run_training`` does the rest. One optimizer step processes ``update_freq`` micro-batches per
rank (gradient accumulation) so the global batch is reached on any number of workers: each
micro-batch's summed loss is divided by the target tokens of the whole step on this rank, so
the accumulated gradient equals the gradient of the step's batch taken at once. Then:
all-reduce (``agg``: one fp16/bf16 all-reduce where the backend can; fp32 on GPU in buckets
started during backward when there is one backward per step), unscale, clip, ``GradScaler.step``
and the capped scale update (``opt_step``). Validation decodes this rank's share of the test set
with beam search and sums sacrebleu's statistics over ranks: ``val_global_BLEU-Score`` is the
corpus BLEU of the whole test set.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np
import torch
from torch import nn

from mlbench_worker import hyperparams as hps
from mlbench_worker import wire
from mlbench_worker.context import RunContext
from mlbench_worker.data import toy_translation, wmt
from mlbench_worker.data.fetch import DatasetError, default_data_dir
from mlbench_worker.data.options import ToyTranslation, options_of
from mlbench_worker.optim import build_optimizer
from mlbench_worker.optim.amp import ReducedPrecisionAllReduce, comm_dtype, make_scaler
from mlbench_worker.optim.centralized import CentralizedOptimizer
from mlbench_worker.tasks.steps import StepResult, Trainer, run_autocast
from mlbench_worker.timing.startup import CLOCK
from mlbench_worker.timing.tracker import Record
from mlbench_worker.translation.batching import Batch, BatchPlan, collate
from mlbench_worker.translation.beam import beam_search
from mlbench_worker.translation.bleu import STATS, bleu_from_stats, bleu_stats
from mlbench_worker.translation.loss import label_smoothed_loss

Schedule = Callable[[int], float]
H = TypeVar("H", hps.Gnmt, hps.Transformer)


@dataclass(frozen=True)
class TranslationTask(Generic[H]):
    """What differs between 4a and 4b.

    ``hyperparameters`` is the task's class of typed hyperparameters; ``options`` the class of its
    synthetic data options, whose model sizes ``build_model(vocab_size, options)`` reads (a smoke
    run's smaller model; the official sizes for real data); ``make_schedule(hp, total_steps)`` the
    LR schedule.
    """

    dataset: str
    hyperparameters: type[H]
    build_model: Callable[[int, Any], nn.Module]
    make_schedule: Callable[[H, int], Schedule]
    options: type[ToyTranslation]


def load_corpus(ctx: RunContext, dataset: str, options: ToyTranslation) -> wmt.Corpus:
    """The corpus from the configured source; ``download`` prepares it once per node (local rank 0)."""
    data = ctx.config.data
    if data.source == "synthetic":
        seed = ctx.config.seed if options.seed is None else options.seed
        return toy_translation.synthetic(options, seed=seed)
    if data.source == "path":
        assert data.path is not None
        return wmt.open_prepared(data.path)
    root = Path(data.path) if data.path else default_data_dir() / dataset

    def prepare() -> None:
        ctx.log(f"preparing {dataset} in {root}", all_ranks=True)
        wmt.prepare(root, name=dataset)

    ctx.on_local_rank0(prepare)
    try:
        return wmt.open_prepared(root)
    except DatasetError as exc:
        raise DatasetError(f"{exc} (the preparation on local rank 0 failed; see its log)") from None


class TranslationTrainer(Trainer):
    """Sequence-to-sequence training with accumulation, ``torch.amp`` and global BLEU validation."""

    def __init__(self, ctx: RunContext, task: TranslationTask[Any]) -> None:
        self.ctx = ctx
        self.task = task
        config = ctx.config
        self.device = ctx.device
        self.precision = config.precision
        self.autocast = run_autocast(ctx)
        hp: hps.Gnmt | hps.Transformer = ctx.hyperparameters(task.hyperparameters)
        self.hp = hp
        options = options_of(config.data.options, task.options)
        corpus = self.corpus = load_corpus(ctx, task.dataset, options)
        CLOCK.mark("data")
        self.max_len_train, self.max_len_test = hp.length_limits()
        self.train_data = corpus.length_filtered("train", self.max_len_train)
        self.test_data = corpus.length_filtered("test", self.max_len_test)
        if len(self.train_data) == 0 or len(self.test_data) == 0:
            raise DatasetError(
                "no pair is within the length limits "
                f"(train {self.max_len_train}, test {self.max_len_test} tokens)"
            )
        self.test_refs = [corpus.references[int(i)] for i in self.test_data.index]
        self.train_samples, self.eval_samples = len(self.train_data), len(self.test_data)  # sentence pairs
        model = task.build_model(corpus.vocab_size, options).to(self.device)
        for tensor in model.state_dict().values():  # identical start on every rank
            ctx.comm.broadcast(tensor, src=0)
        self.model = model
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.update_freq = hp.update_freq
        per = ctx.world_size * self.update_freq
        if isinstance(hp, hps.Transformer):
            global_tokens = hp.global_batch_tokens
            self.plan = BatchPlan(
                ctx.world_size,
                ctx.rank,
                self.update_freq,
                max_tokens=max(1, global_tokens // per),
                seed=config.seed,
            )
            batch_desc = f"{global_tokens} tokens/step ({self.plan.max_tokens} per micro-batch)"
        else:
            global_sentences = hp.global_batch_size
            self.plan = BatchPlan(
                ctx.world_size,
                ctx.rank,
                self.update_freq,
                sentences=max(1, math.ceil(global_sentences / per)),
                seed=config.seed,
            )
            batch_desc = f"{global_sentences} sentences/step ({self.plan.sentences} per micro-batch)"
        self.steps_per_epoch = len(self.plan.steps(self.train_data, 1))
        self.schedule = task.make_schedule(hp, self.steps_per_epoch * hp.max_epochs)
        self.optimizer = self._build_optimizer(hp)
        self.optimizer.set_lr(self.schedule(0))
        self.scaler = make_scaler(hp, self.precision, self.device)
        self.grad_clip = hp.clip
        self.label_smoothing = hp.label_smoothing
        self.beam_size = hp.beam_size
        self.eval_batch_size = hp.eval_batch_size
        n_params = sum(p.numel() for p in self.params)
        ctx.log(
            f"{corpus.name}: vocab {corpus.vocab_size}, {len(self.train_data)} train / {len(self.test_data)} "
            f"test pairs within the limits, {self.steps_per_epoch} steps/epoch, {batch_desc}, "
            f"update_freq {self.update_freq}, {n_params / 1e6:.2f}M parameters, precision {self.precision}, "
            f"gradients all-reduced in {str(self.comm_dtype).replace('torch.', '')}"
        )

    def _build_optimizer(self, hp: hps.Gnmt | hps.Transformer) -> CentralizedOptimizer:
        """Adam on averaged gradients, all-reduced in fp16/bf16 where the run and backend allow.

        fp32 gradients on GPU go in 25 MB buckets started during backward (one backward per step,
        like DDP: the host thread is idle while kernels run). On CPU the same cores would do
        both, so one flat all-reduce after backward is as fast; ``overlap_comm`` overrides.
        """
        self.comm_dtype = comm_dtype(self.ctx.comm, self.precision)
        self.comm_precision = {torch.float16: "fp16", torch.bfloat16: "bf16"}.get(self.comm_dtype, "fp32")
        wanted = hp.overlap_comm if hp.overlap_comm is not None else self.device.type == "cuda"
        overlap = self.comm_dtype is torch.float32 and self.update_freq == 1 and wanted
        bucket_mb = hp.bucket_mb if hp.bucket_mb is not None else (25.0 if overlap else None)
        settings = dataclasses.replace(
            hp.optimizer_settings(), lr=self.schedule(0), overlap_comm=overlap, bucket_mb=bucket_mb
        )
        base = build_optimizer(hp.optimizer, self.params, self.ctx.comm, settings)
        if self.comm_dtype is torch.float32:
            return base
        aggregator = ReducedPrecisionAllReduce(self.ctx.comm, self.params, dtype=self.comm_dtype)
        return CentralizedOptimizer(base.optimizer, aggregator)

    # -- training ----------------------------------------------------------------------------
    def train_batches(self, epoch: int) -> Iterable[list[Batch]]:
        return self.plan.iterate(self.train_data, epoch)

    def before_step(self, step: int) -> None:
        self.optimizer.set_lr(self.schedule(step))

    def accumulate(self, micro: list[Batch], record: Record | None) -> tuple[torch.Tensor, int]:
        """Forward and backward of every micro-batch of one step; returns (summed NLL, tokens)."""
        total = sum(b.tokens for b in micro)
        nll_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        for mb in micro:
            b = mb.to(self.device)
            with self.autocast():
                logits = self.model(b.src, b.src_lens, b.tgt_in)
            if record:
                record("fwd_pass")
            loss, nll = label_smoothed_loss(logits, b.tgt_out, self.label_smoothing)
            loss = loss / max(1, total)
            nll_sum += nll
            if record:
                record("comp_loss")
            self.scaler.scale(loss).backward()
            if record:
                record("backprop")
        return nll_sum, total

    def train_step(self, batch: list[Batch], record: Record | None) -> StepResult:
        """The step's micro-batches (their phases stamped per micro-batch), then the shared
        all-reduce and update (unscale, clip, fused step, capped scale update)."""
        nll_sum, tokens = self.accumulate(batch, record)
        self.aggregate()
        if record:
            record("agg")
        self.update()
        if record:
            record("opt_step")
        return StepResult(nll_sum / max(1, tokens), tokens)

    # -- validation ---------------------------------------------------------------------------
    def validate(self) -> dict[str, float]:
        self.model.eval()
        ctx = self.ctx
        share = np.arange(ctx.rank, len(self.test_data), ctx.world_size)
        order = share[np.argsort(self.test_data.src_lens[share], kind="stable")]
        hyps: list[str] = []
        refs: list[str] = []
        nll = torch.zeros((), dtype=torch.float64, device=self.device)
        tokens = 0
        with torch.no_grad():
            for start in range(0, len(order), self.eval_batch_size):
                idx = order[start : start + self.eval_batch_size]
                b = collate(self.test_data, idx).to(self.device)
                with self.autocast():
                    logits = self.model(b.src, b.src_lens, b.tgt_in)
                    _, batch_nll = label_smoothed_loss(logits, b.tgt_out, 0.0)
                    limit = min(self.max_len_test, 2 * int(b.src_lens.max()) + 10)
                    out = beam_search(self.model, b.src, b.src_lens, beam=self.beam_size, max_len=limit)  # type: ignore[arg-type]
                nll += batch_nll.double()
                tokens += b.tokens
                hyps += [self.corpus.detokenize(seq) for seq in out]
                refs += [self.test_refs[int(i)] for i in idx]
        stats = np.concatenate([bleu_stats(hyps, refs), [float(nll), float(tokens)]])
        reduced = torch.tensor(stats, dtype=torch.float64, device=ctx.comm.control_device)
        ctx.comm.all_reduce(reduced, "sum")
        values = reduced.cpu().numpy()
        total_tokens = max(1.0, float(values[STATS + 1]))
        self.model.train()
        return {
            wire.VAL_GLOBAL_LOSS: float(values[STATS]) / total_tokens,
            wire.VAL_GLOBAL_BLEU: bleu_from_stats(values[:STATS]),
        }
