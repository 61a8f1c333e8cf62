"""Task 1b's synthetic data: a learnable ImageNet stand-in of any size, generated on the device.

Each class has a prototype, a random 4x4 colour grid upsampled to the image size (so the class
survives flips); an image is its class's prototype plus Gaussian noise, rounded to uint8. Images
are generated in chunks of ``CHUNK`` from a generator seeded by (seed, split, chunk), on the
rank's device, and a rank makes only its own shard: the data set is the same whatever the world
size, and nothing crosses from the host. Labels cycle through the classes in a seeded order.
Training batches are this rank's fixed contiguous shard, reshuffled each epoch, with random
horizontal flips (no decoding or cropping: a synthetic run measures the model and the
communication); validation is split contiguously, every image once.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from mlbench_worker.data.fetch import DatasetError
from mlbench_worker.data.image_batches import Normalizer
from mlbench_worker.data.options import SyntheticImageOptions
from mlbench_worker.telemetry.cgroup import cgroup_limits

CHUNK = 256
_SPLIT_SEED = {"train": 1, "val": 2}


@dataclass
class ImageShard:
    """uint8 images ``(N, 3, H, W)`` and int64 labels ``(N,)`` on one device."""

    images: torch.Tensor
    labels: torch.Tensor

    def __len__(self) -> int:
        return int(self.labels.shape[0])


def labels(n: int, classes: int, seed: int, split: str) -> torch.Tensor:
    """Every image's class: ``0..classes-1`` repeated, in a seeded order (on the host)."""
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 10 + _SPLIT_SEED[split]))
    return order % classes


def prototypes(options: SyntheticImageOptions, device: torch.device) -> torch.Tensor:
    """Each class's 4x4 colour grid (``classes x 3 x 4 x 4``, 28-228 on the 0-255 scale)."""
    gen = torch.Generator().manual_seed(options.seed)
    return (torch.rand(options.num_classes, 3, 4, 4, generator=gen) * 200.0 + 28.0).to(device)


def free_bytes(device: torch.device) -> int | None:
    """Memory this rank can still take on ``device``: the GPU's free memory, or the host's available
    memory within the cgroup's limit (None when unknown)."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None
    limit = cgroup_limits().memory_bytes
    return min(available, limit) if limit is not None else available


def check_fits(options: SyntheticImageOptions, images: int, device: torch.device) -> None:
    """Refuse, before making them, images that would not fit in the rank's memory (with a margin
    for the model and the step): a clear error instead of an out-of-memory kill."""
    need = images * 3 * options.image_size**2
    free = free_bytes(device)
    if free is not None and need > 0.6 * free:
        raise DatasetError(
            f"{images:,} synthetic images of {options.image_size}x{options.image_size} take "
            f"{need / 2**30:.1f} GiB on this rank, and its {device.type} has {free / 2**30:.1f} GiB free: "
            "use fewer train_samples or val_samples, a smaller image_size, or more ranks"
        )


def generate(
    options: SyntheticImageOptions, split: str, lo: int, hi: int, device: torch.device
) -> ImageShard:
    """Images ``lo``..``hi-1`` of ``split``, made on ``device`` chunk by chunk."""
    check_fits(options, hi - lo, device)
    n = options.train_samples if split == "train" else options.val_samples
    all_labels = labels(n, options.num_classes, options.seed, split)
    grids = prototypes(options, device)
    size = options.image_size
    images = torch.empty(hi - lo, 3, size, size, dtype=torch.uint8, device=device)
    for chunk in range(lo // CHUNK, -(-hi // CHUNK)):
        start, end = chunk * CHUNK, min(n, (chunk + 1) * CHUNK)
        gen = torch.Generator(device=device)
        gen.manual_seed(options.seed * 1_000_003 + _SPLIT_SEED[split] * 100_003 + chunk)
        chunk_labels = all_labels[start:end].to(device)
        base = F.interpolate(grids[chunk_labels], size=(size, size), mode="bilinear", align_corners=False)
        noise = torch.randn(base.shape, generator=gen, device=device) * options.noise
        pixels = (base + noise).round_().clamp_(0, 255).to(torch.uint8)
        a, b = max(start, lo), min(end, hi)
        images[a - lo : b - lo] = pixels[a - start : b - start]
    return ImageShard(images, all_labels[lo:hi].to(device))


def train_shard(
    options: SyntheticImageOptions, rank: int, world_size: int, device: torch.device
) -> ImageShard:
    """This rank's fixed, equal, contiguous share of the training images."""
    per = options.train_samples // world_size
    if per == 0:
        raise DatasetError(
            f"{options.train_samples} synthetic images cannot be split over {world_size} ranks"
        )
    return generate(options, "train", rank * per, (rank + 1) * per, device)


def val_shard(options: SyntheticImageOptions, rank: int, world_size: int, device: torch.device) -> ImageShard:
    """This rank's contiguous share of the validation images (every image once over all ranks)."""
    n = options.val_samples
    return generate(options, "val", n * rank // world_size, n * (rank + 1) // world_size, device)


class SyntheticBatches:
    """Training and validation batches of one rank's synthetic shards."""

    def __init__(
        self, train: ImageShard, val: ImageShard, normalizer: Normalizer, *, seed: int, device: torch.device
    ) -> None:
        self.train, self.val = train, val
        self.normalizer = normalizer
        self.seed = seed
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)

    def steps_per_epoch(self, batch: int) -> int:
        return len(self.train) // batch

    def train_batches(self, epoch: int, batch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Whole batches of the shard in a seeded order for ``epoch``, each image flipped or not."""
        n = len(self.train)
        order = torch.randperm(n, generator=torch.Generator().manual_seed(self.seed * 100_003 + epoch))
        order = order.to(self.train.images.device)
        device = self.train.images.device
        flips = torch.rand(n, generator=self.generator, device=device) < 0.5
        for start in range(0, n - batch + 1, batch):
            pick = order[start : start + batch]
            images = self.train.images.index_select(0, pick)
            images = torch.where(flips[start : start + batch, None, None, None], images.flip(-1), images)
            yield self.normalizer(images), self.train.labels.index_select(0, pick)

    def val_batches(self, batch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for start in range(0, len(self.val), batch):
            yield (
                self.normalizer(self.val.images[start : start + batch]),
                self.val.labels[start : start + batch],
            )
