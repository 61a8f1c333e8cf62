"""WMT16 / WMT17 English-German for tasks 4a and 4b: download, clean, subword-encode, binarise.

``prepare_wmt16(directory)`` / ``prepare_wmt17(directory)`` download the official training
tarballs (Europarl v7, CommonCrawl, News Commentary v11 for WMT16 as in the MLPerf GNMT
reference, v12 for WMT17 as in the MLPerf Transformer reference) and newstest2014 (the
evaluation set both references report BLEU on), each verified against published checksums
(SHA-1 and size from GluonNLP's WMT checksum list, MD5 from sacrebleu's dataset table). Then:

1. *clean*: every training pair is whitespace-normalised; pairs with an empty side, a side over
   ``MAX_CHARS`` characters or a length ratio above 9 (Moses ``clean-corpus-n``) are dropped;
2. *vocabulary*: one shared sentencepiece BPE model (32k pieces by default) is learnt on a
   sample of both languages, so source and target share embeddings;
3. *binarise*: each split becomes ``<split>.{src,tgt}.i32`` (token ids, with EOS) and
   ``<split>.{src,tgt}.off.i64`` (offsets, ``n+1``), memory-mapped by the ranks. Training pairs
   are stored sorted into length buckets (``BUCKET_WIDTH`` tokens of the longer side), so a
   batch reads one contiguous run of similar lengths. Pairs longer than ``HARD_MAX_TOKENS`` are
   dropped at preparation; the task's own limits (``max_len_train`` / ``max_len_test`` for 4a,
   ``max_len`` for 4b) are applied when the worker loads the arrays (a length cut is a slice
   of the offsets, so one preparation serves every setting).
4. ``test.ref.de`` keeps the raw references for sacrebleu; ``meta.json`` is written last.

The ``synthetic`` source (``mlbench_worker.data.toy_translation``) builds the same ``Corpus``.
"""

from __future__ import annotations

import json
import os
import re
import tarfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from mlbench_worker.data.fetch import DatasetError, RemoteFile, fetch, stderr_progress

FORMAT = "mlbench-wmt/1"
PAD, UNK, BOS, EOS = 0, 1, 2, 3
SPECIALS = ("<pad>", "<unk>", "<s>", "</s>")
MAX_CHARS = 1000
MAX_RATIO = 9.0
HARD_MAX_TOKENS = 250
BUCKET_WIDTH = 5
VOCAB_SIZE = 32000
SPM_SAMPLE = 2_000_000

_EUROPARL = RemoteFile(
    url="http://www.statmt.org/europarl/v7/de-en.tgz",
    filename="europarl-v7-de-en.tgz",
    checksums={"sha1": "53bb5408d22977c89284bd755717e6bbb5b12bc5"},
    size=197_785_698,
)
_COMMONCRAWL = RemoteFile(
    url="http://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz",
    filename="training-parallel-commoncrawl.tgz",
    checksums={"sha1": "1c0ad85f0ebaf1d543acb009607205f5dae6627d"},
    size=918_311_367,
)
_NC_V11 = RemoteFile(
    url="http://data.statmt.org/wmt16/translation-task/training-parallel-nc-v11.tgz",
    filename="training-parallel-nc-v11.tgz",
    checksums={"sha1": "f51a1f03908e790d23d10001e92e09ce9555a790"},
    size=75_178_032,
)
_NC_V12 = RemoteFile(
    url="http://data.statmt.org/wmt17/translation-task/training-parallel-nc-v12.tgz",
    filename="training-parallel-nc-v12.tgz",
    checksums={"sha1": "d98afc59e1d753485530b377ff65f1f891d3bced"},
    size=168_591_139,
)
_NEWSTEST2014 = RemoteFile(
    url="https://statmt.org/wmt14/test-full.tgz",
    filename="wmt14-test-full.tgz",
    checksums={"md5": "a8cd784e006feb32ac6f3d9ec7eb389a"},
)


@dataclass(frozen=True)
class ParallelSource:
    """One training corpus inside a tarball: the member basenames of its English and German sides."""

    remote: RemoteFile
    en: str
    de: str


@dataclass(frozen=True)
class WmtRelease:
    """What one dataset name downloads: training corpora and the sgm test set."""

    name: str
    train: tuple[ParallelSource, ...]
    test: RemoteFile
    test_src: str = "newstest2014-deen-src.en.sgm"
    test_ref: str = "newstest2014-deen-ref.de.sgm"


_EP = ParallelSource(_EUROPARL, "europarl-v7.de-en.en", "europarl-v7.de-en.de")
_CC = ParallelSource(_COMMONCRAWL, "commoncrawl.de-en.en", "commoncrawl.de-en.de")
RELEASES: dict[str, WmtRelease] = {
    "wmt16": WmtRelease(
        "wmt16",
        (_EP, _CC, ParallelSource(_NC_V11, "news-commentary-v11.de-en.en", "news-commentary-v11.de-en.de")),
        _NEWSTEST2014,
    ),
    "wmt17": WmtRelease(
        "wmt17",
        (_EP, _CC, ParallelSource(_NC_V12, "news-commentary-v12.de-en.en", "news-commentary-v12.de-en.de")),
        _NEWSTEST2014,
    ),
}


# --------------------------------------------------------------------------- corpus in memory


class Detokenizer(Protocol):
    def __call__(self, ids: Sequence[int]) -> str: ...


@dataclass(frozen=True)
class Split:
    """Token ids of one split: flat arrays plus offsets (pair ``i`` is ``src[so[i]:so[i+1]]``)."""

    src: np.ndarray
    src_off: np.ndarray
    tgt: np.ndarray
    tgt_off: np.ndarray

    def __len__(self) -> int:
        return len(self.src_off) - 1

    @property
    def src_lens(self) -> np.ndarray:
        return np.diff(self.src_off)

    @property
    def tgt_lens(self) -> np.ndarray:
        return np.diff(self.tgt_off)

    def pair(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        return (
            self.src[self.src_off[i] : self.src_off[i + 1]],
            self.tgt[self.tgt_off[i] : self.tgt_off[i + 1]],
        )

    def select(self, keep: np.ndarray) -> SplitView:
        """The pairs at indices ``keep`` (no copy of the token arrays)."""
        return SplitView(self, np.asarray(keep, dtype=np.int64))


@dataclass(frozen=True)
class SplitView:
    """A subset of a ``Split`` by index (length filters, rank shares)."""

    base: Split
    index: np.ndarray

    def __len__(self) -> int:
        return len(self.index)

    @property
    def src_lens(self) -> np.ndarray:
        return self.base.src_lens[self.index]

    @property
    def tgt_lens(self) -> np.ndarray:
        return self.base.tgt_lens[self.index]

    def pair(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        return self.base.pair(int(self.index[i]))


@dataclass(frozen=True)
class Corpus:
    """A prepared (or synthetic) translation corpus: splits, vocabulary size and the detokeniser."""

    train: Split
    test: Split
    references: tuple[str, ...]  # raw test references, one per test pair
    vocab_size: int
    detokenize: Callable[[Sequence[int]], str]
    name: str = "synthetic"

    def length_filtered(self, split: str, max_len: int) -> SplitView:
        """Pairs whose both sides (with EOS) have at most ``max_len`` tokens."""
        data = self.train if split == "train" else self.test
        keep = np.flatnonzero((data.src_lens <= max_len) & (data.tgt_lens <= max_len))
        return data.select(keep)


# --------------------------------------------------------------------------- reading the formats

_SPACES = re.compile(r"\s+")
_SEG = re.compile(r"<seg[^>]*>(.*)</seg>")


def normalise(line: str) -> str:
    """Strip and collapse runs of whitespace (tabs, non-breaking spaces) into single spaces."""
    return _SPACES.sub(" ", line).strip()


def read_sgm(lines: Iterable[str]) -> list[str]:
    """The segments of a WMT ``.sgm`` file in order, as sacrebleu reads them."""
    out = []
    for line in lines:
        match = _SEG.search(line)
        if match:
            out.append(normalise(match.group(1)))
    return out


def _member(tar: tarfile.TarFile, basename: str) -> tarfile.TarInfo:
    for info in tar.getmembers():
        if info.isfile() and info.name.rsplit("/", 1)[-1] == basename:
            return info
    raise DatasetError(f"{_label(tar)} has no member {basename!r}; is it the right archive?")


def _label(tar: tarfile.TarFile) -> str:
    name = tar.name
    return name.decode() if isinstance(name, bytes) else str(name)


def _text_lines(tar: tarfile.TarFile, info: tarfile.TarInfo) -> Iterator[str]:
    fh = tar.extractfile(info)
    if fh is None:
        raise DatasetError(f"{_label(tar)}: cannot read {info.name}")
    with fh:
        for raw in fh:
            yield raw.decode("utf-8", errors="replace").rstrip("\n")


def read_parallel(archive: Path, en: str, de: str) -> Iterator[tuple[str, str]]:
    """Aligned (English, German) lines of a training tarball; fails if the sides differ in length."""
    with tarfile.open(archive, "r:*") as tar:
        src_info, tgt_info = _member(tar, en), _member(tar, de)
        with tarfile.open(archive, "r:*") as tar2:
            src_lines = _text_lines(tar, src_info)
            tgt_lines = _text_lines(tar2, tgt_info)
            count = 0
            for pair in _zip_strict(src_lines, tgt_lines, archive, en):
                count += 1
                yield pair
            if count == 0:
                raise DatasetError(f"{archive}: {en} is empty")


def _zip_strict(a: Iterator[str], b: Iterator[str], archive: Path, name: str) -> Iterator[tuple[str, str]]:
    sentinel = object()
    while True:
        x, y = next(a, sentinel), next(b, sentinel)
        if x is sentinel and y is sentinel:
            return
        if x is sentinel or y is sentinel:
            raise DatasetError(f"{archive}: the two sides of {name} have different line counts")
        yield x, y  # type: ignore[misc]


def read_test(archive: Path, src_name: str, ref_name: str) -> tuple[list[str], list[str]]:
    """Source segments and references of an sgm test set inside a tarball."""
    with tarfile.open(archive, "r:*") as tar:
        src = read_sgm(_text_lines(tar, _member(tar, src_name)))
        ref = read_sgm(_text_lines(tar, _member(tar, ref_name)))
    if len(src) != len(ref) or not src:
        raise DatasetError(f"{archive}: {src_name} and {ref_name} have {len(src)} and {len(ref)} segments")
    return src, ref


def clean_pair(en: str, de: str) -> tuple[str, str] | None:
    """The normalised pair, or None when it is empty, too long or too unbalanced to be a translation."""
    en, de = normalise(en), normalise(de)
    if not en or not de or len(en) > MAX_CHARS or len(de) > MAX_CHARS:
        return None
    a, b = len(en.split()), len(de.split())
    if max(a, b) > MAX_RATIO * min(a, b):
        return None
    return en, de


# --------------------------------------------------------------------------- binarising


def _spm() -> Any:
    try:
        import sentencepiece
    except ImportError:  # pragma: no cover - a worker extra
        raise DatasetError("preparing WMT needs sentencepiece: pip install 'mlbench-tui[worker]'") from None
    return sentencepiece


def train_vocabulary(lines: Iterable[str], model_prefix: Path, vocab_size: int) -> Path:
    """Learn a shared sentencepiece BPE model on ``lines``; returns the ``.model`` path."""
    spm = _spm()
    sample = model_prefix.with_suffix(".sample.txt")
    with sample.open("w", encoding="utf-8") as fh:
        for line in lines:
            fh.write(line + "\n")
    try:
        spm.SentencePieceTrainer.train(
            input=str(sample),
            model_prefix=str(model_prefix),
            vocab_size=vocab_size,
            model_type="bpe",
            character_coverage=1.0,
            pad_id=PAD,
            unk_id=UNK,
            bos_id=BOS,
            eos_id=EOS,
            input_sentence_size=SPM_SAMPLE,
            shuffle_input_sentence=True,
            hard_vocab_limit=False,
            minloglevel=2,
        )
    finally:
        sample.unlink(missing_ok=True)
    return model_prefix.with_suffix(".model")


def load_vocabulary(path: Path) -> Any:
    """A sentencepiece processor for a prepared directory's ``spm.model``."""
    return _spm().SentencePieceProcessor(model_file=str(path))


class _SplitWriter:
    """Appends encoded pairs to the four binary files of a split."""

    def __init__(self, directory: Path, split: str) -> None:
        self.paths = {k: directory / f"{split}.{k}" for k in ("src.i32", "tgt.i32")}
        self.files = {k: p.open("wb") for k, p in self.paths.items()}
        self.src_lens: list[int] = []
        self.tgt_lens: list[int] = []

    def add(self, src: Sequence[int], tgt: Sequence[int]) -> None:
        self.files["src.i32"].write(np.asarray(src, dtype="<i4").tobytes())
        self.files["tgt.i32"].write(np.asarray(tgt, dtype="<i4").tobytes())
        self.src_lens.append(len(src))
        self.tgt_lens.append(len(tgt))

    def close(self) -> tuple[np.ndarray, np.ndarray]:
        for fh in self.files.values():
            fh.close()
        return np.asarray(self.src_lens, dtype=np.int64), np.asarray(self.tgt_lens, dtype=np.int64)


def offsets(lens: np.ndarray) -> np.ndarray:
    """Offsets (n+1, starting at 0) of consecutive runs of the given lengths."""
    off = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=off[1:])
    return off


def _writeoffsets(path: Path, lens: np.ndarray) -> None:
    offsets(lens).astype("<i8").tofile(path)


def bucket_order(src_lens: np.ndarray, tgt_lens: np.ndarray, seed: int = 0) -> np.ndarray:
    """A permutation grouping pairs into length buckets (random order inside a bucket)."""
    rng = np.random.default_rng(seed)
    bucket = np.maximum(src_lens, tgt_lens) // BUCKET_WIDTH
    return np.lexsort((rng.random(len(bucket)), bucket))


def _reorder_split(
    directory: Path, split: str, order: np.ndarray, src_lens: np.ndarray, tgt_lens: np.ndarray
) -> None:
    """Rewrite a split's token files in ``order`` (through memory maps: bounded memory)."""
    for side, lens in (("src", src_lens), ("tgt", tgt_lens)):
        path = directory / f"{split}.{side}.i32"
        off = offsets(lens)
        old = np.memmap(path, dtype="<i4", mode="r") if off[-1] else np.zeros(0, dtype="<i4")
        new_lens = lens[order]
        new_off = offsets(new_lens)
        tmp = path.with_suffix(".i32.tmp")
        out = np.memmap(tmp, dtype="<i4", mode="w+", shape=(max(1, int(new_off[-1])),))
        for j, i in enumerate(order):
            out[new_off[j] : new_off[j + 1]] = old[off[i] : off[i + 1]]
        out.flush()
        del out, old
        os.replace(tmp, path)
        if new_off[-1] == 0:
            path.write_bytes(b"")
        _writeoffsets(directory / f"{split}.{side}.off.i64", new_lens)


def binarise(
    directory: Path,
    train_pairs: Callable[[], Iterable[tuple[str, str]]],
    test_src: Sequence[str],
    test_ref: Sequence[str],
    *,
    name: str,
    vocab_size: int = VOCAB_SIZE,
    max_tokens: int = HARD_MAX_TOKENS,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Clean, learn the vocabulary, encode and write the shards of a prepared directory.

    ``train_pairs`` is called twice (vocabulary sample, then encoding) so nothing needs the
    whole corpus in memory. Returns the ``meta.json`` document (written last).
    """
    say = progress or (lambda _msg: None)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "meta.json").unlink(missing_ok=True)

    counts = {"train_read": 0, "train_clean": 0, "train_kept": 0, "test": len(test_src)}

    def cleaned(count: bool = False) -> Iterator[tuple[str, str]]:
        for en, de in train_pairs():
            pair = clean_pair(en, de)
            if count:
                counts["train_read"] += 1
                counts["train_clean"] += pair is not None
            if pair is not None:
                yield pair

    def sample() -> Iterator[str]:
        """A uniform reservoir sample of the cleaned pairs (both sides), not just the first corpus."""
        rng = np.random.default_rng(0)
        size = SPM_SAMPLE // 2
        reservoir: list[tuple[str, str]] = []
        for n, pair in enumerate(cleaned()):
            if n < size:
                reservoir.append(pair)
            else:
                j = int(rng.integers(0, n + 1))
                if j < size:
                    reservoir[j] = pair
        for en, de in reservoir:
            yield en
            yield de

    say("learning the shared sentencepiece vocabulary")
    model = train_vocabulary(sample(), directory / "spm", vocab_size)
    sp = load_vocabulary(model)
    say("encoding the training corpus")
    writer = _SplitWriter(directory, "train")
    chunk: list[tuple[str, str]] = []

    def flush() -> None:
        src_ids = sp.encode([en for en, _ in chunk])
        tgt_ids = sp.encode([de for _, de in chunk])
        for s, t in zip(src_ids, tgt_ids, strict=True):
            if len(s) + 1 <= max_tokens and len(t) + 1 <= max_tokens:
                writer.add([*s, EOS], [*t, EOS])
                counts["train_kept"] += 1
        chunk.clear()

    for pair in cleaned(count=True):
        chunk.append(pair)
        if len(chunk) >= 10_000:
            flush()
    if chunk:
        flush()
    src_lens, tgt_lens = writer.close()
    if not len(src_lens):
        raise DatasetError(f"{name}: no training pair survived cleaning")
    say("sorting the training pairs into length buckets")
    _reorder_split(directory, "train", bucket_order(src_lens, tgt_lens), src_lens, tgt_lens)
    test_writer = _SplitWriter(directory, "test")
    for s, t in zip(sp.encode(list(test_src)), sp.encode(list(test_ref)), strict=True):
        test_writer.add([*s, EOS], [*t, EOS])
    t_src, t_tgt = test_writer.close()
    _writeoffsets(directory / "test.src.off.i64", t_src)
    _writeoffsets(directory / "test.tgt.off.i64", t_tgt)
    (directory / "test.ref.de").write_text("".join(r + "\n" for r in test_ref), encoding="utf-8")
    meta = {
        "format": FORMAT,
        "name": name,
        "vocab_size": int(sp.get_piece_size()),
        "train_pairs": len(src_lens),
        "test_pairs": len(test_src),
        "bucket_width": BUCKET_WIDTH,
        "max_tokens": max_tokens,
        "counts": counts,
    }
    tmp = directory / ".meta.json.tmp"
    tmp.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, directory / "meta.json")
    return meta


# --------------------------------------------------------------------------- prepare / open


def prepare(directory: Path | str, *, name: str = "wmt16", force: bool = False) -> Path:
    """Download (verified) and prepare ``wmt16`` or ``wmt17`` into ``directory``; returns it."""
    directory = Path(directory)
    try:
        release = RELEASES[name]
    except KeyError:
        raise DatasetError(f"unknown WMT release {name!r}; known: {', '.join(RELEASES)}") from None
    if (directory / "meta.json").is_file() and not force:
        open_prepared(directory)  # validates
        return directory
    downloads = directory / "downloads"
    archives = {
        src.remote.filename: fetch(src.remote, downloads, progress=stderr_progress(src.remote.filename))
        for src in release.train
    }
    test_archive = fetch(release.test, downloads, progress=stderr_progress(release.test.filename))
    test_src, test_ref = read_test(test_archive, release.test_src, release.test_ref)

    def pairs() -> Iterator[tuple[str, str]]:
        for src in release.train:
            yield from read_parallel(archives[src.remote.filename], src.en, src.de)

    binarise(directory, pairs, test_src, test_ref, name=name, progress=_stderr_say(name))
    return directory


def _stderr_say(name: str) -> Callable[[str], None]:
    import sys

    return lambda msg: print(f"{name}: {msg}", file=sys.stderr, flush=True)


def prepare_wmt16(directory: Path | str, *, force: bool = False) -> Path:
    """``mlbench data prepare wmt16``: task 4a's corpus (Europarl v7, CommonCrawl, NC v11; newstest2014)."""
    return prepare(directory, name="wmt16", force=force)


def prepare_wmt17(directory: Path | str, *, force: bool = False) -> Path:
    """``mlbench data prepare wmt17``: task 4b's corpus (Europarl v7, CommonCrawl, NC v12; newstest2014)."""
    return prepare(directory, name="wmt17", force=force)


def _map_split(directory: Path, split: str) -> Split:
    arrays = []
    for side in ("src", "tgt"):
        off = np.fromfile(directory / f"{split}.{side}.off.i64", dtype="<i8")
        path = directory / f"{split}.{side}.i32"
        size = path.stat().st_size // 4
        if len(off) == 0 or off[-1] != size:
            raise DatasetError(f"{path}: {size} tokens but the offsets say {off[-1] if len(off) else '?'}")
        tokens = np.memmap(path, dtype="<i4", mode="r", shape=(size,)) if size else np.zeros(0, np.int32)
        arrays += [tokens, off]
    return Split(arrays[0], arrays[1], arrays[2], arrays[3])


def open_prepared(directory: Path | str) -> Corpus:
    """Memory-map a directory written by ``prepare`` (or ``binarise``)."""
    directory = Path(directory)
    meta_path = directory / "meta.json"
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise DatasetError(
            f"{directory} is not a prepared WMT directory ({exc}); run: mlbench data prepare wmt16|wmt17"
        ) from None
    if meta.get("format") != FORMAT:
        raise DatasetError(f"{meta_path}: format {meta.get('format')!r}, expected {FORMAT!r}")
    try:
        train, test = _map_split(directory, "train"), _map_split(directory, "test")
        refs = tuple((directory / "test.ref.de").read_text(encoding="utf-8").splitlines())
    except OSError as exc:
        raise DatasetError(f"{directory}: {exc}; prepare it again") from None
    if len(refs) != len(test):
        raise DatasetError(f"{directory}: {len(refs)} references for {len(test)} test pairs")
    sp = load_vocabulary(directory / "spm.model")

    def detokenize(ids: Sequence[int]) -> str:
        return str(sp.decode([int(i) for i in ids if int(i) > EOS]))

    return Corpus(train, test, refs, int(meta["vocab_size"]), detokenize, str(meta.get("name", "wmt")))
