"""WikiText-2 (Merity et al. 2016) for task 3a: download, plain-Python tokenisation, token-id arrays.

``prepare(directory)`` downloads ``wikitext-2-v1.zip`` (verified against its published MD5 and
SHA-1), reads ``wiki.{train,valid,test}.tokens`` straight from the archive and tokenises them
exactly like the AWD-LSTM reference: split each line on whitespace and append ``<eos>``
(2,088,628 training tokens). The vocabulary is built from the training split in order of first
appearance (33,278 words); words outside it become ``<unk>``. Token ids are written as raw
little-endian int32 files (``<split>.ids.i32``) that ranks memory-map, with ``vocab.txt`` and
``meta.json`` (written last). ``synthetic`` generates a learnable toy language (a sparse
first-order Markov chain over a small vocabulary) for smoke runs.
"""

from __future__ import annotations

import io
import json
import os
import sys
import zipfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlbench_worker.data.fetch import DatasetError, RemoteFile, fetch, stderr_progress
from mlbench_worker.data.options import WikiText2Synthetic

FORMAT = "mlbench-wikitext2/1"
EOS = "<eos>"
UNK = "<unk>"
REMOTE = RemoteFile(
    url="https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-2-v1.zip",
    filename="wikitext-2-v1.zip",
    # MD5 as published with torchtext's WikiText2, SHA-1 as published with MXNet Gluon's.
    checksums={"md5": "542ccefacc6c27f945fb54453812b3cd", "sha1": "3c914d17d80b1459be871a5039ac23e752a53cbe"},
)
MEMBERS = {
    "train": "wikitext-2/wiki.train.tokens",
    "valid": "wikitext-2/wiki.valid.tokens",
    "test": "wikitext-2/wiki.test.tokens",
}
OFFICIAL_TOKENS = {"train": 2_088_628, "valid": 217_646, "test": 245_569}
OFFICIAL_VOCAB = 33_278


@dataclass(frozen=True)
class Corpus:
    """Token ids per split (1-D int arrays, possibly read-only memmaps) and the vocabulary."""

    splits: Mapping[str, np.ndarray]
    vocab: tuple[str, ...]

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)


# --------------------------------------------------------------------------- tokenisation


def tokenize_lines(lines: Iterable[str]) -> Iterator[str]:
    """AWD-LSTM's tokenisation: whitespace split of every line, then ``<eos>`` (also for blank lines)."""
    for line in lines:
        yield from line.split()
        yield EOS


def build_vocab(tokens: Iterable[str]) -> dict[str, int]:
    """Word -> id in order of first appearance; ``<unk>`` is appended if the text never uses it."""
    vocab: dict[str, int] = {}
    for tok in tokens:
        if tok not in vocab:
            vocab[tok] = len(vocab)
    vocab.setdefault(UNK, len(vocab))
    return vocab


def encode(tokens: Iterable[str], vocab: Mapping[str, int]) -> np.ndarray:
    """Token ids as int32; unknown words map to ``<unk>``."""
    unk = vocab[UNK]
    return np.fromiter((vocab.get(t, unk) for t in tokens), dtype=np.int32)


def _read_member(archive: zipfile.ZipFile, member: str) -> list[str]:
    try:
        raw = archive.read(member)
    except KeyError:
        raise DatasetError(f"{archive.filename}: no member {member} (is this wikitext-2-v1.zip?)") from None
    return io.TextIOWrapper(io.BytesIO(raw), encoding="utf-8", newline=None).readlines()


def prepare_archive(archive_path: Path, out_dir: Path, *, quiet: bool = True) -> Path:
    """Tokenise a (verified) WikiText-2 zip into ``out_dir``; return ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "meta.json").unlink(missing_ok=True)
    try:
        with zipfile.ZipFile(archive_path) as archive:
            lines = {split: _read_member(archive, member) for split, member in MEMBERS.items()}
    except (OSError, zipfile.BadZipFile) as exc:
        raise DatasetError(f"cannot read {archive_path}: {exc}") from None
    vocab = build_vocab(tokenize_lines(lines["train"]))
    counts: dict[str, int] = {}
    for split, text in lines.items():
        ids = encode(tokenize_lines(text), vocab)
        tmp = out_dir / f".{split}.ids.i32.part"
        ids.astype("<i4", copy=False).tofile(tmp)
        os.replace(tmp, out_dir / f"{split}.ids.i32")
        counts[split] = int(ids.size)
        if not quiet and counts[split] != OFFICIAL_TOKENS[split]:
            print(
                f"wikitext2: note: {ids.size} {split} tokens (official: {OFFICIAL_TOKENS[split]})",
                file=sys.stderr,
            )
    (out_dir / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    meta = {
        "format": FORMAT,
        "vocab_size": len(vocab),
        "splits": {s: {"tokens": n} for s, n in counts.items()},
    }
    tmp_meta = out_dir / ".meta.json.tmp"
    tmp_meta.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp_meta, out_dir / "meta.json")
    return out_dir


def is_prepared(directory: Path) -> bool:
    return (Path(directory) / "meta.json").exists()


def prepare(directory: str | os.PathLike[str], *, force: bool = False, quiet: bool = False) -> Path:
    """Download (unless present and verified) and tokenise WikiText-2 into ``directory``; return it."""
    out = Path(directory).expanduser()
    if is_prepared(out) and not force:
        return out
    progress = None if quiet else stderr_progress(f"wikitext2 {REMOTE.filename}")
    archive = fetch(REMOTE, out, progress=progress)
    if not quiet:
        print(f"wikitext2: tokenising {archive.name}", file=sys.stderr, flush=True)
    return prepare_archive(archive, out, quiet=quiet)


def open_prepared(directory: str | os.PathLike[str]) -> Corpus:
    """Memory-map a prepared directory (read-only)."""
    root = Path(directory).expanduser()
    try:
        meta = json.loads((root / "meta.json").read_text(encoding="utf-8"))
        vocab = tuple((root / "vocab.txt").read_text(encoding="utf-8").split("\n")[: int(meta["vocab_size"])])
    except FileNotFoundError:
        raise DatasetError(
            f"{root} holds no prepared WikiText-2 data; run: mlbench data prepare wikitext2 --dir {root}"
        ) from None
    except (OSError, ValueError, KeyError) as exc:
        raise DatasetError(f"{root}: unreadable prepared WikiText-2 data ({exc}); prepare again") from None
    if meta.get("format") != FORMAT:
        raise DatasetError(f"{root}: unknown format {meta.get('format')!r}, expected {FORMAT!r}")
    splits: dict[str, np.ndarray] = {}
    for split, info in meta["splits"].items():
        path = root / f"{split}.ids.i32"
        n = int(info["tokens"])
        if not path.exists() or path.stat().st_size != 4 * n:
            raise DatasetError(f"{path} is missing or truncated; prepare again")
        splits[split] = np.memmap(path, dtype="<i4", mode="r", shape=(n,))
    return Corpus(splits=splits, vocab=vocab)


# --------------------------------------------------------------------------- synthetic source


def synthetic(options: WikiText2Synthetic, seed: int) -> Corpus:
    """A toy language a small LSTM learns in a few epochs: a sparse Markov chain over words.

    Every word has ``branching`` possible successors (Dirichlet-weighted), one of which may be
    ``<eos>``; the chain's entropy bounds the reachable perplexity near ``branching`` while a
    unigram model stays near the vocabulary size (``WikiText2Synthetic`` declares the options).
    """
    n_train, n_val = options.train_tokens, options.val_tokens
    size, branching = options.vocab_size, options.branching
    if n_train < 2 or n_val < 2 or size < 3 or not 1 <= branching < size:
        raise DatasetError(
            "synthetic wikitext2 needs train/val tokens >= 2, vocab_size >= 3, 1 <= branching < vocab_size"
        )
    rng = np.random.default_rng(seed)
    successors = np.stack([rng.choice(np.arange(size), size=branching, replace=False) for _ in range(size)])
    probs = rng.dirichlet(np.ones(branching), size=size)
    cumulative = np.cumsum(probs, axis=1)

    def walk(n: int) -> np.ndarray:
        out = np.empty(n, dtype=np.int32)
        state = int(rng.integers(size))
        draws = rng.random(n)
        for i in range(n):
            j = min(int(np.searchsorted(cumulative[state], draws[i])), branching - 1)
            state = int(successors[state, j])
            out[i] = state
        return out

    vocab = (EOS, UNK, *(f"w{i:04d}" for i in range(2, size)))
    return Corpus(splits={"train": walk(n_train), "valid": walk(n_val), "test": walk(n_val)}, vocab=vocab)


# --------------------------------------------------------------------------- batching


def rank_slice(ids: np.ndarray, rank: int, world_size: int) -> np.ndarray:
    """This rank's contiguous, equally sized share of a token stream."""
    per = len(ids) // world_size
    if per < 2:
        raise DatasetError(f"{len(ids)} tokens cannot be split over {world_size} workers")
    return ids[rank * per : (rank + 1) * per]


def batchify(ids: np.ndarray, batch_size: int) -> np.ndarray:
    """AWD-LSTM's layout: ``batch_size`` contiguous streams as columns, shape (steps, batch_size)."""
    steps = len(ids) // batch_size
    if steps < 2:
        raise DatasetError(f"{len(ids)} tokens are too few for batch size {batch_size}")
    return np.ascontiguousarray(
        np.asarray(ids[: steps * batch_size], dtype=np.int64).reshape(batch_size, steps).T
    )


def bptt_windows(
    num_steps: int, bptt: int, rng: np.random.Generator | None, *, min_len: int = 5, max_extra: int = 20
) -> Iterator[tuple[int, int]]:
    """``(start, seq_len)`` windows over ``num_steps`` rows: AWD-LSTM's variable-length BPTT.

    With an ``rng``, each window's length is ``max(min_len, int(N(bptt / (1 + X), 5)))`` with
    X ~ Bernoulli(0.05), capped at ``bptt + max_extra``; without, every window is ``bptt`` long
    (evaluation). All ranks pass identically seeded generators so they take the same number of
    steps.
    """
    i = 0
    while i < num_steps - 1:
        if rng is None:
            seq_len = bptt
        else:
            base = bptt if rng.random() >= 0.05 else bptt / 2.0
            seq_len = max(min_len, int(rng.normal(base, 5.0)))
            seq_len = min(seq_len, bptt + max_extra)
        seq_len = min(seq_len, num_steps - 1 - i)
        yield i, seq_len
        i += seq_len
