"""Task 1b: ResNet-50 v1.5 on ImageNet to 75.9% top-1, as MLPerf Training's image classification runs it.

The model is ``models.resnet50`` (He et al. 2015, v1.5 strides); the loss cross-entropy with label
smoothing 0.1; training crops are random resized crops to 224 with flips, evaluation crops the
centre 224 of the image resized to 256 (``data.image_batches``). The update is MLPerf's reference
(``mlcommons/training``, ``image_classification``): LARS (``optim.lars``) for large global batches,
SGD with momentum 0.9 for small ones, the learning rate rising linearly from 0 over the warm-up
epochs and then decaying as a polynomial of power 2 to 1e-4 at ``max_epochs``
(``optim.schedules.PolyWarmup``); BatchNorm parameters and biases take neither weight decay nor
LARS's trust ratio. ``hyperparams.ResNet50`` holds the values and MLPerf's rules on them.
Gradients are averaged by the run's distributed optimizer (all-reduce or PowerSGD).

Data (``data.options`` in ``data.options``): ``synthetic`` generates a learnable set of
any size and number of classes on the device (``data.synthetic_images``); ``path`` and
``download`` read an ImageNet indexed by ``mlbench data prepare imagenet`` (the official archives
or the standard layout; local rank 0 indexes it when no index exists yet), decoding on the GPU
(torchvision's nvJPEG) or with Pillow in loader processes. ``channels_last`` (``auto``) trains in
the channels_last memory layout on every device (oneDNN's CPU and cuDNN's tensor-core
convolutions both prefer it).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import torch
from torch import nn

from mlbench_worker import hyperparams as hps
from mlbench_worker.context import RunContext
from mlbench_worker.data import imagenet, synthetic_images
from mlbench_worker.data.fetch import DatasetError, default_data_dir
from mlbench_worker.data.image_batches import (
    Decode,
    ImageLoader,
    Normalizer,
    Request,
    View,
    gpu_jpeg_decoder,
    train_shard,
    val_shard,
)
from mlbench_worker.data.options import ImageNetFileOptions, SyntheticImageOptions
from mlbench_worker.models.resnet50 import resnet50
from mlbench_worker.optim import build_optimizer
from mlbench_worker.optim.schedules import PolyWarmup
from mlbench_worker.tasks.base import Outcome
from mlbench_worker.tasks.steps import ClassificationTrainer
from mlbench_worker.tasks.training import run_training
from mlbench_worker.timing.startup import CLOCK


def use_channels_last(setting: object) -> bool:
    """The ``channels_last`` hyperparameter resolved: ``auto`` is channels_last on every device."""
    if setting == "auto":
        return True
    if isinstance(setting, bool):
        return setting
    raise ValueError(f"channels_last must be 'auto', true or false, got {setting!r}")


def dataset_root(ctx: RunContext) -> Path:
    """The ImageNet directory: ``data.path``, or the cache's ``imagenet`` for ``download``."""
    data = ctx.config.data
    return Path(data.path).expanduser() if data.path else default_data_dir() / "imagenet"


def load_imagenet(ctx: RunContext) -> imagenet.ImageNetIndex:
    """The run's indexed ImageNet; local rank 0 indexes it first when no index exists."""
    root = dataset_root(ctx)

    def ensure() -> None:
        if imagenet.find_index(root) is None:
            ctx.log(f"indexing ImageNet in {root} (once; 'mlbench data prepare imagenet' does it ahead)")
            imagenet.prepare(root)

    try:
        ctx.on_local_rank0(ensure)
    except DatasetError as exc:
        raise DatasetError(f"{exc} (local rank 0 indexing {root})") from None
    return imagenet.load_index(root)


def device_decoder(setting: str, device: torch.device) -> Decode | None:
    """The decoder the ``decoder`` option asks for on ``device``: a device decoder, or None to
    decode with Pillow in the loader processes."""
    if setting == "cpu":
        return None
    decode = gpu_jpeg_decoder(device) if device.type == "cuda" else None
    if decode is None and setting == "gpu":
        raise DatasetError(
            "data option decoder 'gpu' needs a CUDA device and torchvision (installed for the run's "
            "torch build): install it, or set decoder to 'cpu' or 'auto'"
        )
    return decode


class ResNet50Trainer(ClassificationTrainer):
    """ResNet-50 on this rank's ImageNet (or synthetic) shard."""

    def __init__(self, ctx: RunContext) -> None:
        super().__init__(ctx)
        config = ctx.config
        hp = ctx.hyperparameters(hps.ResNet50)
        recipe = hp.recipe(ctx.world_size)
        self.batch_size = hp.batch_size
        self.seed = config.seed
        channels_last = use_channels_last(hp.channels_last)
        normalizer = Normalizer(self.device, channels_last)
        options = config.data.options  # typed for 1b's source when the config was read
        self.synthetic: synthetic_images.SyntheticBatches | None = None
        self.loader: ImageLoader | None = None
        if isinstance(options, SyntheticImageOptions):
            classes, size = options.num_classes, options.image_size
            self.synthetic = synthetic_images.SyntheticBatches(
                synthetic_images.train_shard(options, ctx.rank, ctx.world_size, self.device),
                synthetic_images.val_shard(options, ctx.rank, ctx.world_size, self.device),
                normalizer,
                seed=config.seed * 1000 + ctx.rank,
                device=self.device,
            )
            self.train_samples, self.eval_samples = options.train_samples, options.val_samples
            where = f"synthetic, {classes} classes, {size}x{size}"
        else:
            if not isinstance(options, ImageNetFileOptions):  # a config built by hand, say
                options = ImageNetFileOptions()
            index = load_imagenet(ctx)
            classes, size = len(index.classes), hp.image_size
            decode = device_decoder(options.decoder, self.device)
            workers = (
                options.loader_workers if options.loader_workers is not None else config.threads_per_rank
            )
            self.loader = ImageLoader(
                {"train": index.train, "val": index.val},
                self.device,
                normalizer,
                workers=workers,
                prefetch=options.prefetch_batches,
                device_decode=decode,
            )
            self.train_samples, self.eval_samples = len(index.train), len(index.val)
            self.index = index
            self.train_view = View(train=True, size=size, resize=hp.eval_resize, seed=config.seed)
            self.eval_view = View(train=False, size=size, resize=hp.eval_resize)
            decoding = "on the device" if decode else f"with Pillow in {workers} loader process(es)"
            where = f"{index.source} in {index.root}, {classes} classes, decoded {decoding}"
            if not index.official:
                where += "; not the official image counts, so not MLPerf's closed division"
        CLOCK.mark("data")
        steps = hp.steps_per_epoch(self.train_samples, ctx.world_size)
        if steps == 0:
            raise DatasetError(
                f"{self.train_samples} training images give each of {ctx.world_size} rank(s) less than one "
                f"batch of {self.batch_size}: use a smaller batch_size or more images"
            )
        model = resnet50(classes, zero_init_residual=hp.zero_init_residual).to(self.device)
        if channels_last:
            model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        for tensor in model.state_dict().values():  # identical start on every rank, whatever the RNG
            ctx.comm.broadcast(tensor, src=0)
        self.model = model
        self.loss_fn = nn.CrossEntropyLoss(label_smoothing=hp.label_smoothing)
        self.optimizer = build_optimizer(
            hp.optimizer, model.parameters(), ctx.comm, hp.optimizer_settings(ctx.world_size)
        )
        warmup = round(recipe.warmup_epochs * steps)
        self.schedule = PolyWarmup(
            peak_lr=recipe.lr,
            end_lr=hp.end_lr,
            warmup_steps=warmup,
            decay_steps=recipe.max_epochs * steps - warmup + 1,
            power=hp.poly_power,
        )
        self.optimizer.set_lr(self.schedule.lr)
        self.max_epochs = recipe.max_epochs
        ctx.log(
            f"ImageNet ({where}): {self.train_samples} train / {self.eval_samples} val images, "
            f"{steps} steps/epoch of {self.batch_size} per rank; {recipe.opt_name} lr {recipe.lr:g} "
            f"(warm-up {recipe.warmup_epochs:g} epochs, poly-{hp.poly_power:g} decay to {hp.end_lr:g} at "
            f"epoch {recipe.max_epochs}), weight decay {recipe.weight_decay:g}, label smoothing "
            f"{hp.label_smoothing:g}, {'channels_last' if channels_last else 'NCHW'} layout"
        )

    def before_step(self, step: int) -> None:
        lr = self.schedule.on_step(step)
        if lr != self.optimizer.lr:
            self.optimizer.set_lr(lr)

    def train_batches(self, epoch: int) -> Iterable[tuple[torch.Tensor, torch.Tensor]]:
        if self.synthetic is not None:
            return self.synthetic.train_batches(epoch, self.batch_size)
        assert self.loader is not None
        shards = train_shard(
            len(self.index.train),
            self.ctx.rank,
            self.ctx.world_size,
            self.batch_size,
            seed=self.seed,
            epoch=epoch,
        )
        return self.loader.batches([Request("train", epoch, s, self.train_view) for s in shards])

    def val_batches(self) -> Iterable[tuple[torch.Tensor, torch.Tensor]]:
        batch = max(self.batch_size, 256)
        if self.synthetic is not None:
            return self.synthetic.val_batches(batch)
        assert self.loader is not None
        shards = val_shard(len(self.index.val), self.ctx.rank, self.ctx.world_size, batch)
        return self.loader.batches([Request("val", 0, s, self.eval_view) for s in shards])


def run(ctx: RunContext) -> Outcome:
    """Train ResNet-50 until the goal, ``max_time`` or the schedule's last epoch."""
    trainer = ResNet50Trainer(ctx)
    return run_training(ctx, trainer, max_epochs=trainer.max_epochs)
