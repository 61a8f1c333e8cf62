"""Task 1a: ResNet-20 on CIFAR-10 to a validation top-1 goal (MLBench's image classification task).

Per ANCHORS/MLBench: batch 128 per worker; LR 0.02 scaled to 0.02*k with a linear per-step
warm-up over log2(k) epochs, then reduce-on-plateau of the validation loss (patience 2, factor
0.5); SGD momentum 0.9, nesterov, weight decay 1e-4; cross-entropy; gradients averaged with
all-reduce over the whole model (CentralizedSGD); disjoint data per worker. Options:
``channels_last`` (``auto``, the default: the channels_last memory layout on CPU, where oneDNN's
convolutions run faster for the same math, NCHW on GPU); precision ``bf16`` autocast on CPU or
GPU, ``fp16``/``amp`` on GPU; ``overlap_comm`` (off, as in MLBench, so ``agg`` is the whole
all-reduce) starts bucket all-reduces during backward like DDP, and ``agg`` then measures only
the exposed communication. Synthetic data options: ``train_samples`` (4096: enough steps for
BatchNorm's running statistics to settle before the light goal), ``val_samples`` (512),
``noise`` (48.0), ``seed`` (0). ``download`` caches in ``data.path`` (default
``$MLBENCH_DATA_DIR`` or ``~/.cache/mlbench/data``).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import torch
from torch import nn

from mlbench_worker import hyperparams as hps
from mlbench_worker.context import RunContext
from mlbench_worker.data import cifar10
from mlbench_worker.data.fetch import DatasetError, default_data_dir
from mlbench_worker.data.options import Cifar10Synthetic, options_of
from mlbench_worker.models.resnet import resnet20
from mlbench_worker.optim import build_optimizer
from mlbench_worker.optim.schedules import WarmupPlateau
from mlbench_worker.tasks.base import Outcome
from mlbench_worker.tasks.steps import ClassificationTrainer, WarmupPlateauHooks
from mlbench_worker.tasks.training import run_training
from mlbench_worker.timing.startup import CLOCK


def load_cifar10(ctx: RunContext) -> tuple[cifar10.ImageSet, cifar10.ImageSet]:
    """The full train and validation sets from the configured source (CPU tensors)."""
    data = ctx.config.data
    if data.source == "synthetic":
        opts = options_of(data.options, Cifar10Synthetic)
        return cifar10.synthetic(opts.train_samples, opts.val_samples, seed=opts.seed, noise=opts.noise)
    if data.source == "path":
        assert data.path is not None  # checked by the config parser
        return cifar10.load_batches(Path(data.path))
    root = Path(data.path) if data.path else default_data_dir() / "cifar10"

    def fetch() -> None:
        root.mkdir(parents=True, exist_ok=True)
        ctx.log(f"fetching CIFAR-10 into {root}", all_ranks=True)
        cifar10.download(root)

    ctx.on_local_rank0(fetch)
    try:
        return cifar10.load_batches(root)
    except DatasetError as exc:
        raise DatasetError(f"{exc} (the download on local rank 0 failed; see its log)") from None


def use_channels_last(setting: object, device: torch.device) -> bool:
    """The ``channels_last`` hyperparameter resolved for ``device``: ``auto`` means on CPU only."""
    if setting == "auto":
        return device.type == "cpu"
    if isinstance(setting, bool):
        return setting
    raise ValueError(f"channels_last must be 'auto', true or false, got {setting!r}")


class ResNet20Trainer(WarmupPlateauHooks, ClassificationTrainer):
    """ResNet-20 on this rank's CIFAR-10 shard."""

    def __init__(self, ctx: RunContext) -> None:
        super().__init__(ctx)
        config = ctx.config
        hp = ctx.hyperparameters(hps.ResNet20)
        self.batch_size = hp.batch_size
        channels_last = use_channels_last(hp.channels_last, self.device)
        train_full, val_full = load_cifar10(ctx)
        CLOCK.mark("data")
        self.train_samples, self.eval_samples = len(train_full), len(val_full)
        self.seed = config.seed
        self.train_set = cifar10.shard(train_full, ctx.rank, ctx.world_size, seed=config.seed).to(self.device)
        self.val_set = cifar10.split(val_full, ctx.rank, ctx.world_size).to(self.device)
        self.augmenter = cifar10.Augmenter(
            self.device, seed=config.seed * 1000 + ctx.rank, channels_last=channels_last
        )
        model = resnet20(cifar10.NUM_CLASSES).to(self.device)
        if channels_last:
            model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        for tensor in model.state_dict().values():  # identical start on every rank, whatever the RNG
            ctx.comm.broadcast(tensor, src=0)
        self.model = model
        self.loss_fn = nn.CrossEntropyLoss()
        self.optimizer = build_optimizer(hp.optimizer, model.parameters(), ctx.comm, hp.optimizer_settings())
        target_lr = hp.lr
        steps = cifar10.steps_per_epoch(len(self.train_set), self.batch_size)
        self.schedule = WarmupPlateau(
            base_lr=hp.base_lr if hp.base_lr is not None else target_lr / ctx.world_size,
            target_lr=target_lr,
            warmup_epochs=hp.warmup_epochs,
            steps_per_epoch=steps,
            patience=hp.plateau_patience,
            factor=hp.plateau_factor,
        )
        self.optimizer.set_lr(self.schedule.lr)
        ctx.log(
            f"CIFAR-10 ({config.data.source}): {len(train_full)} train / {len(val_full)} val images, "
            f"shard {len(self.train_set)} per rank, {steps} steps/epoch, batch {self.batch_size}, "
            f"lr {self.schedule.base_lr:g} -> {target_lr:g} over {hp.warmup_epochs:g} epoch(s), "
            f"{'channels_last' if channels_last else 'NCHW'} layout"
        )

    def train_batches(self, epoch: int) -> Iterable[tuple[torch.Tensor, torch.Tensor]]:
        return cifar10.train_batches(
            self.train_set, self.augmenter, self.batch_size, epoch=epoch, seed=self.seed
        )

    def val_batches(self) -> Iterable[tuple[torch.Tensor, torch.Tensor]]:
        return cifar10.val_batches(self.val_set, self.augmenter, max(self.batch_size, 256))


def run(ctx: RunContext) -> Outcome:
    """Train ResNet-20 until the goal, ``max_time`` or ``max_epochs``."""
    trainer = ResNet20Trainer(ctx)
    return run_training(ctx, trainer, max_epochs=ctx.hyperparameters(hps.ResNet20).max_epochs)
