"""CIFAR-10 data: the python-pickle reader on generated files, the checked download, augmentation
and sharding."""

from __future__ import annotations

import hashlib
import pickle
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from mlbench_worker.data import cifar10
from mlbench_worker.data.fetch import DatasetError, RemoteFile


def _write_batch(path: Path, images: np.ndarray, labels: list[int]) -> None:
    # The layout of the official files: bytes keys, data as N x 3072 uint8 (R, G, B planes), protocol 2.
    doc = {
        b"batch_label": path.name.encode(),
        b"labels": labels,
        b"data": images.reshape(len(labels), 3072),
        b"filenames": [f"img{i}.png".encode() for i in range(len(labels))],
    }
    path.write_bytes(pickle.dumps(doc, protocol=2))


def make_batches(root: Path, per_file: int = 4, test: int = 6) -> tuple[np.ndarray, np.ndarray]:
    """Five train batches and a test batch; returns the expected train images and labels."""
    directory = root / cifar10.BATCHES_DIR
    directory.mkdir(parents=True)
    rng = np.random.default_rng(0)
    all_images, all_labels = [], []
    for name in cifar10.TRAIN_FILES:
        images = rng.integers(0, 256, size=(per_file, 3, 32, 32), dtype=np.uint8)
        labels = [int(x) for x in rng.integers(0, 10, size=per_file)]
        _write_batch(directory / name, images, labels)
        all_images.append(images)
        all_labels += labels
    _write_batch(
        directory / cifar10.TEST_FILE,
        rng.integers(0, 256, (test, 3, 32, 32), dtype=np.uint8),
        list(range(test)),
    )
    return np.concatenate(all_images), np.asarray(all_labels)


def test_reader_loads_the_real_pickle_format(tmp_path: Path) -> None:
    images, labels = make_batches(tmp_path)
    for root in (tmp_path, tmp_path / cifar10.BATCHES_DIR):  # the parent or the batches dir itself
        train, val = cifar10.load_batches(root)
        assert train.images.dtype == torch.uint8 and train.images.shape == (20, 3, 32, 32)
        assert np.array_equal(train.images.numpy(), images)  # channel planes land in (C, H, W)
        assert train.labels.tolist() == labels.tolist()
        assert len(val) == 6 and val.labels.tolist() == list(range(6))


def test_reader_rejects_missing_and_corrupt_files(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="no CIFAR-10 python batches"):
        cifar10.load_batches(tmp_path)
    make_batches(tmp_path)
    (tmp_path / cifar10.BATCHES_DIR / "data_batch_3").write_bytes(b"garbage")
    with pytest.raises(DatasetError, match="data_batch_3"):
        cifar10.load_batches(tmp_path)


def _archive(tmp_path: Path) -> tuple[Path, str]:
    src = tmp_path / "src"
    make_batches(src)
    archive = tmp_path / "served" / "cifar-10-python.tar.gz"
    archive.parent.mkdir()
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(src / cifar10.BATCHES_DIR, arcname=cifar10.BATCHES_DIR)
    return archive, hashlib.md5(archive.read_bytes()).hexdigest()


def test_download_verifies_and_extracts_the_archive(tmp_path: Path) -> None:
    archive, md5 = _archive(tmp_path)
    remote = RemoteFile(url=archive.as_uri(), filename=archive.name, checksums={"md5": md5})
    root = tmp_path / "cache"
    batches = cifar10.download(root, remote)
    assert batches == root / cifar10.BATCHES_DIR
    train, val = cifar10.load_batches(root)
    assert (len(train), len(val)) == (20, 6)
    archive.unlink()  # a second call uses the extracted copy, no network
    assert cifar10.download(root, remote) == batches
    assert not list(root.glob(".cifar-extract-*"))


def test_download_rejects_a_checksum_mismatch_and_leaves_nothing(tmp_path: Path) -> None:
    archive, _ = _archive(tmp_path)
    remote = RemoteFile(url=archive.as_uri(), filename=archive.name, checksums={"md5": "0" * 32})
    root = tmp_path / "cache"
    with pytest.raises(DatasetError, match="md5"):
        cifar10.download(root, remote)
    assert not (root / archive.name).exists() and not (root / cifar10.BATCHES_DIR).exists()


def test_official_archive_constants() -> None:
    assert cifar10.ARCHIVE.url == "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
    assert cifar10.ARCHIVE.checksums["md5"] == "c58f30108f718f92721af3b95e74349a"


def test_augmentation_is_a_shifted_flipped_crop_and_deterministic() -> None:
    images = torch.randint(0, 256, (64, 3, 32, 32), dtype=torch.uint8)
    aug = cifar10.Augmenter(torch.device("cpu"), seed=3)
    out = aug.crop_flip(images)
    assert out.shape == images.shape and out.dtype == torch.uint8
    # every output image is a 32x32 window of the zero-padded input, possibly mirrored
    padded = torch.nn.functional.pad(images, (4, 4, 4, 4))
    for i in range(8):
        windows = [padded[i, :, y : y + 32, x : x + 32] for y in range(9) for x in range(9)]
        assert any(torch.equal(out[i], w) or torch.equal(out[i], w.flip(2)) for w in windows)
    flipped = sum(
        torch.equal(out[i], padded[i, :, y : y + 32, x : x + 32].flip(2))
        for i in range(64)
        for y in range(9)
        for x in range(9)
    )
    assert 10 < flipped < 54  # about half are mirrored
    again = cifar10.Augmenter(torch.device("cpu"), seed=3).crop_flip(images)
    assert torch.equal(out, again)
    assert not torch.equal(out, cifar10.Augmenter(torch.device("cpu"), seed=4).crop_flip(images))


@pytest.mark.parametrize("channels_last", [False, True])
def test_epoch_batches_are_augmented_windows_of_their_own_samples(channels_last: bool) -> None:
    """The per-epoch path (the shard padded once, one gather per batch) keeps each label with a
    crop of its own image, in the configured layout."""
    data = cifar10.ImageSet(torch.randint(0, 256, (40, 3, 32, 32), dtype=torch.uint8), torch.arange(40))
    aug = cifar10.Augmenter(torch.device("cpu"), seed=1, channels_last=channels_last)
    batches = list(cifar10.train_batches(data, aug, 16, epoch=1, seed=2))
    assert [len(y) for _, y in batches] == [16, 16, 8]
    padded = torch.nn.functional.pad(data.images, (4, 4, 4, 4))
    mirrored = 0
    for x, y in batches:
        assert x.dtype == torch.float32 and x.is_contiguous(memory_format=aug.memory_format)
        for image, label in zip(x, y.tolist(), strict=True):
            windows = [padded[label, :, r : r + 32, c : c + 32] for r in range(9) for c in range(9)]
            plain = [aug.normalize(w[None])[0] for w in windows]
            if any(torch.allclose(image, w) for w in plain):
                continue
            assert any(torch.allclose(image, w.flip(2)) for w in plain)
            mirrored += 1
    assert 5 < mirrored < 35


def test_normalisation_and_channels_last() -> None:
    images = torch.full((2, 3, 32, 32), 128, dtype=torch.uint8)
    aug = cifar10.Augmenter(torch.device("cpu"), seed=0, channels_last=True)
    out = aug.normalize(images)
    assert out.dtype == torch.float32 and out.is_contiguous(memory_format=torch.channels_last)
    expected = (128 / 255 - torch.tensor(cifar10.MEAN)) / torch.tensor(cifar10.STD)
    assert torch.allclose(out[0, :, 0, 0], expected, atol=1e-5)


def test_shards_are_disjoint_equal_and_batches_cover_them() -> None:
    data = cifar10.ImageSet(torch.zeros(103, 3, 32, 32, dtype=torch.uint8), torch.arange(103))
    shards = [cifar10.shard(data, r, 3, seed=5) for r in range(3)]
    ids = [set(s.labels.tolist()) for s in shards]
    assert [len(s) for s in shards] == [34, 34, 34]
    assert not (ids[0] & ids[1]) and not (ids[1] & ids[2]) and not (ids[0] & ids[2])
    aug = cifar10.Augmenter(torch.device("cpu"), seed=0)
    batches = list(cifar10.train_batches(shards[0], aug, 16, epoch=1, seed=5))
    assert [len(y) for _, y in batches] == [16, 16, 2] == [16, 16, 34 - 32]
    assert sorted(torch.cat([y for _, y in batches]).tolist()) == sorted(ids[0])
    epoch2 = torch.cat([y for _, y in cifar10.train_batches(shards[0], aug, 16, epoch=2, seed=5)])
    assert epoch2.tolist() != torch.cat([y for _, y in batches]).tolist()  # reshuffled per epoch
    val = [cifar10.split(data, r, 2) for r in range(2)]
    assert len(val[0]) + len(val[1]) == 103 and set(val[0].labels.tolist()).isdisjoint(val[1].labels.tolist())


def test_synthetic_data_is_learnable_by_a_linear_model() -> None:
    """Each class is a fixed prototype plus noise: a linear classifier on 4x4-pooled, augmented
    images already separates them, so ResNet-20 can reach the light goal on it."""
    torch.manual_seed(0)
    train, val = cifar10.synthetic(512, 256, seed=0)
    assert train.images.dtype == torch.uint8 and sorted(set(train.labels.tolist())) == list(range(10))
    again, _ = cifar10.synthetic(512, 256, seed=0)
    assert torch.equal(train.images, again.images)  # every rank generates the same set
    aug = cifar10.Augmenter(torch.device("cpu"), seed=0)
    model = torch.nn.Sequential(torch.nn.AvgPool2d(8), torch.nn.Flatten(), torch.nn.Linear(48, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for epoch in range(1, 4):
        for x, y in cifar10.train_batches(train, aug, 64, epoch=epoch, seed=0):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    with torch.no_grad():
        x = aug.normalize(val.images)
        accuracy = (model(x).argmax(1) == val.labels).float().mean().item()
    assert accuracy > 0.9
