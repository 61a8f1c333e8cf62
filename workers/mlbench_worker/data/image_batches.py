"""Task 1b's image batches from an indexed ImageNet: each rank's shard, decoded, cropped, normalised.

Training takes a random resized crop (area 8-100% of the image, aspect ratio 3/4 to 4/3, ten tries
then the centre, as torchvision's ``RandomResizedCrop``) to ``size`` and a random horizontal flip;
evaluation resizes the shorter side to ``resize`` and takes the centre ``size`` crop (as one
resize of the matching box). Every image's crop and flip come from a generator seeded by (seed,
epoch, image), so a batch is the same whichever process makes it. Each epoch permutes all the
training images with the run's seed and gives each rank an equal contiguous part of the
permutation in whole batches (every image at most once per epoch); validation is split
contiguously, every image once.

Decoding happens in one of two places. ``cpu``: loader processes (``torch.utils.data`` workers)
read and decode with Pillow and hand over uint8 batches. ``gpu``: the processes only read the
encoded bytes and the rank decodes them on its device (torchvision's nvJPEG ``decode_jpeg``),
crops and resizes there; an image the device decoder rejects (CMYK, a PNG named .JPEG) is decoded
with Pillow instead. A file that is missing or corrupt stops the run with a ``DatasetError``
naming it; a loader process that dies or stalls is an error too, never a hang.
"""

from __future__ import annotations

import functools
import io
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from mlbench_worker.data.device import to_device
from mlbench_worker.data.fetch import DatasetError
from mlbench_worker.data.imagenet import Reader, Split

MEAN_RGB = (0.485, 0.456, 0.406)  # MLPerf's reference and torchvision's, on the 0-1 scale
STD_RGB = (0.229, 0.224, 0.225)
SCALE = (0.08, 1.0)
RATIO = (3 / 4, 4 / 3)
LOADER_TIMEOUT_S = 600.0  # a loader process that yields no batch for this long is an error
Box = tuple[int, int, int, int]  # left, top, width, height


def random_box(width: int, height: int, rng: np.random.Generator) -> Box:
    """A random resized crop's box (torchvision's ``RandomResizedCrop.get_params``)."""
    area = width * height
    log_lo, log_hi = math.log(RATIO[0]), math.log(RATIO[1])
    for _ in range(10):
        target = area * rng.uniform(*SCALE)
        aspect = math.exp(rng.uniform(log_lo, log_hi))
        w = round(math.sqrt(target * aspect))
        h = round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            return int(rng.integers(0, width - w + 1)), int(rng.integers(0, height - h + 1)), w, h
    ratio = width / height
    if ratio < RATIO[0]:
        w, h = width, round(width / RATIO[0])
    elif ratio > RATIO[1]:
        w, h = round(height * RATIO[1]), height
    else:
        w, h = width, height
    return (width - w) // 2, (height - h) // 2, w, h


def centre_box(width: int, height: int, resize: int, size: int) -> Box:
    """The box that resizing the shorter side to ``resize`` then cropping the centre ``size``
    square takes from the original image."""
    side = max(1, round(min(width, height) * size / resize))
    side = min(side, width, height)
    return (width - side) // 2, (height - side) // 2, side, side


@dataclass(frozen=True)
class View:
    """How a split's images become model inputs: training crops or the evaluation centre crop."""

    train: bool
    size: int
    resize: int
    seed: int = 0

    def box(self, epoch: int, index: int, width: int, height: int) -> tuple[Box, bool]:
        """Image ``index``'s box and whether it is flipped, in ``epoch``."""
        if not self.train:
            return centre_box(width, height, self.resize, self.size), False
        rng = np.random.default_rng([self.seed, epoch, index])
        return random_box(width, height, rng), bool(rng.random() < 0.5)


# ------------------------------------------------------------------------------------ decoding


def decode_pil(data: bytes, name: Callable[[], str]) -> Any:
    """An RGB Pillow image of ``data``; ``DatasetError`` names the image when it is not one."""
    from PIL import Image, UnidentifiedImageError

    try:
        image = Image.open(io.BytesIO(data))
        image.load()
        return image.convert("RGB")
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        raise DatasetError(f"{name()}: not a decodable image ({exc})") from None


def pil_crop(image: Any, box: Box, flip: bool, size: int) -> np.ndarray:
    """The box of ``image`` resized to ``size`` x ``size`` (bilinear), flipped if asked: HWC uint8."""
    from PIL import Image

    left, top, w, h = box
    out = image.resize((size, size), Image.Resampling.BILINEAR, box=(left, top, left + w, top + h))
    if flip:
        out = out.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return np.asarray(out, dtype=np.uint8)


@dataclass(frozen=True)
class Request:
    """One batch to make: which images, in which epoch, seen how."""

    split: str
    epoch: int
    indices: np.ndarray
    view: View


@dataclass(frozen=True)
class LoadFailure:
    """A batch that could not be made, with the reason naming the image (sent back from a loader
    process instead of its traceback)."""

    message: str


@dataclass(frozen=True)
class EncodedBatch:
    """A batch's encoded images in one buffer (``offsets[k]:offsets[k+1]`` is image k) and labels."""

    data: torch.Tensor
    offsets: torch.Tensor
    labels: torch.Tensor
    indices: np.ndarray

    def images(self) -> list[torch.Tensor]:
        bounds = self.offsets.tolist()
        return [self.data[bounds[k] : bounds[k + 1]] for k in range(len(bounds) - 1)]


class BatchSource(torch.utils.data.Dataset[Any]):
    """Makes batches on request (``Request``): decoded uint8 HWC batches, or with ``encoded`` their
    bytes for a device decoder. Item failures come back as ``LoadFailure``."""

    def __init__(self, splits: dict[str, Split], *, encoded: bool) -> None:
        self.splits = splits
        self.encoded = encoded
        self._readers: dict[str, Reader] = {}

    def __len__(self) -> int:  # requests come from the sampler, not from a range
        return 0

    def reader(self, split: str) -> Reader:
        reader = self._readers.get(split)
        if reader is None:
            reader = self._readers[split] = Reader(self.splits[split])
        return reader

    def __getitem__(self, request: Request) -> Any:
        try:
            return self.make(request)
        except DatasetError as exc:
            return LoadFailure(str(exc))

    def make(self, request: Request) -> Any:
        split, reader = self.splits[request.split], self.reader(request.split)
        labels = torch.from_numpy(np.asarray(split.labels[request.indices], dtype=np.int64))
        if self.encoded:
            blobs = [reader.read(int(i)) for i in request.indices]
            offsets = np.zeros(len(blobs) + 1, dtype=np.int64)
            np.cumsum([len(b) for b in blobs], out=offsets[1:])
            data = torch.from_numpy(np.frombuffer(b"".join(blobs), dtype=np.uint8).copy())
            return EncodedBatch(data, torch.from_numpy(offsets), labels, request.indices)
        view, size = request.view, request.view.size
        out = np.empty((len(request.indices), size, size, 3), dtype=np.uint8)
        for k, index in enumerate(request.indices):
            i = int(index)
            image = decode_pil(reader.read(i), functools.partial(split.name_of, i))
            box, flip = view.box(request.epoch, i, image.width, image.height)
            out[k] = pil_crop(image, box, flip, size)
        return torch.from_numpy(out), labels


class Requests(torch.utils.data.Sampler[Request]):
    """The loader's sampler: the requests of the epoch the rank asks for next."""

    def __init__(self) -> None:
        self.requests: list[Request] = []

    def __iter__(self) -> Iterator[Request]:
        return iter(self.requests)

    def __len__(self) -> int:
        return len(self.requests)


# ------------------------------------------------------------------------------------- shards


def train_shard(n: int, rank: int, world_size: int, batch: int, *, seed: int, epoch: int) -> list[np.ndarray]:
    """This rank's training batches for ``epoch``: its equal contiguous part of a permutation of all
    ``n`` images (the same on every rank), in whole batches (the same count on every rank)."""
    per = n // world_size
    if per < batch:
        raise DatasetError(
            f"{n} training images give each of {world_size} ranks {per}, fewer than one batch of {batch}"
        )
    mine = np.random.default_rng([seed, epoch]).permutation(n)[rank * per : (rank + 1) * per]
    return [mine[s * batch : (s + 1) * batch] for s in range(per // batch)]


def val_shard(n: int, rank: int, world_size: int, batch: int) -> list[np.ndarray]:
    """This rank's validation batches: a contiguous share, every image once over the ranks."""
    lo, hi = n * rank // world_size, n * (rank + 1) // world_size
    return [np.arange(s, min(s + batch, hi)) for s in range(lo, hi, batch)]


# ------------------------------------------------------------------------------ on the device


class Normalizer:
    """0-255 images (uint8 or float, NCHW view) to normalised float32 in the run's memory format."""

    def __init__(self, device: torch.device, channels_last: bool) -> None:
        std = torch.tensor(STD_RGB, device=device).view(1, 3, 1, 1)
        self.scale = 1.0 / (std * 255.0)
        self.shift = -torch.tensor(MEAN_RGB, device=device).view(1, 3, 1, 1) / std
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        out = torch.addcmul(self.shift, images.to(torch.float32), self.scale)
        return out.contiguous(memory_format=self.memory_format)


Decode = Callable[[list[torch.Tensor]], list[torch.Tensor]]
"""Encoded images (uint8 1-D tensors) to CHW uint8 RGB tensors on the rank's device."""


def gpu_jpeg_decoder(device: torch.device) -> Decode | None:
    """torchvision's batched nvJPEG decoder on ``device``, or None where torchvision is missing or
    cannot load (imported here, lazily: it is optional)."""
    try:
        from torchvision.io import ImageReadMode, decode_jpeg
    except Exception:  # ImportError, or a torchvision built for another torch
        return None

    def decode(images: list[torch.Tensor]) -> list[torch.Tensor]:
        out = decode_jpeg(images, mode=ImageReadMode.RGB, device=device)
        return list(out) if isinstance(out, list | tuple) else [out]

    return decode


def pil_decoder(device: torch.device) -> Decode:
    """Pillow decoding to CHW tensors on ``device``: the stand-in for the device decoder (the CPU
    twin of the ``gpu`` path, and its fallback for images nvJPEG rejects)."""

    def decode(images: list[torch.Tensor]) -> list[torch.Tensor]:
        out = []
        for data in images:
            image = decode_pil(data.numpy().tobytes(), lambda: "image")
            hwc = torch.from_numpy(np.asarray(image, dtype=np.uint8).copy())
            out.append(to_device(hwc.permute(2, 0, 1).contiguous(), device))
        return out

    return decode


class DeviceImages:
    """Decodes ``EncodedBatch``es on the rank's device and makes the view's crops there."""

    def __init__(self, device: torch.device, decode: Decode, splits: dict[str, Split]) -> None:
        self.device = device
        self.decode = decode
        self.fallback = pil_decoder(device)
        self.splits = splits
        self.fallbacks = 0

    def _decoded(self, split: Split, batch: EncodedBatch) -> list[torch.Tensor]:
        images = batch.images()  # the decoder reads encoded bytes from host memory
        try:
            return self.decode(images)
        except RuntimeError:
            pass  # one of them is not a baseline JPEG: decode one by one, Pillow for the rejected
        out = []
        for k, data in enumerate(images):
            try:
                out += self.decode([data])
            except RuntimeError:
                i = int(batch.indices[k])
                try:
                    out += self.fallback([data])
                except DatasetError:
                    raise DatasetError(f"{split.name_of(i)}: not a decodable image") from None
                self.fallbacks += 1
        return out

    def make(self, request: Request, batch: EncodedBatch) -> torch.Tensor:
        """The batch as float 0-255 NCHW on the device, cropped, resized and flipped."""
        split, view = self.splits[request.split], request.view
        crops = []
        for k, image in enumerate(self._decoded(split, batch)):
            _, height, width = image.shape
            (left, top, w, h), flip = view.box(request.epoch, int(batch.indices[k]), width, height)
            crop = image[None, :, top : top + h, left : left + w].to(torch.float32)
            crop = F.interpolate(
                crop, size=(view.size, view.size), mode="bilinear", antialias=True, align_corners=False
            )
            crops.append(crop.flip(-1) if flip else crop)
        return torch.cat(crops).clamp_(0.0, 255.0)


class ImageLoader:
    """One rank's batches of an indexed ImageNet: loader processes (started for each pass over
    the data, training or validation, forked from the rank) and, for the ``gpu`` decoder,
    decoding on the device."""

    def __init__(
        self,
        splits: dict[str, Split],
        device: torch.device,
        normalizer: Normalizer,
        *,
        workers: int,
        prefetch: int,
        device_decode: Decode | None = None,
    ) -> None:
        self.device = device
        self.normalizer = normalizer
        self.source = BatchSource(splits, encoded=device_decode is not None)
        self.device_images = (
            DeviceImages(device, device_decode, splits) if device_decode is not None else None
        )
        self.requests = Requests()
        self.workers = workers
        self.loader: Iterable[Any] | None = None
        if workers > 0:
            self.loader = torch.utils.data.DataLoader(
                self.source,
                batch_size=None,
                sampler=self.requests,
                num_workers=workers,
                prefetch_factor=prefetch,
                persistent_workers=False,  # each pass starts them; a failed pass stops them
                pin_memory=device.type == "cuda",
                timeout=LOADER_TIMEOUT_S,
            )

    def batches(self, requests: Sequence[Request]) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The requested batches, in order, as normalised inputs and labels on the device."""
        self.requests.requests = list(requests)
        iterator: Iterator[Any] = (
            iter(self.loader) if self.loader is not None else map(self.source.__getitem__, requests)
        )
        failure: DatasetError | None = None
        for request in requests:
            try:
                item = next(iterator)
                if isinstance(item, LoadFailure):
                    raise DatasetError(item.message)
                images, labels = self._on_device(request, item)
            except (RuntimeError, ConnectionError, EOFError, DatasetError) as exc:
                failure = exc if isinstance(exc, DatasetError) else self._failure(exc)
                break
            yield self.normalizer(images), labels
        if failure is not None:  # raised here, with the loader let go: its processes stop now and
            del iterator  # torch stops watching them (a traceback would otherwise keep it alive)
            raise failure

    def _on_device(self, request: Request, item: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """A loader item's images (0-255, NCHW view) and labels on the rank's device."""
        if isinstance(item, EncodedBatch):
            assert self.device_images is not None
            return self.device_images.make(request, item), to_device(item.labels, self.device)
        host, labels = item
        return to_device(host, self.device).permute(0, 3, 1, 2), to_device(labels, self.device)

    @staticmethod
    def _failure(exc: BaseException) -> DatasetError:
        """The error for a loader that failed with ``exc`` (re-raised when it is not the loader's)."""
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if isinstance(exc, RuntimeError) and "DataLoader" not in text:
            raise exc
        if not isinstance(exc, RuntimeError):
            text = f"it died while handing over a batch ({text})"
        return DatasetError(f"an image loader process failed: {text}")
