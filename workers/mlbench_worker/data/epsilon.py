"""The epsilon dataset (PASCAL large-scale challenge, LIBSVM's normalized copy) for task 2a.

``prepare(directory)`` downloads ``epsilon_normalized.bz2`` (400,000 rows) and
``epsilon_normalized.t.bz2`` (100,000 rows) from the LIBSVM site and converts them once into raw
little-endian arrays that every rank memory-maps: ``<split>.x.f32`` (rows x 2000 float32, C order)
and ``<split>.y.u8`` (labels 0/1), described by ``meta.json`` (written last, so its presence
means the conversion finished). LIBSVM publishes no checksums for these files: the first download
records sha256 and size in ``sources.json`` and later runs verify against that record (see
``fetch``). Each rank reads a disjoint, equally sized shard of a seeded permutation, so all ranks
take the same number of steps per epoch. ``synthetic`` builds a learnable linear problem of the
same shape (unit-norm rows, two Gaussian classes separated along a hidden direction) for smoke
runs without the 15 GB download.
"""

from __future__ import annotations

import bz2
import collections
import itertools
import json
import os
import sys
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch

from mlbench_worker.data.device import copy_into, to_device
from mlbench_worker.data.fetch import DatasetError, RemoteFile, fetch, stderr_progress
from mlbench_worker.data.options import EpsilonSynthetic

N_FEATURES = 2000
FORMAT = "mlbench-epsilon/1"
BASE_URL = "https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/binary"
# LIBSVM publishes neither checksums nor sizes for these archives: verified by trust on first use.
REMOTES: Mapping[str, RemoteFile] = {
    "train": RemoteFile(f"{BASE_URL}/epsilon_normalized.bz2", "epsilon_normalized.bz2"),
    "val": RemoteFile(f"{BASE_URL}/epsilon_normalized.t.bz2", "epsilon_normalized.t.bz2"),
}
OFFICIAL_ROWS = {"train": 400_000, "val": 100_000}
_CHUNK_ROWS = 512


@dataclass(frozen=True)
class LinearSplit:
    """One split of a dense binary classification dataset: features and 0/1 labels."""

    x: np.ndarray  # (rows, features) float32, possibly a read-only memmap
    y: np.ndarray  # (rows,) uint8 in {0, 1}

    def __len__(self) -> int:
        return int(self.y.shape[0])

    @property
    def features(self) -> int:
        return int(self.x.shape[1])


# --------------------------------------------------------------------------- LIBSVM conversion


def _parse_line(line: str, lineno: int, n_features: int, row: np.ndarray) -> int:
    """Fill ``row`` from one LIBSVM line (``label idx:val ...``, 1-based); return the 0/1 label."""
    head, _, rest = line.strip().partition(" ")
    try:
        label = float(head)
        pairs = np.fromstring(rest.replace(":", " "), dtype=np.float64, sep=" ") if rest else np.empty(0)
    except ValueError:
        raise DatasetError(f"line {lineno}: not a LIBSVM line ('label index:value ...')") from None
    if pairs.size % 2:
        raise DatasetError(f"line {lineno}: unpaired index:value entry")
    idx = pairs[0::2].astype(np.int64) - 1
    if idx.size and (idx.min() < 0 or idx.max() >= n_features):
        raise DatasetError(f"line {lineno}: feature index outside 1..{n_features}")
    row[:] = 0.0
    row[idx] = pairs[1::2]
    return 1 if label > 0 else 0


def _open_text(path: Path) -> IO[str]:
    if path.suffix == ".bz2":
        return bz2.open(path, "rt", encoding="ascii")
    return path.open("r", encoding="ascii")


def _parse_chunk(job: tuple[list[str], int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Parse consecutive lines (the first numbered ``first``) into a float32 block and labels."""
    lines, first, n_features = job
    block = np.zeros((len(lines), n_features), dtype=np.float32)
    labels = np.zeros(len(lines), dtype=np.uint8)
    filled = 0
    for offset, line in enumerate(lines):
        if line.strip():
            labels[filled] = _parse_line(line, first + offset, n_features, block[filled])
            filled += 1
    return block[:filled], labels[:filled]


def _chunks(text: IO[str], n_features: int) -> Iterator[tuple[list[str], int, int]]:
    lineno = 1
    while True:
        lines = list(itertools.islice(text, _CHUNK_ROWS))
        if not lines:
            return
        yield lines, lineno, n_features
        lineno += len(lines)


def _parsed(text: IO[str], n_features: int, workers: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Parsed chunks in file order; with ``workers > 1`` the float parsing (the slow part) runs in
    a process pool with a bounded number of chunks in flight while this process decompresses."""
    if workers <= 1:
        yield from map(_parse_chunk, _chunks(text, n_features))
        return
    with ProcessPoolExecutor(max_workers=workers) as pool:
        pending: collections.deque[Future[tuple[np.ndarray, np.ndarray]]] = collections.deque()
        for job in _chunks(text, n_features):
            pending.append(pool.submit(_parse_chunk, job))
            if len(pending) >= 2 * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def convert_libsvm(
    source: Path, out_dir: Path, split: str, n_features: int = N_FEATURES, *, workers: int = 1
) -> int:
    """Convert one LIBSVM file (plain or ``.bz2``) into ``<split>.x.f32`` / ``<split>.y.u8``; return rows."""
    x_tmp, y_tmp = out_dir / f".{split}.x.f32.part", out_dir / f".{split}.y.u8.part"
    rows = 0
    try:
        with _open_text(source) as text, x_tmp.open("wb") as xf, y_tmp.open("wb") as yf:
            for block, labels in _parsed(text, n_features, workers):
                xf.write(block.astype("<f4", copy=False).tobytes())
                yf.write(labels.tobytes())
                rows += len(labels)
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        x_tmp.unlink(missing_ok=True)
        y_tmp.unlink(missing_ok=True)
        raise DatasetError(f"cannot read {source}: {exc}") from None
    except DatasetError as exc:
        x_tmp.unlink(missing_ok=True)
        y_tmp.unlink(missing_ok=True)
        raise DatasetError(f"{source}: {exc}") from None
    if rows == 0:
        raise DatasetError(f"{source}: no data rows")
    os.replace(x_tmp, out_dir / f"{split}.x.f32")
    os.replace(y_tmp, out_dir / f"{split}.y.u8")
    return rows


def is_prepared(directory: Path) -> bool:
    """Whether ``directory`` holds a finished conversion."""
    return (Path(directory) / "meta.json").exists()


def prepare(
    directory: str | os.PathLike[str], *, force: bool = False, quiet: bool = False, workers: int | None = None
) -> Path:
    """Download (unless present and verified) and convert epsilon into ``directory``; return it.

    Archives already in ``directory`` are used as they are (after verification), so air-gapped
    machines can copy the two ``.bz2`` files in by hand. Parsing uses ``workers`` processes
    (default: the CPU count).
    """
    workers = max(1, workers if workers is not None else (os.cpu_count() or 1))
    out = Path(directory).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    if is_prepared(out) and not force:
        return out
    (out / "meta.json").unlink(missing_ok=True)
    splits: dict[str, dict[str, Any]] = {}
    for split, remote in REMOTES.items():
        progress = None if quiet else stderr_progress(f"epsilon {remote.filename}")
        archive = fetch(remote, out, progress=progress)
        if not quiet:
            print(f"epsilon: converting {archive.name}", file=sys.stderr, flush=True)
        rows = convert_libsvm(archive, out, split, workers=workers)
        splits[split] = {"rows": rows, "source": remote.filename}
        if rows != OFFICIAL_ROWS[split] and not quiet:
            print(
                f"epsilon: note: {rows} {split} rows (the official file has {OFFICIAL_ROWS[split]})",
                file=sys.stderr,
            )
    meta = {"format": FORMAT, "features": N_FEATURES, "splits": splits}
    tmp = out / ".meta.json.tmp"
    tmp.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, out / "meta.json")
    return out


def open_prepared(directory: str | os.PathLike[str]) -> dict[str, LinearSplit]:
    """Memory-map a prepared directory (read-only): ``{"train": ..., "val": ...}``."""
    root = Path(directory).expanduser()
    try:
        meta = json.loads((root / "meta.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DatasetError(
            f"{root} holds no prepared epsilon data (no meta.json); run: mlbench data prepare epsilon "
            f"--dir {root}"
        ) from None
    except (OSError, json.JSONDecodeError) as exc:
        raise DatasetError(f"{root / 'meta.json'} is unreadable: {exc}") from None
    if meta.get("format") != FORMAT:
        raise DatasetError(f"{root}: unknown format {meta.get('format')!r}, expected {FORMAT!r}")
    features = int(meta["features"])
    result: dict[str, LinearSplit] = {}
    for split, info in meta["splits"].items():
        rows = int(info["rows"])
        x_path, y_path = root / f"{split}.x.f32", root / f"{split}.y.u8"
        expected = rows * features * 4
        if not x_path.exists() or x_path.stat().st_size != expected:
            raise DatasetError(f"{x_path} is missing or truncated (expected {expected} bytes); prepare again")
        x = np.memmap(x_path, dtype="<f4", mode="r", shape=(rows, features))
        y = np.memmap(y_path, dtype=np.uint8, mode="r", shape=(rows,))
        result[split] = LinearSplit(x=x, y=y)
    return result


# --------------------------------------------------------------------------- synthetic source


def synthetic(options: EpsilonSynthetic, seed: int) -> dict[str, LinearSplit]:
    """A learnable linear problem shaped like epsilon: unit-norm rows, 0/1 labels.

    Class means sit at +-``signal`` along a hidden unit direction in isotropic Gaussian noise, so
    the Bayes accuracy is Phi(signal) (93% at the default 1.5) and plain SGD on logistic loss
    passes 80% within an epoch or two (``EpsilonSynthetic`` declares the options).
    """
    n_train, n_val = options.train_samples, options.val_samples
    features, signal = options.features, options.signal
    if n_train < 1 or n_val < 1 or features < 1:
        raise DatasetError("synthetic epsilon needs train_samples, val_samples and features >= 1")
    rng = np.random.default_rng(seed)
    direction = rng.standard_normal(features)
    direction /= np.linalg.norm(direction)

    def make(n: int) -> LinearSplit:
        y = rng.integers(0, 2, size=n).astype(np.uint8)
        x = rng.standard_normal((n, features))
        x += np.outer((2.0 * y - 1.0) * signal, direction)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        return LinearSplit(x=x.astype(np.float32), y=y)

    return {"train": make(n_train), "val": make(n_val)}


# --------------------------------------------------------------------------- sharding and batches


def shard_indices(rows: int, rank: int, world_size: int, seed: int, *, equal: bool = True) -> np.ndarray:
    """This rank's disjoint share of a seeded permutation of ``rows`` (equal sizes when ``equal``)."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} outside world of {world_size}")
    perm = np.random.default_rng(seed).permutation(rows)
    if equal:
        per = rows // world_size
        if per == 0:
            raise DatasetError(f"{rows} rows cannot be split over {world_size} workers")
        return np.sort(perm[rank * per : (rank + 1) * per])
    return np.sort(np.array_split(perm, world_size)[rank])


class LinearBatches:
    """Mini-batches of one rank's shard, reshuffled each epoch with a seed shared by all ranks."""

    def __init__(
        self, split: LinearSplit, indices: np.ndarray, batch_size: int, *, seed: int, shuffle: bool = True
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        self.split = split
        self.indices = indices
        self.batch_size = batch_size
        self.seed = seed
        self.shuffle = shuffle

    def __len__(self) -> int:
        return -(-len(self.indices) // self.batch_size)

    def rows(self, epoch: int) -> Iterator[np.ndarray]:
        """Each batch's row numbers, in file order within the batch (memmap locality)."""
        order = self.indices
        if self.shuffle:
            order = np.random.default_rng((self.seed, epoch)).permutation(order)
        for start in range(0, len(order), self.batch_size):
            yield np.sort(order[start : start + self.batch_size])

    def epoch(self, epoch: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Yield ``(x, y)`` numpy batches."""
        for idx in self.rows(epoch):
            yield np.asarray(self.split.x[idx], dtype=np.float32), np.asarray(self.split.y[idx])


class ResidentBatches:
    """``LinearBatches``' batches from a copy of the shard in device memory (a GPU's: 400k x 2000
    floats is 3.2 GB, which an 80 GB GPU holds many times over): per epoch one copy of the batch
    order to the device, per batch two gathers there, no host copy of features at all."""

    def __init__(self, batches: LinearBatches, device: torch.device, chunk_rows: int = 8192) -> None:
        self.batches = batches
        self.device = device
        self.shard = np.sort(batches.indices)
        split = batches.split
        self.x = torch.empty((len(self.shard), split.features), dtype=torch.float32, device=device)
        self.y = torch.empty(len(self.shard), dtype=torch.uint8, device=device)
        for start in range(0, len(self.shard), chunk_rows):
            rows = self.shard[start : start + chunk_rows]
            end = start + len(rows)
            copy_into(self.x[start:end], torch.from_numpy(np.asarray(split.x[rows], np.float32)))
            copy_into(self.y[start:end], torch.from_numpy(np.asarray(split.y[rows])))

    def __len__(self) -> int:
        return len(self.batches)

    @staticmethod
    def fits(batches: LinearBatches, free_bytes: int) -> bool:
        """Whether the shard takes at most half of ``free_bytes`` of device memory."""
        need = len(batches.indices) * (batches.split.features * 4 + 1)
        return need <= free_bytes // 2

    def epoch(self, epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Yield ``(x, y)`` device batches, the same rows in the same order as ``LinearBatches``."""
        parts = list(self.batches.rows(epoch))
        positions = np.searchsorted(self.shard, np.concatenate(parts)) if parts else np.zeros(0, np.int64)
        order = to_device(torch.from_numpy(positions.astype(np.int64)), self.device)
        start = 0
        for part in parts:
            idx = order[start : start + len(part)]
            start += len(part)
            yield self.x.index_select(0, idx), self.y.index_select(0, idx)
