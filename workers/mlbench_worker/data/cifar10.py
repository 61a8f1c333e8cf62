"""CIFAR-10 as uint8 tensors, augmented in batches, sharded disjointly over ranks.

Sources: ``download`` fetches the official python archive (checked against its published md5)
and extracts it; ``path`` reads the standard ``cifar-10-batches-py`` pickle batches; ``synthetic``
generates a learnable stand-in (one fixed random low-frequency image per class plus per-sample
noise) so smoke runs reach the light goal in a few epochs. The whole set lives in memory on the
rank's device (150 MB for CIFAR-10, 240 MB padded) and each batch is augmented on that device in
a few kernels (``Augmenter``) rather than image by image.
"""

from __future__ import annotations

import pickle
import shutil
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from mlbench_worker.data.device import to_device
from mlbench_worker.data.fetch import DatasetError, RemoteFile, fetch, stderr_progress

ARCHIVE = RemoteFile(
    url="https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
    filename="cifar-10-python.tar.gz",
    checksums={"md5": "c58f30108f718f92721af3b95e74349a"},
    size=170498071,
)
BATCHES_DIR = "cifar-10-batches-py"
TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_FILE = "test_batch"
NUM_CLASSES = 10
# MLBench's CIFAR10V1 normalisation constants.
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2023, 0.1994, 0.2010)


@dataclass
class ImageSet:
    """Images as uint8 ``(N, 3, 32, 32)`` and labels as int64 ``(N,)``, on one device."""

    images: torch.Tensor
    labels: torch.Tensor

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def to(self, device: torch.device) -> ImageSet:
        return ImageSet(self.images.to(device), self.labels.to(device))


# -- the python-pickle format -----------------------------------------------------------------
def read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One pickle batch: ``data`` (N x 3072 uint8, channel-major rows) and ``labels``."""
    try:
        with path.open("rb") as fh:
            doc: dict[Any, Any] = pickle.load(fh, encoding="bytes")
    except FileNotFoundError:
        raise DatasetError(f"CIFAR-10 batch file {path} is missing") from None
    except (pickle.UnpicklingError, EOFError, ValueError) as exc:
        raise DatasetError(f"{path} is not a CIFAR-10 python batch: {exc}") from None
    data = doc.get(b"data", doc.get("data"))
    labels = doc.get(b"labels", doc.get("labels"))
    if data is None or labels is None:
        raise DatasetError(f"{path} has no 'data'/'labels' entries: not a CIFAR-10 python batch")
    array = np.asarray(data, dtype=np.uint8)
    if array.ndim != 2 or array.shape[1] != 3 * 32 * 32 or array.shape[0] != len(labels):
        raise DatasetError(f"{path}: data has shape {array.shape}, expected (N, 3072) with N = {len(labels)}")
    return array, np.asarray(labels, dtype=np.int64)


def _to_set(parts: list[tuple[np.ndarray, np.ndarray]]) -> ImageSet:
    data = np.concatenate([p[0] for p in parts])
    labels = np.concatenate([p[1] for p in parts])
    if labels.size and (labels.min() < 0 or labels.max() >= NUM_CLASSES):
        raise DatasetError(f"CIFAR-10 labels must be in 0..9, found {labels.min()}..{labels.max()}")
    images = torch.from_numpy(data.reshape(-1, 3, 32, 32).copy())
    return ImageSet(images, torch.from_numpy(labels))


def find_batches_dir(root: Path) -> Path:
    """``root`` itself or ``root/cifar-10-batches-py``, whichever holds the batches."""
    for candidate in (root, root / BATCHES_DIR):
        if (candidate / TEST_FILE).is_file():
            return candidate
    raise DatasetError(
        f"no CIFAR-10 python batches under {root} (expected {BATCHES_DIR}/data_batch_1..5 and test_batch); "
        "use data.source 'download' to fetch them"
    )


def load_batches(root: Path) -> tuple[ImageSet, ImageSet]:
    """The 50k train and 10k validation images from a directory of python batches."""
    directory = find_batches_dir(root)
    train = _to_set([read_batch(directory / name) for name in TRAIN_FILES])
    val = _to_set([read_batch(directory / TEST_FILE)])
    return train, val


def download(root: Path, remote: RemoteFile = ARCHIVE) -> Path:
    """Fetch and verify the archive into ``root`` and extract it (atomically); return the batches dir."""
    target = root / BATCHES_DIR
    if (target / TEST_FILE).is_file():
        return target
    archive = fetch(remote, root, progress=stderr_progress("cifar-10"))
    staging = Path(tempfile.mkdtemp(prefix=".cifar-extract-", dir=root))
    try:
        with tarfile.open(archive, "r:gz") as tar:
            tar.extractall(staging, filter="data")
        extracted = staging / BATCHES_DIR
        if not (extracted / TEST_FILE).is_file():
            raise DatasetError(f"{archive} does not contain {BATCHES_DIR}/{TEST_FILE}")
        try:
            extracted.rename(target)
        except OSError:
            if not (target / TEST_FILE).is_file():  # another rank finished first: fine
                raise
    except tarfile.TarError as exc:
        raise DatasetError(f"cannot extract {archive}: {exc}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


# -- synthetic ----------------------------------------------------------------------------------
def synthetic(
    train_samples: int, val_samples: int, *, seed: int = 0, noise: float = 48.0
) -> tuple[ImageSet, ImageSet]:
    """A learnable CIFAR-shaped set: per-class fixed low-frequency prototypes plus Gaussian noise.

    Prototypes are 4x4 random colour grids upsampled to 32x32, so the class survives random
    crops and flips; ``noise`` is the per-pixel standard deviation (uint8 scale). Every rank
    generates the same set from ``seed``.
    """
    gen = torch.Generator().manual_seed(seed)
    coarse = torch.rand(NUM_CLASSES, 3, 4, 4, generator=gen) * 200.0 + 28.0
    prototypes = F.interpolate(coarse, size=(32, 32), mode="bilinear", align_corners=False)

    def make(n: int) -> ImageSet:
        labels = torch.arange(n) % NUM_CLASSES
        labels = labels[torch.randperm(n, generator=gen)]
        images = prototypes[labels] + noise * torch.randn(n, 3, 32, 32, generator=gen)
        return ImageSet(images.round_().clamp_(0, 255).to(torch.uint8), labels)

    return make(train_samples), make(val_samples)


# -- batches ------------------------------------------------------------------------------------
class Augmenter:
    """Batched random crop (4-pixel zero padding), horizontal flip and normalisation.

    A crop is an offset into the padded image and a flip a choice between two pixel-index
    tables, so a batch is one gather of the padded images (laid out in the configured memory
    format) and one fused scale-and-shift: ``epoch_batches`` pads the shard once and draws an
    epoch's crops at once, leaving five small kernels per batch.
    """

    def __init__(self, device: torch.device, *, seed: int, pad: int = 4, channels_last: bool = False) -> None:
        self.device = device
        self.pad = pad
        self.generator = torch.Generator(device=device).manual_seed(seed)
        self.scale = 1.0 / (torch.tensor(STD, device=device).view(1, 3, 1, 1) * 255.0)
        self.shift = -torch.tensor(MEAN, device=device).view(1, 3, 1, 1) / torch.tensor(
            STD, device=device
        ).view(1, 3, 1, 1)
        self.channels_last = channels_last
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format
        self._tables: dict[tuple[int, int, int], torch.Tensor] = {}
        self._padded: tuple[torch.Tensor, torch.Tensor] | None = None  # (source images, padded copy)

    def _table(self, channels: int, height: int, width: int) -> torch.Tensor:
        """Pixel indices into one padded image for the plain [0] and mirrored [1] crop at offset 0,
        in output order (channel-major, or channel-minor for channels_last)."""
        key = (channels, height, width)
        if key not in self._tables:
            padded_w = width + 2 * self.pad
            plane = (height + 2 * self.pad) * padded_w
            ch = torch.arange(channels, device=self.device).view(-1, 1, 1) * plane
            rows = torch.arange(height, device=self.device).view(1, -1, 1) * padded_w
            cols = torch.arange(width, device=self.device).view(1, 1, -1)
            plain, mirrored = ch + rows + cols, ch + rows + cols.flip(2)  # (C, H, W)
            if self.channels_last:
                plain, mirrored = plain.permute(1, 2, 0), mirrored.permute(1, 2, 0)
            self._tables[key] = torch.stack([plain.reshape(-1), mirrored.reshape(-1)])
        return self._tables[key]

    def _draw(self, n: int, padded_w: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``n`` random crops: their offsets into a padded image, and whether each is mirrored."""
        span = 2 * self.pad + 1
        code = torch.randint(0, 2 * span * span, (n,), generator=self.generator, device=self.device)
        flip = code % 2
        where = code // 2
        return (where // span) * padded_w + where % span, flip

    def _gather(
        self, padded: torch.Tensor, base: torch.Tensor, flip: torch.Tensor, shape: tuple[int, int, int]
    ) -> torch.Tensor:
        """One gather of the crops starting at flat indices ``base``: uint8 in the memory format."""
        channels, height, width = shape
        index = self._table(channels, height, width).index_select(0, flip).add_(base[:, None])
        pixels = padded.reshape(-1).take(index)
        if self.channels_last:
            return pixels.view(-1, height, width, channels).permute(0, 3, 1, 2)
        return pixels.view(-1, channels, height, width)

    def pad_images(self, images: torch.Tensor) -> torch.Tensor:
        pad = self.pad
        return F.pad(images, (pad, pad, pad, pad))

    def crop_flip(self, images: torch.Tensor) -> torch.Tensor:
        """Random crops of the padded uint8 batch with random horizontal flips, in one gather."""
        batch, channels, height, width = images.shape
        padded = self.pad_images(images)
        offset, flip = self._draw(batch, width + 2 * self.pad)
        base = torch.arange(batch, device=self.device) * padded[0].numel() + offset
        return self._gather(padded, base, flip, (channels, height, width))

    def normalize(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 -> float32, per-channel standardised, in the configured memory format."""
        out = torch.addcmul(self.shift, images.to(torch.float32), self.scale)
        return out.contiguous(memory_format=self.memory_format)

    def train(self, images: torch.Tensor) -> torch.Tensor:
        return self.normalize(self.crop_flip(images))

    def epoch_batches(
        self, data: ImageSet, order: torch.Tensor, batch_size: int
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Augmented batches of ``data`` in ``order`` (a permutation on the data's device)."""
        images = data.images
        if self._padded is None or self._padded[0] is not images:
            self._padded = (images, self.pad_images(images))
        padded = self._padded[1]
        _, channels, height, width = images.shape
        offset, flip = self._draw(len(order), width + 2 * self.pad)
        base = order * padded[0].numel() + offset
        for start in range(0, len(order), batch_size):
            end = start + batch_size
            pixels = self._gather(padded, base[start:end], flip[start:end], (channels, height, width))
            yield (
                torch.addcmul(self.shift, pixels.to(torch.float32), self.scale),
                data.labels.index_select(0, order[start:end]),
            )


def shard(data: ImageSet, rank: int, world_size: int, *, seed: int) -> ImageSet:
    """This rank's fixed, disjoint, equal-sized share (a seeded permutation cut in ``world_size``
    parts, as MLBench partitioned by rank); up to ``world_size - 1`` samples are left out."""
    n = len(data)
    per = n // world_size
    if per == 0:
        raise DatasetError(f"{n} samples cannot be split over {world_size} ranks")
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    idx = perm[rank * per : (rank + 1) * per].to(data.images.device)
    return ImageSet(data.images[idx], data.labels[idx])


def split(data: ImageSet, rank: int, world_size: int) -> ImageSet:
    """Contiguous disjoint validation share (sizes may differ by one; every sample is used once)."""
    n = len(data)
    lo, hi = n * rank // world_size, n * (rank + 1) // world_size
    return ImageSet(data.images[lo:hi], data.labels[lo:hi])


def train_batches(
    data: ImageSet, augmenter: Augmenter, batch_size: int, *, epoch: int, seed: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Shuffled (per epoch), augmented batches of this rank's shard; the last batch may be short."""
    order = torch.randperm(len(data), generator=torch.Generator().manual_seed(seed * 100003 + epoch))
    return augmenter.epoch_batches(data, to_device(order, data.images.device), batch_size)


def val_batches(
    data: ImageSet, augmenter: Augmenter, batch_size: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Un-augmented, normalised batches in order."""
    for start in range(0, len(data), batch_size):
        yield (
            augmenter.normalize(data.images[start : start + batch_size]),
            data.labels[start : start + batch_size],
        )


def steps_per_epoch(shard_size: int, batch_size: int) -> int:
    return -(-shard_size // batch_size)
