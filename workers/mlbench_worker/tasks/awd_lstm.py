"""Task 3a: AWD-LSTM on WikiText-2 to a validation perplexity goal.

Per MLBench / Merity et al.: 3-layer weight-dropped LSTM (400 embedding, 1150 hidden, tied
weights), 80 sequences per worker, variable-length truncated BPTT (``max(5, N(bptt/(1+X), 5))``,
X ~ Bernoulli(0.05)) with the step's LR rescaled by ``seq_len / bptt``, AR (alpha 2) and TAR
(beta 1), gradient norm clipping at 0.25 after the all-reduce (so every rank clips the same
averaged gradient), weight decay 1.2e-6, LR 30 warmed up per step to ``30*sqrt(k)`` over
``warmup_epochs`` (the planner sets ``lr``, ``base_lr`` and ``warmup_epochs = 3k``), and the
switch to averaged SGD (iterate averaging from the switch on, evaluated with the averaged
weights) once the validation loss is worse than the best of all but the last ``nonmono`` (5)
epochs. Each rank trains on a contiguous, equal share of the token stream (batchified into
``batch_size`` columns) and evaluates a share of the validation stream with 10 columns; the
goal is checked on the global (token-weighted) perplexity.

Data: ``synthetic`` (``mlbench_worker.data.wikitext2.synthetic`` options; as synthetic runs are
smoke tests and never official results, its options may also shrink the model for speed:
``emb_size``, ``hidden_size``, ``num_layers``, ``bptt``), ``path`` (prepared by ``mlbench data
prepare wikitext2``) or ``download``.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Iterator
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from mlbench_worker import hyperparams as hps
from mlbench_worker import wire
from mlbench_worker.context import RunContext
from mlbench_worker.data import wikitext2
from mlbench_worker.data.fetch import DatasetError, default_data_dir
from mlbench_worker.data.options import WikiText2Synthetic, options_of
from mlbench_worker.models.awd_lstm import AWDLSTM, AWDLSTMConfig, Hidden, ar_tar_penalty, detach_hidden
from mlbench_worker.optim import build_optimizer
from mlbench_worker.optim.amp import make_scaler
from mlbench_worker.tasks.base import Outcome
from mlbench_worker.tasks.steps import PhasedTrainer, Step, StepResult, run_autocast
from mlbench_worker.tasks.training import run_training
from mlbench_worker.timing.startup import CLOCK

EVAL_BATCH_SIZE = 10
GRAPH_BAND = 0.08  # CUDA graphs for BPTT lengths within this share of bptt (at least 2) of it


def load_wikitext2(ctx: RunContext) -> wikitext2.Corpus:
    """The corpus from the configured source."""
    data = ctx.config.data
    if data.source == "synthetic":
        options = options_of(data.options, WikiText2Synthetic)
        return wikitext2.synthetic(options, seed=options.seed)
    if data.source == "path":
        assert data.path is not None  # checked by the config parser
        return wikitext2.open_prepared(data.path)
    root = Path(data.path) if data.path else default_data_dir() / "wikitext2"
    if ctx.rendezvous.local_rank == 0:
        try:
            ctx.log(f"preparing WikiText-2 in {root}", all_ranks=True)
            wikitext2.prepare(root)
        finally:
            ctx.comm.barrier()
    else:
        ctx.comm.barrier()
    try:
        return wikitext2.open_prepared(root)
    except DatasetError as exc:
        raise DatasetError(f"{exc} (the preparation on local rank 0 failed; see its log)") from None


Batch = tuple[torch.Tensor, torch.Tensor, int]


class LMStep(Step):
    """A language-model step: the next hidden state and the loss without AR/TAR, too."""

    hidden: Hidden
    raw_loss: torch.Tensor


class AWDLSTMTrainer(PhasedTrainer[LMStep]):
    """AWD-LSTM on this rank's share of the token stream."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        config = ctx.config
        self.device = ctx.device
        self.autocast = run_autocast(ctx)
        # fp16 scales the loss; the gradients are unscaled after the all-reduce, before clipping
        self.scaler = make_scaler(config.hyperparameters, config.precision, ctx.device)
        data = config.data
        smoke = options_of(data.options, WikiText2Synthetic)  # a smoke run's smaller model, if any
        hp = ctx.hyperparameters(hps.AwdLstm)
        self.batch_size = hp.batch_size
        self.bptt = hp.bptt if smoke.bptt is None else smoke.bptt
        if self.bptt < 2:
            raise ValueError(f"bptt must be >= 2, got {self.bptt}")
        self.graph_band = max(2, round(GRAPH_BAND * self.bptt))
        self.grad_clip = hp.clip
        self.alpha = hp.alpha
        self.beta = hp.beta
        self.nonmono = hp.nonmono
        corpus = load_wikitext2(ctx)
        CLOCK.mark("data")
        self.train_samples = len(corpus.splits["train"])  # tokens: the unit AWD-LSTM trains on
        self.eval_samples = len(corpus.splits["valid"])
        train_ids = wikitext2.rank_slice(corpus.splits["train"], ctx.rank, ctx.world_size)
        val_ids = wikitext2.rank_slice(corpus.splits["valid"], ctx.rank, ctx.world_size)
        self.train_data = torch.from_numpy(wikitext2.batchify(train_ids, self.batch_size)).to(self.device)
        self.val_data = torch.from_numpy(wikitext2.batchify(val_ids, EVAL_BATCH_SIZE)).to(self.device)
        cfg = AWDLSTMConfig(
            vocab_size=corpus.vocab_size,
            emb_size=hp.emb_size if smoke.emb_size is None else smoke.emb_size,
            hidden_size=hp.hidden_size if smoke.hidden_size is None else smoke.hidden_size,
            num_layers=hp.num_layers if smoke.num_layers is None else smoke.num_layers,
            dropout=hp.dropout,
            dropouth=hp.dropouth,
            dropouti=hp.dropouti,
            dropoute=hp.dropoute,
            wdrop=hp.wdrop,
        )
        model = self.lm = AWDLSTM(cfg).to(self.device)
        for tensor in model.state_dict().values():  # identical start on every rank
            ctx.comm.broadcast(tensor, src=0)
        self.model = model
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.target_lr = hp.lr
        self.base_lr = hp.base_lr if hp.base_lr is not None else self.target_lr
        self.optimizer = build_optimizer(hp.optimizer, self.params, ctx.comm, hp.optimizer_settings())
        rows = self.train_data.shape[0]
        self.expected_steps = max(1, round((rows - 1) / (self.bptt * 0.975)))  # mean window length
        self.warmup_steps = round(hp.warmup_epochs * self.expected_steps)
        self.current_lr = self.base_lr if self.warmup_steps > 0 else self.target_lr
        self.hidden: Hidden = self.lm.init_hidden(self.batch_size)
        self.val_history: list[float] = []
        self.averaged: list[torch.Tensor] | None = None  # ASGD's running mean of the iterates
        self.averaged_steps = 0
        ctx.log(
            f"WikiText-2 ({data.source}): vocab {corpus.vocab_size}, {len(train_ids)} train / "
            f"{len(val_ids)} val tokens per rank, ~{self.expected_steps} steps/epoch, batch "
            f"{self.batch_size}, bptt {self.bptt}, model {cfg.emb_size}/{cfg.hidden_size}/{cfg.num_layers} "
            f"(emb/hidden/layers), lr {self.base_lr:g} -> "
            f"{self.target_lr:g} over {self.warmup_steps} steps"
        )

    @property
    def lr(self) -> float:
        """The scheduled LR (each step's LR is this times ``seq_len / bptt``)."""
        return self.current_lr

    @property
    def asgd(self) -> bool:
        """Whether training has switched to averaged SGD."""
        return self.averaged is not None

    # -- training ----------------------------------------------------------------------------
    def train_batches(self, epoch: int) -> Iterable[Batch]:
        self.hidden = self.lm.init_hidden(self.batch_size)
        # The same seed on every rank: identical window lengths, so identical step counts.
        rng = np.random.default_rng((self.ctx.config.seed, epoch))
        return self._windows(self.train_data, rng)

    def _windows(self, data: torch.Tensor, rng: np.random.Generator | None) -> Iterator[Batch]:
        for start, seq_len in wikitext2.bptt_windows(data.shape[0], self.bptt, rng):
            yield data[start : start + seq_len], data[start + 1 : start + 1 + seq_len], seq_len

    def before_step(self, step: int) -> None:
        if step < self.warmup_steps:
            self.current_lr = self.base_lr + (self.target_lr - self.base_lr) * (step + 1) / self.warmup_steps
        elif step == self.warmup_steps:
            self.current_lr = self.target_lr

    def begin_step(self, batch: Batch) -> LMStep:
        inputs, target, seq_len = batch
        self.optimizer.set_lr(self.current_lr * seq_len / self.bptt)
        hidden = [t for pair in self.hidden for t in pair]  # detached at the end of the last step
        return LMStep((inputs, target, *hidden), int(target.numel()))

    def forward(self, step: LMStep) -> None:
        inputs, _, *flat = step.inputs
        hidden = [(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]
        with self.autocast():
            logits, new_hidden, raw, dropped = self.model(inputs, hidden)
        step.output = (logits, raw, dropped)
        step.hidden = detach_hidden(new_hidden)

    def compute_loss(self, step: LMStep) -> None:
        logits, raw, dropped = step.output
        with self.autocast():
            step.raw_loss = F.cross_entropy(logits.float(), step.inputs[1].reshape(-1))
            step.loss = step.raw_loss + ar_tar_penalty(raw.float(), dropped.float(), self.alpha, self.beta)

    def idle_phases(self) -> set[str]:
        return {*super().idle_phases(), "comp_metrics"}

    def graph_key(self, step: LMStep) -> Hashable | None:
        """Graphs for the common window lengths only (``bptt`` +- ``graph_band``: 13 lengths and
        about three steps in four at bptt 70); the rare short and long windows run eagerly, so the
        graphs kept, and their memory, stay bounded."""
        if abs(int(step.inputs[0].shape[0]) - self.bptt) > self.graph_band:
            return None
        return super().graph_key(step)

    def end_step(self, step: LMStep) -> StepResult:
        self.hidden = step.hidden
        if self.averaged is not None:
            self._update_average()
        return StepResult(step.raw_loss.detach(), step.samples)

    @torch.no_grad()
    def _update_average(self) -> None:
        self.averaged_steps += 1
        assert self.averaged is not None
        torch._foreach_lerp_(self.averaged, [p.detach() for p in self.params], 1.0 / self.averaged_steps)

    # -- validation -----------------------------------------------------------------------------
    def validate(self) -> dict[str, float]:
        backup = self._swap_in_average()
        try:
            return self._evaluate()
        finally:
            if backup is not None:
                with torch.no_grad():
                    for p, saved in zip(self.params, backup, strict=True):
                        p.copy_(saved)

    def _swap_in_average(self) -> list[torch.Tensor] | None:
        if self.averaged is None or self.averaged_steps == 0:
            return None
        backup = [p.detach().clone() for p in self.params]
        with torch.no_grad():
            for p, avg in zip(self.params, self.averaged, strict=True):
                p.copy_(avg)
        return backup

    @torch.no_grad()
    def _evaluate(self) -> dict[str, float]:
        self.model.eval()
        hidden = self.lm.init_hidden(EVAL_BATCH_SIZE)
        sums = torch.zeros(2, dtype=torch.float64, device=self.device)  # loss sum, tokens
        for inputs, target, _ in self._windows(self.val_data, None):
            with self.autocast():
                logits, hidden, _, _ = self.model(inputs, hidden)
            sums[0] += F.cross_entropy(logits.float(), target.reshape(-1), reduction="sum").double()
            sums[1] += target.numel()
        reduced = sums.to(self.ctx.comm.control_device)
        self.ctx.comm.all_reduce(reduced, "sum")
        loss_sum, tokens = (float(v) for v in reduced.cpu())
        if tokens == 0:
            raise ValueError("the validation stream is empty on every rank")
        loss = loss_sum / tokens
        return {wire.VAL_GLOBAL_LOSS: loss, wire.VAL_GLOBAL_PERPLEXITY: math.exp(min(loss, 700.0))}

    def after_validation(self, epoch: int, metrics: dict[str, float], step: int) -> None:
        """Switch to averaged SGD when validation stopped improving (AWD-LSTM's non-monotone rule)."""
        loss = metrics[wire.VAL_GLOBAL_LOSS]
        if self.averaged is None:
            history = self.val_history
            if len(history) > self.nonmono and loss > min(history[: -self.nonmono]):
                self.averaged = [p.detach().clone() for p in self.params]
                self.averaged_steps = 0
                self.ctx.log(
                    f"epoch {epoch}: no improvement for {self.nonmono} epochs, switching to averaged SGD"
                )
            history.append(loss)


def run(ctx: RunContext) -> Outcome:
    """Train AWD-LSTM until the goal, ``max_time`` or ``max_epochs``."""
    trainer = AWDLSTMTrainer(ctx)
    return run_training(ctx, trainer, max_epochs=ctx.hyperparameters(hps.AwdLstm).max_epochs)
