"""Task 1b's ImageNet: indexing the standard layout and the official archives, and each rank's
batches through the real loader (Pillow in loader processes, or the device decoder's CPU twin),
on small real JPEG files the tests write; corrupt, missing and truncated files, and a killed
loader process, stop with an error naming what went wrong, never a hang."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
import torch
from mlbench_worker.data import imagenet
from mlbench_worker.data.fetch import DatasetError
from mlbench_worker.data.image_batches import (
    ImageLoader,
    Normalizer,
    Request,
    View,
    centre_box,
    pil_decoder,
    random_box,
    train_shard,
    val_shard,
)
from support.imagenet_files import WNIDS, jpeg, write_archives, write_layout

pytestmark = pytest.mark.timeout(120)  # a hang is a failure, not a stuck suite


@pytest.fixture
def layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, dict[str, list[tuple[str, int]]]]:
    monkeypatch.setenv("MLBENCH_DATA_DIR", str(tmp_path / "cache"))
    root = tmp_path / "imagenet"
    return root, write_layout(root)


def _loader(index: imagenet.ImageNetIndex, workers: int, **kw: object) -> ImageLoader:
    splits = {"train": index.train, "val": index.val}
    return ImageLoader(
        splits, torch.device("cpu"), Normalizer(torch.device("cpu"), True), workers=workers, prefetch=2, **kw
    )  # type: ignore[arg-type]


def test_the_standard_layout_is_indexed_with_sorted_classes(layout: tuple[Path, dict]) -> None:
    root, expected = layout
    assert imagenet.prepare(root, quiet=True) == root
    index = imagenet.load_index(root)
    assert index.classes == tuple(sorted(WNIDS)) and index.source == "layout" and not index.official
    for split in ("train", "val"):
        got = index.split(split)
        assert [(got.files[int(r[0])], int(r[3])) for r in got.records] == expected[split]
        reader = imagenet.Reader(got)
        assert reader.read(3) == (root / expected[split][3][0]).read_bytes()
    assert (root / imagenet.INDEX_DIR / "meta.json").is_file()


def test_the_official_archives_are_verified_and_read_in_place(tmp_path: Path) -> None:
    root = tmp_path / "archives"
    archives = write_archives(root, train=3, val=2)
    imagenet.prepare(root, archives=archives, quiet=True)
    index = imagenet.load_index(root)
    assert index.source == "archives" and index.classes == tuple(sorted(WNIDS))
    train = imagenet.Reader(index.train)
    wnid = sorted(WNIDS)[1]
    with (  # the bytes at the recorded offsets
        tarfile.open(root / "ILSVRC2012_img_train.tar") as outer,
        tarfile.open(fileobj=outer.extractfile(f"{wnid}.tar")) as inner,
    ):
        member = inner.extractfile(f"{wnid}_2.JPEG")
        assert member is not None and train.read(1 * 3 + 2) == member.read()
    assert list(index.train.labels) == [i // 3 for i in range(12)]
    # validation image i is of class i % 4, though the devkit numbers the classes in another order
    assert list(index.val.labels) == [i % 4 for i in range(8)]
    assert imagenet.Reader(index.val).read(5) == jpeg(sorted(WNIDS)[5 % 4], 1005)


def test_archives_with_a_wrong_checksum_or_one_missing_are_refused(tmp_path: Path) -> None:
    root = tmp_path / "archives"
    write_archives(root, train=1, val=1)
    with pytest.raises(DatasetError, match=r"ILSVRC2012_img_train.tar: md5 \w+ does not match the published"):
        imagenet.prepare(root, quiet=True)  # the published checksums are the real archives'
    (root / "ILSVRC2012_devkit_t12.tar.gz").unlink()
    with pytest.raises(
        DatasetError, match=r"not ILSVRC2012_devkit_t12\.tar\.gz: all three archives are needed"
    ):
        imagenet.prepare(root, quiet=True)
    with pytest.raises(DatasetError, match=r"cannot be downloaded without an image-net\.org account"):
        imagenet.prepare(tmp_path / "empty", quiet=True)


def test_a_flat_validation_directory_is_labelled_by_the_devkit(tmp_path: Path) -> None:
    root = tmp_path / "imagenet"
    write_layout(root, val=0)
    shutil.rmtree(root / "val")
    archives = write_archives(tmp_path / "official", train=1, val=2)
    os.replace(tmp_path / "official" / archives.devkit.filename, root / archives.devkit.filename)
    with tarfile.open(tmp_path / "official" / archives.val.filename) as tar:
        tar.extractall(root / "val", filter="data")
    imagenet.prepare(root, quiet=True)
    index = imagenet.load_index(root)
    assert list(index.val.labels) == [i % 4 for i in range(8)]


def test_an_unwritable_dataset_directory_gets_its_index_in_the_cache(layout: tuple[Path, dict]) -> None:
    root, _ = layout
    (root / imagenet.INDEX_DIR).write_text("in the way")  # writing beside the data fails
    imagenet.prepare(root, quiet=True)
    found = imagenet.find_index(root)
    assert found is not None and found == imagenet.cache_index_dir(root)
    assert len(imagenet.load_index(root).train) == 24


def test_crop_boxes_stay_inside_the_image() -> None:
    rng = np.random.default_rng(0)
    for width, height in ((500, 375), (64, 300), (300, 64), (33, 33)):
        for _ in range(200):
            left, top, w, h = random_box(width, height, rng)
            assert left >= 0 and top >= 0 and w > 0 and h > 0 and left + w <= width and top + h <= height
    side = 375 * 224 // 256  # the shorter side resized to 256, its centre 224: 328 pixels of the original
    assert centre_box(500, 375, 256, 224) == ((500 - side) // 2, (375 - side) // 2, side, side)


def test_shards_are_disjoint_and_the_same_length_on_every_rank() -> None:
    ranks = [train_shard(103, r, 3, 8, seed=5, epoch=2) for r in range(3)]
    assert {len(batches) for batches in ranks} == {4}
    seen = np.concatenate([np.concatenate(b) for b in ranks])
    assert len(seen) == len(set(seen.tolist())) == 96
    assert not np.array_equal(
        np.concatenate(ranks[0]), np.concatenate(train_shard(103, 0, 3, 8, seed=5, epoch=3))
    )
    covered = np.concatenate([np.concatenate(val_shard(10, r, 3, 4)) for r in range(3)])
    assert covered.tolist() == list(range(10))


@pytest.mark.slow
def test_loader_processes_make_the_same_batches_as_the_rank(layout: tuple[Path, dict]) -> None:
    root, _ = layout
    imagenet.prepare(root, quiet=True)
    index = imagenet.load_index(root)
    view = View(train=True, size=32, resize=36, seed=4)
    requests = [Request("train", 1, s, view) for s in train_shard(len(index.train), 0, 1, 8, seed=4, epoch=1)]
    requests.append(Request("val", 0, np.arange(8), View(train=False, size=32, resize=36)))
    in_rank = list(_loader(index, 0).batches(requests))
    forked = list(_loader(index, 2).batches(requests))
    assert len(in_rank) == len(forked) == 4
    for (x, y), (x2, y2) in zip(in_rank, forked, strict=True):
        assert x.shape == (8, 3, 32, 32) and x.is_contiguous(memory_format=torch.channels_last)
        assert torch.equal(x, x2) and torch.equal(y, y2)
    assert in_rank[-1][1].tolist() == index.val.labels[:8].tolist()


@pytest.mark.parametrize("workers", [0, 1])
def test_a_corrupt_or_missing_file_is_named(layout: tuple[Path, dict], workers: int) -> None:
    root, expected = layout
    imagenet.prepare(root, quiet=True)
    index = imagenet.load_index(root)
    view = View(train=False, size=32, resize=36)
    bad = expected["val"][5][0]
    (root / bad).write_bytes(b"\xff\xd8 not really a JPEG")
    requests = [Request("val", 0, np.arange(s, s + 2), view) for s in range(0, 8, 2)]
    with pytest.raises(DatasetError, match=rf"{bad}: not a decodable image"):
        list(_loader(index, workers).batches(requests))
    (root / bad).unlink()
    with pytest.raises(
        DatasetError, match=rf"{bad}: missing .*restore the file or run 'mlbench data prepare"
    ):
        list(_loader(index, workers).batches(requests))


def test_a_truncated_archive_is_named(tmp_path: Path) -> None:
    root = tmp_path / "archives"
    archives = write_archives(root, train=1, val=2)
    imagenet.prepare(root, archives=archives, quiet=True)
    index = imagenet.load_index(root)
    last = index.val.records[-1]
    os.truncate(root / archives.val.filename, int(last[1]) + 10)
    with pytest.raises(DatasetError, match=r"ILSVRC2012_val_00000008.JPEG: .* is truncated \(10 of"):
        imagenet.Reader(index.val).read(len(index.val) - 1)


def test_the_device_decoder_path_crops_on_the_device_and_falls_back_to_pillow(
    layout: tuple[Path, dict],
) -> None:
    """The ``gpu`` decoder's path with its CPU twin (Pillow decoding to tensors on the device): the
    crops, resizes and flips run as on a GPU; an image the decoder rejects goes to Pillow."""
    root, expected = layout
    from PIL import Image

    png = root / expected["val"][2][0]
    Image.open(png).save(png, format="PNG")  # a PNG named .JPEG, as a few ImageNet files are
    imagenet.prepare(root, quiet=True)
    index = imagenet.load_index(root)
    twin = pil_decoder(torch.device("cpu"))

    def nvjpeg_like(images: list[torch.Tensor]) -> list[torch.Tensor]:
        if any(bytes(t[:4].tolist()) == b"\x89PNG" for t in images):
            raise RuntimeError("nvjpeg: unsupported image")
        return twin(images)

    view = View(train=False, size=32, resize=36)
    requests = [Request("val", 0, np.arange(0, 8), view)]
    device = _loader(index, 1, device_decode=nvjpeg_like)
    ((x, y),) = device.batches(requests)
    ((x_cpu, y_cpu),) = _loader(index, 0).batches(requests)
    assert x.shape == x_cpu.shape and torch.equal(y, y_cpu)
    assert device.device_images is not None and device.device_images.fallbacks == 1
    # two resize implementations (torch's antialiased bilinear, Pillow's): the same picture
    assert float((x - x_cpu).abs().mean()) < 0.05


@pytest.mark.slow
def test_a_killed_loader_process_is_an_error_not_a_hang(layout: tuple[Path, dict]) -> None:
    root, _ = layout
    imagenet.prepare(root, quiet=True)
    index = imagenet.load_index(root)
    view = View(train=True, size=32, resize=36)
    requests = [Request("train", e, np.arange(i, i + 1), view) for e in range(1, 6) for i in range(24)]
    batches = _loader(index, 1).batches(requests)
    next(batches)
    children = psutil.Process().children()
    assert children, "no loader process"
    started = time.monotonic()
    # torch's SIGCHLD handler may raise its own error (the same words) as soon as the process dies
    with pytest.raises(
        (DatasetError, RuntimeError),
        match=r"DataLoader worker .*(killed by signal|exited)|loader process failed: it died",
    ):
        for child in children:
            os.kill(child.pid, signal.SIGKILL)
        for _ in batches:
            pass
    assert time.monotonic() - started < 60


def test_staging_a_killed_writer_left_is_removed_and_a_live_ones_kept(layout: tuple[Path, dict]) -> None:
    root, _ = layout
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    host = socket.gethostname()
    stale = root / f"{imagenet.STAGING}{host}-{int(dead.stdout)}-abc"
    live = root / f"{imagenet.STAGING}{host}-{os.getpid()}-def"  # this process: still writing
    for directory in (stale, live):
        directory.mkdir()
        (directory / "train.npy").write_bytes(b"half written")
    imagenet.prepare(root, quiet=True)
    assert not stale.exists() and live.exists()
    assert len(imagenet.load_index(root).val) == 8


def test_synthetic_images_that_would_not_fit_are_refused_before_they_are_made() -> None:
    from mlbench_worker.data import synthetic_images
    from mlbench_worker.data.options import SyntheticImageOptions

    options = SyntheticImageOptions(train_samples=2**31 - 1, image_size=224)
    with pytest.raises(DatasetError, match=r"2,147,483,647 synthetic images of 224x224 take 301056\.0 GiB"):
        synthetic_images.train_shard(options, 0, 1, torch.device("cpu"))
