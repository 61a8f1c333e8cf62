"""WikiText-2: zip layout, AWD-LSTM tokenisation, vocabulary, checksums, batching, BPTT windows."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import numpy as np
import pytest
from mlbench_worker.data import wikitext2
from mlbench_worker.data.fetch import DatasetError, RemoteFile, fetch
from mlbench_worker.data.options import WikiText2Synthetic

TRAIN = " \n = Valkyria = \n\n the game is <unk> good \n the end \n"
VALID = " = Other = \n the unseen words \n"
TEST = " the game \n"


def _zip(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("wikitext-2/wiki.train.tokens", TRAIN)
        z.writestr("wikitext-2/wiki.valid.tokens", VALID)
        z.writestr("wikitext-2/wiki.test.tokens", TEST)
    return path


def test_prepare_archive_tokenises_like_awd_lstm(tmp_path: Path) -> None:
    out = wikitext2.prepare_archive(_zip(tmp_path / "w.zip"), tmp_path / "prepared")
    corpus = wikitext2.open_prepared(out)
    vocab = corpus.vocab
    assert vocab[:4] == ("<eos>", "=", "Valkyria", "the")
    words = [vocab[i] for i in corpus.splits["train"]]
    # Every line, blank ones included, ends with <eos>.
    assert words[:5] == ["<eos>", "=", "Valkyria", "=", "<eos>"]
    assert words.count("<eos>") == TRAIN.count("\n")
    assert isinstance(corpus.splits["valid"], np.memmap)
    valid = [vocab[i] for i in corpus.splits["valid"]]
    assert valid == ["=", "<unk>", "=", "<eos>", "the", "<unk>", "<unk>", "<eos>"]


def test_prepare_refuses_an_archive_with_the_wrong_checksum(tmp_path: Path) -> None:
    _zip(tmp_path / wikitext2.REMOTE.filename)
    with pytest.raises(DatasetError, match="does not match the published"):
        wikitext2.prepare(tmp_path, quiet=True)


def test_fetch_downloads_verifies_and_records(tmp_path: Path) -> None:
    src = _zip(tmp_path / "mirror.zip")
    md5 = hashlib.md5(src.read_bytes()).hexdigest()
    remote = RemoteFile(src.as_uri(), "wikitext-2-v1.zip", {"md5": md5})
    dest = fetch(remote, tmp_path / "cache")
    assert dest.read_bytes() == src.read_bytes()
    assert (tmp_path / "cache" / "sources.json").exists()
    bad = RemoteFile(src.as_uri(), "other.zip", {"md5": "0" * 32})
    with pytest.raises(DatasetError, match="does not match"):
        fetch(bad, tmp_path / "cache")
    assert not (tmp_path / "cache" / "other.zip").exists()
    missing = RemoteFile((tmp_path / "nope.zip").as_uri(), "nope.zip")
    with pytest.raises(DatasetError, match="cannot download"):
        fetch(missing, tmp_path / "cache")


def test_batchify_and_rank_slices() -> None:
    ids = np.arange(23, dtype=np.int32)
    left, right = wikitext2.rank_slice(ids, 0, 2), wikitext2.rank_slice(ids, 1, 2)
    assert len(left) == len(right) == 11 and left[-1] + 1 == right[0]
    grid = wikitext2.batchify(np.arange(10), 2)
    assert grid.shape == (5, 2)
    assert grid[:, 0].tolist() == [0, 1, 2, 3, 4] and grid[:, 1].tolist() == [5, 6, 7, 8, 9]


def test_variable_bptt_windows_are_seeded_and_cover_the_stream() -> None:
    # ~700 windows: each is half-length with probability 0.05, so a stream with none (the last
    # assert) has probability 0.95^700 ~ 1e-16 whatever the seed.
    def windows(seed: int) -> list[tuple[int, int]]:
        return list(wikitext2.bptt_windows(50_000, 70, np.random.default_rng(seed)))

    a = windows(1)
    assert a == windows(1)  # same seed on every rank -> same number of steps
    assert a != windows(2)
    assert a[0][0] == 0 and sum(n for _, n in a) == 49_999
    assert min(n for _, n in a[:-1]) >= 5 and max(n for _, n in a) <= 90
    assert any(n < 50 for _, n in a[:-1])  # the half-length windows (X ~ Bernoulli(0.05))
    fixed = list(wikitext2.bptt_windows(150, 70, None))
    assert fixed == [(0, 70), (70, 70), (140, 9)]


def test_synthetic_language_is_more_predictable_than_its_unigrams() -> None:
    """Each word has at most ``branching`` successors, so the next word's conditional perplexity
    is at most 3, and conditioning never adds entropy, so the unigram perplexity of the same
    words is at least as high: both hold for the empirical counts of any seed's text."""
    corpus = wikitext2.synthetic(WikiText2Synthetic(train_tokens=20000, vocab_size=50, branching=3), seed=0)
    ids = np.asarray(corpus.splits["train"])
    assert corpus.vocab_size == 50 and ids.max() < 50
    pairs = np.zeros((50, 50))
    np.add.at(pairs, (ids[:-1], ids[1:]), 1)
    assert (np.count_nonzero(pairs, axis=1) <= 3).all()
    joint = pairs / pairs.sum()
    nxt = joint.sum(0)  # the unigram distribution of the predicted words, ids[1:]
    unigram_ppl = float(np.exp(-(nxt[nxt > 0] * np.log(nxt[nxt > 0])).sum()))
    rows = joint / np.maximum(joint.sum(1, keepdims=True), 1e-300)
    cond_ppl = float(np.exp(-(joint[joint > 0] * np.log(rows[joint > 0])).sum()))
    assert cond_ppl <= 3.0 + 1e-9 and cond_ppl <= unigram_ppl + 1e-9
