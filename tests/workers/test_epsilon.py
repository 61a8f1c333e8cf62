"""epsilon: LIBSVM bz2 conversion to memory-mapped arrays, first-use checksums, shards, synthetic."""

from __future__ import annotations

import bz2
import json
import math
from pathlib import Path

import numpy as np
import pytest
from mlbench_worker.data import epsilon
from mlbench_worker.data.fetch import DatasetError
from mlbench_worker.data.options import EpsilonSynthetic


def _libsvm_lines(x: np.ndarray, y: np.ndarray) -> str:
    lines = []
    for row, label in zip(x, y, strict=True):
        pairs = " ".join(f"{j + 1}:{v:.6g}" for j, v in enumerate(row) if v != 0.0)
        lines.append(f"{'+1' if label else '-1'} {pairs}".rstrip())
    return "\n".join(lines) + "\n"


def _write_archives(root: Path, rng: np.random.Generator) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    data = {}
    for split, rows in (("train", 12), ("val", 5)):
        x = rng.standard_normal((rows, epsilon.N_FEATURES)).astype(np.float32)
        x[0, 100:] = 0.0  # a sparse row: missing indices are zeros
        x = np.round(x, 4)
        y = rng.integers(0, 2, rows).astype(np.uint8)
        text = _libsvm_lines(x, y)
        (root / epsilon.REMOTES[split].filename).write_bytes(bz2.compress(text.encode("ascii")))
        data[split] = (x, y)
    return data


def test_prepare_converts_libsvm_bz2_into_memory_mapped_arrays(tmp_path: Path) -> None:
    expected = _write_archives(tmp_path, np.random.default_rng(0))
    epsilon.prepare(tmp_path, quiet=True)
    splits = epsilon.open_prepared(tmp_path)
    for split, (x, y) in expected.items():
        assert isinstance(splits[split].x, np.memmap)
        np.testing.assert_allclose(splits[split].x, x, rtol=1e-5)
        np.testing.assert_array_equal(splits[split].y, y)
    sources = json.loads((tmp_path / "sources.json").read_text())
    assert set(sources) == {"epsilon_normalized.bz2", "epsilon_normalized.t.bz2"}
    assert len(sources["epsilon_normalized.bz2"]["sha256"]) == 64


def test_archive_changed_after_first_use_is_refused(tmp_path: Path) -> None:
    _write_archives(tmp_path, np.random.default_rng(1))
    epsilon.prepare(tmp_path, quiet=True)
    (tmp_path / "epsilon_normalized.t.bz2").write_bytes(bz2.compress(b"+1 1:0.5\n"))
    with pytest.raises(DatasetError, match="differs from the one recorded"):
        epsilon.prepare(tmp_path, force=True, quiet=True)


def test_malformed_line_names_file_and_line(tmp_path: Path) -> None:
    src = tmp_path / "bad.txt"
    src.write_text("+1 1:0.5 2:0.25\n-1 3:oops\n")
    with pytest.raises(DatasetError, match=r"bad.txt: line 2"):
        epsilon.convert_libsvm(src, tmp_path, "train", n_features=4)
    src.write_text("+1 9:0.5\n")
    with pytest.raises(DatasetError, match=r"outside 1\.\.4"):
        epsilon.convert_libsvm(src, tmp_path, "train", n_features=4)
    assert not list(tmp_path.glob("*.f32"))


def test_unprepared_directory_says_how_to_prepare(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="mlbench data prepare epsilon"):
        epsilon.open_prepared(tmp_path)


def test_shards_are_disjoint_equal_and_identical_across_ranks() -> None:
    shards = [epsilon.shard_indices(103, r, 4, seed=7) for r in range(4)]
    assert {len(s) for s in shards} == {25}
    merged = np.concatenate(shards)
    assert len(np.unique(merged)) == len(merged)
    np.testing.assert_array_equal(shards[2], epsilon.shard_indices(103, 2, 4, seed=7))


def test_batches_cover_the_shard_and_reshuffle_per_epoch() -> None:
    split = epsilon.synthetic(EpsilonSynthetic(train_samples=40, val_samples=8, features=6), seed=3)["train"]
    idx = np.arange(40)
    batches = epsilon.LinearBatches(split, idx, 16, seed=1)
    assert len(batches) == 3
    first = [y for _, y in batches.epoch(1)]
    assert [len(y) for y in first] == [16, 16, 8]
    assert sum(int(y.sum()) for y in first) == int(split.y.sum())
    xs1 = np.concatenate([x for x, _ in batches.epoch(1)])
    xs2 = np.concatenate([x for x, _ in batches.epoch(2)])
    assert not np.array_equal(xs1, xs2)


def test_synthetic_is_epsilon_shaped_and_linearly_learnable() -> None:
    n_train, n_val, features, signal = 2048, 512, 2000, 1.5  # the generator's default signal
    data = epsilon.synthetic(EpsilonSynthetic(train_samples=n_train, val_samples=n_val), seed=0)
    train, val = data["train"], data["val"]
    assert train.x.shape == (n_train, features) and train.x.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(train.x, axis=1), 1.0, rtol=1e-5)
    # The class-mean difference direction already separates the validation set well. Its noise
    # has variance 4/n_train per feature, so its cosine with the true direction is
    # 2s / sqrt(4s^2 + 4 features/n_train) and its expected accuracy Phi(s * cosine) (row
    # normalisation scales x, not the sign of x.w). Six binomial standard errors of the validation
    # accuracy below that leaves a margin no seed crosses.
    cosine = 2 * signal / math.sqrt(4 * signal**2 + 4 * features / n_train)
    expected = 0.5 * (1 + math.erf(signal * cosine / math.sqrt(2)))  # 0.894
    floor = expected - 6 * math.sqrt(expected * (1 - expected) / n_val)  # 0.812
    w = train.x[train.y == 1].mean(0) - train.x[train.y == 0].mean(0)
    accuracy = float(((val.x @ w > 0).astype(np.uint8) == val.y).mean())
    assert accuracy > floor > 0.8


def test_parallel_parsing_matches_serial_and_reports_the_bad_line(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    x = np.round(rng.standard_normal((1100, 6)), 4).astype(np.float32)
    y = rng.integers(0, 2, 1100).astype(np.uint8)
    src = tmp_path / "many.txt"
    src.write_text(_libsvm_lines(x, y))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert epsilon.convert_libsvm(src, tmp_path / "a", "train", n_features=6, workers=1) == 1100
    assert epsilon.convert_libsvm(src, tmp_path / "b", "train", n_features=6, workers=2) == 1100
    for name in ("train.x.f32", "train.y.u8"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    lines = src.read_text().splitlines()
    lines[1050] = "+1 7:0.5"
    src.write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetError, match="line 1051: feature index outside"):
        epsilon.convert_libsvm(src, tmp_path / "b", "train", n_features=6, workers=2)
