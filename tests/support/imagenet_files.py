"""Small ImageNets in the real formats, written by the tests: JPEG files (Pillow) in the standard
layout, and the three official archives (a tar of per-class tars, a flat validation tar, a devkit
with its ground truth and a MATLAB ``meta.mat`` written by scipy)."""

from __future__ import annotations

import hashlib
import io
import tarfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from mlbench_worker.data.fetch import RemoteFile
from mlbench_worker.data.imagenet import DEVKIT_META, DEVKIT_TRUTH, Archives

WNIDS = ("n01440764", "n01443537", "n01484850", "n01491361")


PALETTE = ((220, 40, 40), (40, 200, 40), (40, 40, 220), (220, 200, 40), (200, 40, 200), (40, 200, 200))


def jpeg(wnid: str, k: int, size: tuple[int, int] = (48, 40)) -> bytes:
    """A JPEG whose colour says its class (so a model can learn it), with noise of its own."""
    from PIL import Image

    colour = np.array(PALETTE[sum(map(ord, wnid)) % len(PALETTE)], dtype=np.float64)
    noise = np.random.default_rng([sum(map(ord, wnid)), k]).normal(0, 12, (size[1], size[0], 3))
    out = io.BytesIO()
    Image.fromarray(np.clip(colour + noise, 0, 255).astype(np.uint8)).save(out, format="JPEG", quality=90)
    return out.getvalue()


def write_layout(
    root: Path, *, train: int = 6, val: int = 2, wnids: Sequence[str] = WNIDS
) -> dict[str, list[tuple[str, int]]]:
    """``root/train/<wnid>/<wnid>_<k>.JPEG`` and ``root/val/<wnid>/...``; returns each split's
    (relative path, label) in index order."""
    out: dict[str, list[tuple[str, int]]] = {"train": [], "val": []}
    for split, count in (("train", train), ("val", val)):
        for label, wnid in enumerate(sorted(wnids)):
            directory = root / split / wnid
            directory.mkdir(parents=True, exist_ok=True)
            for k in range(count):
                name = f"{wnid}_{k + (1000 if split == 'val' else 0)}.JPEG"
                (directory / name).write_bytes(jpeg(wnid, k + (1000 if split == "val" else 0)))
                out[split].append((f"{split}/{wnid}/{name}", label))
        out[split].sort()
    return out


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def meta_mat(wnids: Sequence[str]) -> tuple[bytes, dict[str, int]]:
    """A devkit ``meta.mat``: the leaf synsets get ILSVRC2012 ids in an order other than the WordNet
    ids' (as the real one), plus a parent synset that is not a class. Returns it and wnid -> id."""
    import scipy.io

    ids = {wnid: i + 1 for i, wnid in enumerate(reversed(sorted(wnids)))}
    fields = ("ILSVRC2012_ID", "WNID", "words", "gloss", "num_children")
    rows = [(ids[w], w, f"class {w}", "a test class", 0) for w in wnids]
    rows.append((len(wnids) + 1, "n00001740", "entity", "a parent synset", len(wnids)))
    synsets = np.empty(len(rows), dtype=[(f, object) for f in fields])
    for i, row in enumerate(rows):
        synsets[i] = row
    out = io.BytesIO()
    scipy.io.savemat(out, {"synsets": synsets})
    return out.getvalue(), ids


def write_archives(root: Path, *, train: int = 6, val: int = 2, wnids: Sequence[str] = WNIDS) -> Archives:
    """The three archives in the official formats; returns them with their own MD5s (as published
    checksums are for the real ones). Validation image i is of class ``i % len(wnids)``."""
    root.mkdir(parents=True, exist_ok=True)
    with tarfile.open(root / "ILSVRC2012_img_train.tar", "w") as outer:
        for wnid in sorted(wnids):
            inner = io.BytesIO()
            with tarfile.open(fileobj=inner, mode="w") as tar:
                for k in range(train):
                    _add(tar, f"{wnid}_{k}.JPEG", jpeg(wnid, k))
            _add(outer, f"{wnid}.tar", inner.getvalue())
    ordered = sorted(wnids)
    mat, ids = meta_mat(wnids)
    truth = []
    with tarfile.open(root / "ILSVRC2012_img_val.tar", "w") as tar:
        for i in range(val * len(wnids)):
            wnid = ordered[i % len(ordered)]
            _add(tar, f"ILSVRC2012_val_{i + 1:08d}.JPEG", jpeg(wnid, 1000 + i))
            truth.append(str(ids[wnid]))
    with tarfile.open(root / "ILSVRC2012_devkit_t12.tar.gz", "w:gz") as tar:
        _add(tar, DEVKIT_TRUTH, ("\n".join(truth) + "\n").encode())
        _add(tar, DEVKIT_META, mat)
    files = [
        RemoteFile(
            f"https://example.invalid/{name}",
            name,
            {"md5": hashlib.md5((root / name).read_bytes()).hexdigest()},
        )
        for name in ("ILSVRC2012_img_train.tar", "ILSVRC2012_img_val.tar", "ILSVRC2012_devkit_t12.tar.gz")
    ]
    return Archives(*files)
