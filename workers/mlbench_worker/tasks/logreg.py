"""Task 2a: L2-regularised logistic regression on epsilon to a validation top-1 goal.

Per MLBench: a bias-free linear model, binary cross-entropy plus ``l2/2 * ||w||^2`` (l2 =
2.5e-6), plain synchronous SGD (momentum 0) with gradients all-reduced over the whole model,
batch 128 per worker, LR 4 scaled linearly to 4*k (the planner sets ``lr``), reduce-on-plateau
of the validation loss (patience 2, factor 0.5), disjoint equal shards of the training set per
worker, validation on disjoint shares all-reduced into global metrics. The L2 gradient is applied
by the optimizer as weight decay (the same gradient, fused into the update); the reported loss
still includes the L2 term. ``optimizer`` may be ``centralized_sgd``, ``centralized_adam`` or
``power_sgd``. Data: ``synthetic`` (options of ``mlbench_worker.data.epsilon.synthetic``),
``path`` (a directory made by ``mlbench data prepare epsilon``) or ``download`` (prepared into
``data.path`` or the cache on local rank 0 of each host).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from mlbench_worker import hyperparams as hps
from mlbench_worker.context import RunContext
from mlbench_worker.data import epsilon
from mlbench_worker.data.device import to_device
from mlbench_worker.data.fetch import DatasetError, default_data_dir
from mlbench_worker.data.options import EpsilonSynthetic, options_of
from mlbench_worker.models.logreg import LogisticRegression
from mlbench_worker.optim import build_optimizer
from mlbench_worker.optim.schedules import WarmupPlateau
from mlbench_worker.tasks.base import Outcome
from mlbench_worker.tasks.steps import ClassificationTrainer, WarmupPlateauHooks
from mlbench_worker.tasks.training import run_training
from mlbench_worker.timing.startup import CLOCK


class RegularizedBCE(nn.Module):
    """Mean BCE on logits plus ``l2/2 * ||w||^2``, whose gradient the optimizer adds as weight decay."""

    def __init__(self, model: nn.Module, l2: float) -> None:
        super().__init__()
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.l2 = l2

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        loss = F.binary_cross_entropy_with_logits(logits, target.to(logits.dtype))
        if self.l2:
            with torch.no_grad():
                penalty = sum(p.pow(2).sum() for p in self.params) * (self.l2 / 2.0)
            loss = loss + penalty
        return loss


def load_epsilon(ctx: RunContext) -> dict[str, epsilon.LinearSplit]:
    """Train and validation splits from the configured source (memory-mapped for real data)."""
    data = ctx.config.data
    if data.source == "synthetic":
        options = options_of(data.options, EpsilonSynthetic)
        return epsilon.synthetic(options, seed=options.seed)
    if data.source == "path":
        assert data.path is not None  # checked by the config parser
        return epsilon.open_prepared(data.path)
    root = Path(data.path) if data.path else default_data_dir() / "epsilon"
    if ctx.rendezvous.local_rank == 0:
        try:
            ctx.log(f"preparing epsilon in {root}", all_ranks=True)
            epsilon.prepare(root)
        finally:
            ctx.comm.barrier()  # release the other ranks even when the download failed
    else:
        ctx.comm.barrier()
    try:
        return epsilon.open_prepared(root)
    except DatasetError as exc:
        raise DatasetError(f"{exc} (the preparation on local rank 0 failed; see its log)") from None


class LogRegTrainer(WarmupPlateauHooks, ClassificationTrainer):
    """Logistic regression on this rank's epsilon shard."""

    def __init__(self, ctx: RunContext) -> None:
        super().__init__(ctx)
        config = ctx.config
        hp = ctx.hyperparameters(hps.LogReg)
        self.batch_size = hp.batch_size
        splits = load_epsilon(ctx)
        CLOCK.mark("data")
        train, val = splits["train"], splits["val"]
        self.train_samples, self.eval_samples = len(train), len(val)
        if train.features != val.features:
            raise DatasetError(f"train has {train.features} features but validation {val.features}")
        shard = epsilon.shard_indices(len(train), ctx.rank, ctx.world_size, seed=config.seed)
        val_share = epsilon.shard_indices(len(val), ctx.rank, ctx.world_size, seed=config.seed, equal=False)
        batches = epsilon.LinearBatches(train, shard, self.batch_size, seed=config.seed)
        self.train_loader: epsilon.LinearBatches | epsilon.ResidentBatches = batches
        if self.device.type == "cuda" and epsilon.ResidentBatches.fits(batches, torch.cuda.mem_get_info()[0]):
            self.train_loader = epsilon.ResidentBatches(batches, self.device)
        resident = isinstance(self.train_loader, epsilon.ResidentBatches)
        self.val_loader = epsilon.LinearBatches(
            val, val_share, max(self.batch_size, 4096), seed=0, shuffle=False
        )
        model = LogisticRegression(train.features).to(self.device)
        for tensor in model.state_dict().values():
            ctx.comm.broadcast(tensor, src=0)
        self.model = model
        self.loss_fn = RegularizedBCE(model, hp.l2)
        self.optimizer = build_optimizer(hp.optimizer, model.parameters(), ctx.comm, hp.optimizer_settings())
        target_lr = hp.lr
        self.schedule = WarmupPlateau(
            base_lr=hp.base_lr if hp.base_lr is not None else target_lr / ctx.world_size,
            target_lr=target_lr,
            warmup_epochs=0.0,  # task 2a starts at its scaled rate
            steps_per_epoch=len(self.train_loader),
            patience=hp.plateau_patience,
            factor=hp.plateau_factor,
        )
        self.optimizer.set_lr(self.schedule.lr)
        ctx.log(
            f"epsilon ({config.data.source}): {len(train)} train / {len(val)} val rows x {train.features} "
            f"features, shard {len(shard)} per rank, {len(self.train_loader)} steps/epoch, "
            f"batch {self.batch_size}, lr {target_lr:g}, training shard "
            + ("in device memory" if resident else "read by batch")
        )

    def _tensors(
        self, batches: Iterable[tuple[np.ndarray, np.ndarray]]
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for x, y in batches:
            yield to_device(torch.from_numpy(x), self.device), to_device(torch.from_numpy(y), self.device)

    def train_batches(self, epoch: int) -> Iterable[tuple[torch.Tensor, torch.Tensor]]:
        loader = self.train_loader
        if isinstance(loader, epsilon.ResidentBatches):
            return loader.epoch(epoch)
        return self._tensors(loader.epoch(epoch))

    def val_batches(self) -> Iterable[tuple[torch.Tensor, torch.Tensor]]:
        return self._tensors(self.val_loader.epoch(0))

    def predictions_correct(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return ((output > 0).to(target.dtype) == target).sum()


def run(ctx: RunContext) -> Outcome:
    """Train logistic regression until the goal, ``max_time`` or ``max_epochs``."""
    trainer = LogRegTrainer(ctx)
    return run_training(ctx, trainer, max_epochs=ctx.hyperparameters(hps.LogReg).max_epochs)
