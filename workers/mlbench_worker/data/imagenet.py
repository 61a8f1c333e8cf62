"""ImageNet (ILSVRC 2012, Russakovsky et al. 2015) for task 1b: an index of every JPEG, from the
official archives or the standard directory layout, that ranks read their shards through.

Two sources, one index. The official archives (``ILSVRC2012_img_train.tar``, a tar of one tar per
class; ``ILSVRC2012_img_val.tar``, 50,000 flat JPEGs; ``ILSVRC2012_devkit_t12.tar.gz``, whose
ground truth and ``meta.mat`` label the validation images) are checked against their published
MD5s and read in place, without extracting 140 GB: the index records each image's byte range
inside its tar. The standard layout (``train/<wnid>/*.JPEG``, ``val/<wnid>/*.JPEG``; a flat
``val/`` labelled by the devkit is accepted too) is indexed file by file. Classes are the sorted
WordNet ids (torchvision's ``ImageFolder`` order). ``prepare`` writes the index (``mlbench-index/``:
``meta.json``, per split a record array of (file, offset, size, label), the files it points into
and each image's name for messages) atomically, next to the data or, where that directory is
read-only, under the cache (``$MLBENCH_DATA_DIR/imagenet-indexes/``). ImageNet cannot be
downloaded without an account, so ``download`` finds archives put there by hand.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import socket
import sys
import tarfile
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from mlbench_worker.data.fetch import DatasetError, RemoteFile, default_data_dir, file_digests


@dataclass(frozen=True)
class Archives:
    """The three official files and their published checksums (tests pass tiny stand-ins)."""

    train: RemoteFile
    val: RemoteFile
    devkit: RemoteFile

    def files(self) -> tuple[RemoteFile, RemoteFile, RemoteFile]:
        return self.train, self.val, self.devkit


def _official(name: str, md5: str) -> RemoteFile:
    return RemoteFile(f"https://image-net.org/data/ILSVRC/2012/{name}", name, {"md5": md5})


OFFICIAL = Archives(  # the MD5s image-net.org publishes (and torchvision checks)
    _official("ILSVRC2012_img_train.tar", "1d675b47d978889d74fa0da5fadfb00e"),
    _official("ILSVRC2012_img_val.tar", "29b22e2961454d5413ddabcf34fc5622"),
    _official("ILSVRC2012_devkit_t12.tar.gz", "fa75699e90414af021442c21a62c3abf"),
)
OFFICIAL_IMAGES = {"train": 1_281_167, "val": 50_000}
OFFICIAL_CLASSES = 1000
INDEX_DIR = "mlbench-index"
FORMAT = "mlbench-imagenet-index/1"
IMAGE_SUFFIXES = (".jpeg", ".jpg", ".png")
DEVKIT_TRUTH = "ILSVRC2012_devkit_t12/data/ILSVRC2012_validation_ground_truth.txt"
DEVKIT_META = "ILSVRC2012_devkit_t12/data/meta.mat"
_VAL_NUMBER = re.compile(r"ILSVRC2012_val_(\d+)\.", re.IGNORECASE)
Source = Literal["archives", "layout"]
SPLITS = ("train", "val")
DOWNLOAD_HINT = (
    "ImageNet cannot be downloaded without an image-net.org account: download ILSVRC2012_img_train.tar, "
    "ILSVRC2012_img_val.tar and ILSVRC2012_devkit_t12.tar.gz from https://image-net.org/download.php "
    "into {root} (or extract them as train/<wnid>/*.JPEG and val/<wnid>/*.JPEG) and run "
    "'mlbench data prepare imagenet --dir {root}'"
)


# -------------------------------------------------------------------------------------- records


@dataclass
class SplitEntries:
    """One split while it is being indexed: the files read and one row per image."""

    files: list[str] = field(default_factory=list)
    rows: list[tuple[int, int, int, int]] = field(default_factory=list)  # (file, offset, size, label)
    names: list[str] = field(default_factory=list)

    def add_file(self, path: str) -> int:
        self.files.append(path)
        return len(self.files) - 1


@dataclass(frozen=True)
class Split:
    """One indexed split: ``records[i]`` is image i's (file, offset, size, label); in ``archives``
    a byte range of a tar, else a whole file."""

    name: str
    root: Path
    files: tuple[str, ...]
    records: np.ndarray
    names_path: Path
    archives: bool = False

    def __len__(self) -> int:
        return int(self.records.shape[0])

    @property
    def labels(self) -> np.ndarray:
        return self.records[:, 3]

    def path_of(self, i: int) -> Path:
        return self.root / self.files[int(self.records[i, 0])]

    def name_of(self, i: int) -> str:
        """Image ``i``'s name (its path in the layout or the archive), read only when a message needs it."""
        try:
            with self.names_path.open(encoding="utf-8") as fh:
                for number, line in enumerate(fh):
                    if number == i:
                        return line.rstrip("\n")
        except OSError:
            pass
        return f"{self.name} image #{i}"


@dataclass(frozen=True)
class ImageNetIndex:
    """A prepared ImageNet: its classes (WordNet ids) and both splits."""

    root: Path
    source: Source
    classes: tuple[str, ...]
    train: Split
    val: Split

    def split(self, name: str) -> Split:
        return self.train if name == "train" else self.val

    @property
    def official(self) -> bool:
        """Whether it holds the official image and class counts."""
        return len(self.classes) == OFFICIAL_CLASSES and all(
            len(self.split(s)) == OFFICIAL_IMAGES[s] for s in SPLITS
        )


class Reader:
    """Reads images' bytes by index, keeping archive files open (a loader process owns one)."""

    def __init__(self, split: Split) -> None:
        self.split = split
        self.keep_open = split.archives  # a few large files, read at offsets
        self._open: dict[int, int] = {}

    def read(self, i: int) -> bytes:
        """Image ``i``'s encoded bytes: its byte range in an archive, or its whole file in the
        layout. A missing, unreadable or short file raises ``DatasetError`` naming the image."""
        file_index, offset, size, _ = (int(v) for v in self.split.records[i])
        path = self.split.root / self.split.files[file_index]
        try:
            if not self.keep_open:
                return path.read_bytes()
            fd = self._open.get(file_index)
            if fd is None:
                fd = self._open[file_index] = os.open(path, os.O_RDONLY)
            data = os.pread(fd, size, offset)
        except FileNotFoundError:
            raise DatasetError(
                f"{self.split.name_of(i)}: missing ({path}); the index lists it: restore the file or run "
                f"'mlbench data prepare imagenet --dir {self.split.root} --force'"
            ) from None
        except OSError as exc:
            raise DatasetError(
                f"{self.split.name_of(i)}: cannot read {path}: {exc.strerror or exc}"
            ) from None
        if len(data) != size:
            raise DatasetError(
                f"{self.split.name_of(i)}: {path} is truncated "
                f"({len(data)} of {size} bytes at offset {offset})"
            )
        return data

    def close(self) -> None:
        for fd in self._open.values():
            os.close(fd)
        self._open.clear()


# ------------------------------------------------------------------------------------- scanning


def _is_image(name: str) -> bool:
    return name.lower().endswith(IMAGE_SUFFIXES)


def _class_dirs(directory: Path) -> list[str]:
    return sorted(e.name for e in os.scandir(directory) if e.is_dir() and not e.name.startswith("."))


def has_layout(root: Path) -> bool:
    """Whether ``root`` holds ``train/<wnid>/`` directories and a ``val/`` directory."""
    train = root / "train"
    return train.is_dir() and (root / "val").is_dir() and bool(_class_dirs(train))


def scan_layout(root: Path, devkit: RemoteFile | None = None) -> tuple[list[str], dict[str, SplitEntries]]:
    """The classes and both splits of a directory in the standard layout; a flat ``val/`` is
    labelled from the devkit archive beside it."""
    classes = _class_dirs(root / "train")
    label = {wnid: i for i, wnid in enumerate(classes)}
    splits: dict[str, SplitEntries] = {}
    for split in SPLITS:
        entries = SplitEntries()
        directory = root / split
        sub = _class_dirs(directory)
        unknown = [d for d in sub if d not in label]
        if unknown:
            raise DatasetError(
                f"{directory}/{unknown[0]}: a class that train/ does not have ({len(unknown)} such); "
                "train/ and val/ must hold the same WordNet ids"
            )
        for wnid in sub:
            for entry in sorted(os.scandir(directory / wnid), key=lambda e: e.name):
                if entry.is_file() and _is_image(entry.name):
                    rel = f"{split}/{wnid}/{entry.name}"
                    entries.rows.append((entries.add_file(rel), 0, entry.stat().st_size, label[wnid]))
                    entries.names.append(rel)
        if split == "val" and not sub:
            _flat_val(root, directory, classes, entries, devkit)
        if not entries.rows:
            raise DatasetError(
                f"{directory} holds no images (.JPEG, .jpg, .png): not an ImageNet {split} split"
            )
        splits[split] = entries
    return classes, splits


def _flat_val(
    root: Path, directory: Path, classes: list[str], entries: SplitEntries, devkit: RemoteFile | None
) -> None:
    """``val/ILSVRC2012_val_*.JPEG`` as extracted from the archive, labelled by the devkit."""
    devkit_path = root / (devkit or OFFICIAL.devkit).filename
    if not devkit_path.is_file():
        raise DatasetError(
            f"{directory} has no class directories: label it with {devkit_path.name} beside it, or move "
            "its images into val/<wnid>/"
        )
    wnids = validation_wnids(devkit_path)
    label = {wnid: i for i, wnid in enumerate(classes)}
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        match = _VAL_NUMBER.search(entry.name)
        if entry.is_file() and match:
            wnid = wnids[int(match.group(1)) - 1]
            rel = f"val/{entry.name}"
            entries.rows.append((entries.add_file(rel), 0, entry.stat().st_size, label[wnid]))
            entries.names.append(rel)


def validation_wnids(devkit: Path) -> list[str]:
    """The WordNet id of each validation image (1-based image number - 1), from the devkit's
    ground truth (ILSVRC2012 ids) and ``meta.mat`` (id -> WordNet id of the 1,000 leaf synsets)."""
    try:
        with tarfile.open(devkit, "r:gz") as tar:
            truth = _member_bytes(tar, DEVKIT_TRUTH).decode("ascii").split()
            meta = _member_bytes(tar, DEVKIT_META)
    except (tarfile.TarError, OSError, EOFError, KeyError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{devkit}: not a readable devkit archive ({exc})") from None
    try:
        import scipy.io
    except ImportError:
        raise DatasetError(
            "reading the devkit's meta.mat needs scipy: pip install 'mlbench-tui[worker]'"
        ) from None
    try:
        synsets = scipy.io.loadmat(io.BytesIO(meta), squeeze_me=True)["synsets"]
        leaves = [s for s in synsets if int(s["num_children"]) == 0]
        wnid_of = {int(s["ILSVRC2012_ID"]): str(s["WNID"]) for s in leaves}
        return [wnid_of[int(t)] for t in truth]
    except (KeyError, ValueError, TypeError) as exc:
        raise DatasetError(
            f"{devkit}: {DEVKIT_META} or the ground truth is not as published ({exc})"
        ) from None


def verify_archive(remote: RemoteFile, path: Path) -> None:
    """Check ``path`` against ``remote``'s published checksums (read once; nothing is written, so
    a read-only dataset directory is fine)."""
    try:
        digests = file_digests(path, set(remote.checksums))
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read it to verify its checksum ({exc.strerror or exc})") from None
    for algorithm, expected in remote.checksums.items():
        if digests[algorithm].lower() != expected.lower():
            raise DatasetError(
                f"{path}: {algorithm} {digests[algorithm]} does not match the published {expected}: the "
                f"file is corrupt or not the official {remote.filename}; download it again ({remote.url})"
            )


def _member_bytes(tar: tarfile.TarFile, name: str) -> bytes:
    fh = tar.extractfile(tar.getmember(name))
    if fh is None:
        raise KeyError(f"{name} is not a file")
    return fh.read()


def scan_archives(
    root: Path, archives: Archives, *, quiet: bool = False
) -> tuple[list[str], dict[str, SplitEntries]]:
    """The classes and both splits of the official archives, read where they lie (after their
    checksums are verified)."""
    for remote in archives.files():
        if not quiet:
            print(
                f"imagenet: verifying {remote.filename} (MD5; minutes for the 138 GB train tar)",
                file=sys.stderr,
            )
        verify_archive(remote, root / remote.filename)
    train = SplitEntries()
    train_tar = archives.train.filename
    outer_index = train.add_file(train_tar)
    classes: list[str] = []
    try:
        with tarfile.open(root / train_tar, "r:") as outer:
            members = sorted((m for m in outer if m.isfile()), key=lambda m: m.name)
            for member in members:
                wnid = Path(member.name).name.split(".")[0]
                classes.append(wnid)
                class_index = len(classes) - 1
                inner_file = outer.extractfile(member)
                assert inner_file is not None
                with tarfile.open(fileobj=inner_file, mode="r:") as inner:
                    for image in sorted((m for m in inner if m.isfile()), key=lambda m: m.name):
                        if _is_image(image.name):
                            offset = member.offset_data + image.offset_data
                            train.rows.append((outer_index, offset, image.size, class_index))
                            train.names.append(f"{train_tar}:{wnid}/{image.name}")
    except (tarfile.TarError, EOFError) as exc:
        raise DatasetError(f"{root / train_tar}: not a tar of per-class tars ({exc})") from None
    if sorted(classes) != classes or not classes:
        raise DatasetError(f"{root / train_tar}: expected one <wnid>.tar per class, found {len(classes)}")
    label = {wnid: i for i, wnid in enumerate(classes)}
    wnids = validation_wnids(root / archives.devkit.filename)
    val = SplitEntries()
    val_tar = archives.val.filename
    val_index = val.add_file(val_tar)
    try:
        with tarfile.open(root / val_tar, "r:") as tar:
            for member in sorted((m for m in tar if m.isfile()), key=lambda m: m.name):
                match = _VAL_NUMBER.search(member.name)
                if not match:
                    continue
                number = int(match.group(1))
                if not 1 <= number <= len(wnids) or wnids[number - 1] not in label:
                    raise DatasetError(f"{root / val_tar}: {member.name} has no label in the devkit")
                val.rows.append((val_index, member.offset_data, member.size, label[wnids[number - 1]]))
                val.names.append(f"{val_tar}:{member.name}")
    except (tarfile.TarError, EOFError) as exc:
        raise DatasetError(f"{root / val_tar}: not a readable tar ({exc})") from None
    return classes, {"train": train, "val": val}


# ------------------------------------------------------------------------------- index on disk


def cache_index_dir(root: Path) -> Path:
    """Where the index of a read-only dataset directory goes: the cache, one per directory."""
    digest = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:16]
    return default_data_dir() / "imagenet-indexes" / digest


def index_dirs(root: Path) -> tuple[Path, Path]:
    """The index's places, in the order they are looked in: beside the data, then the cache."""
    return root / INDEX_DIR, cache_index_dir(root)


def write_index(
    root: Path,
    source: Source,
    classes: Sequence[str],
    splits: dict[str, SplitEntries],
    checked: Sequence[str],
) -> Path:
    """Write the index atomically (a temporary directory renamed into place): beside the data, or
    in the cache when that fails (a read-only or full dataset directory). Returns its directory."""
    meta: dict[str, Any] = {
        "format": FORMAT,
        "root": str(root.resolve()),
        "source": source,
        "classes": list(classes),
        "checksums_verified": list(checked),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "splits": {name: {"images": len(e.rows), "files": len(e.files)} for name, e in splits.items()},
    }
    failures: list[str] = []
    for target in index_dirs(root):
        try:
            _write_index_at(target, meta, splits)
            return target
        except OSError as exc:
            failures.append(f"{target.parent}: {exc.strerror or exc}")
    raise DatasetError(f"cannot write the index of {root}: " + "; ".join(failures))


STAGING = ".mlbench-index-"


def _write_index_at(target: Path, meta: dict[str, Any], splits: dict[str, SplitEntries]) -> None:
    """Write into a staging directory named for this host and process, then rename it into place;
    staging left by a writer that was killed (on this host) is removed first."""
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_staging(target.parent)
    prefix = f"{STAGING}{socket.gethostname()}-{os.getpid()}-"
    staging = Path(tempfile.mkdtemp(prefix=prefix, dir=target.parent))
    try:
        for name, entries in splits.items():
            np.save(staging / f"{name}.npy", np.asarray(entries.rows, dtype=np.int64).reshape(-1, 4))
            (staging / f"{name}.files").write_text("\n".join(entries.files) + "\n", encoding="utf-8")
            (staging / f"{name}.names").write_text("\n".join(entries.names) + "\n", encoding="utf-8")
        (staging / "meta.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        old = target.with_name(f".{target.name}.old")
        if target.is_dir():
            shutil.rmtree(old, ignore_errors=True)
            os.replace(target, old)
        try:
            os.replace(staging, target)
        except OSError:
            if not (target / "meta.json").is_file():
                raise
            # another writer (local rank 0 of another node, on a shared directory) finished first
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _remove_stale_staging(parent: Path) -> None:
    host = f"{STAGING}{socket.gethostname()}-"
    for entry in parent.glob(f"{host}*"):
        pid = entry.name[len(host) :].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(entry, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def find_index(root: Path) -> Path | None:
    """The index directory of ``root``, or None when it has not been prepared."""
    return next((d for d in index_dirs(root) if (d / "meta.json").is_file()), None)


def load_index(root: Path) -> ImageNetIndex:
    """The prepared index of ``root``; ``DatasetError`` says how to prepare one."""
    directory = find_index(root)
    if directory is None:
        raise DatasetError(f"{root} has no ImageNet index: run 'mlbench data prepare imagenet --dir {root}'")
    try:
        meta = json.loads((directory / "meta.json").read_text(encoding="utf-8"))
        if meta.get("format") != FORMAT:
            raise DatasetError(
                f"{directory} is an index of another format ({meta.get('format')!r}): run "
                f"'mlbench data prepare imagenet --dir {root} --force'"
            )
        splits = {}
        for name in SPLITS:
            records = np.load(directory / f"{name}.npy", mmap_mode="r")
            files = tuple((directory / f"{name}.files").read_text(encoding="utf-8").splitlines())
            if records.ndim != 2 or records.shape[1] != 4 or len(records) != meta["splits"][name]["images"]:
                raise DatasetError(f"{directory / name}.npy does not match {directory / 'meta.json'}")
            names = directory / f"{name}.names"
            splits[name] = Split(name, root, files, records, names, archives=meta["source"] == "archives")
        return ImageNetIndex(root, meta["source"], tuple(meta["classes"]), splits["train"], splits["val"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DatasetError(
            f"the index in {directory} is unreadable ({exc}): "
            f"run 'mlbench data prepare imagenet --dir {root} --force'"
        ) from None


def prepare(root: Path, *, force: bool = False, archives: Archives = OFFICIAL, quiet: bool = False) -> Path:
    """Index ImageNet in ``root``: the official archives there (checksums verified), else the
    standard layout. Returns ``root`` (the directory a spec gives as ``data.path``)."""
    root = Path(root).expanduser()
    if not force and find_index(root) is not None:
        return root
    present = [r for r in archives.files() if (root / r.filename).is_file()]
    if len(present) == len(archives.files()):
        classes, splits = scan_archives(root, archives, quiet=quiet)
        source: Source = "archives"
        checked = [r.filename for r in present]
    elif has_layout(root):
        classes, splits = scan_layout(root, archives.devkit)
        source, checked = "layout", []
    elif present:
        missing = ", ".join(r.filename for r in archives.files() if r not in present)
        raise DatasetError(
            f"{root} has {present[0].filename} but not {missing}: all three archives are needed"
        )
    else:
        raise DatasetError(DOWNLOAD_HINT.format(root=root))
    where = write_index(root, source, classes, splits, checked)
    if not quiet:
        counts = ", ".join(f"{len(splits[s].rows):,} {s}" for s in SPLITS)
        print(
            f"imagenet: indexed {counts} images of {len(classes)} classes ({source}) in {where}",
            file=sys.stderr,
        )
        for split in SPLITS:
            if len(classes) == OFFICIAL_CLASSES and len(splits[split].rows) != OFFICIAL_IMAGES[split]:
                print(
                    f"imagenet: note: {len(splits[split].rows):,} {split} images (the official set has "
                    f"{OFFICIAL_IMAGES[split]:,}): runs on it are not in the closed division",
                    file=sys.stderr,
                )
    return root
