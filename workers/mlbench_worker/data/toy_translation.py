"""A learnable toy translation for smoke runs of tasks 4a and 4b (the ``synthetic`` data source).

The target is the source reversed (or copied) with every word mapped to its partner word, over a
small vocabulary: a model must learn a word mapping and, through attention, an alignment, so
reaching a BLEU goal proves the whole pipeline learns, in seconds on a CPU.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mlbench_worker.data.fetch import DatasetError
from mlbench_worker.data.options import ToyTranslation
from mlbench_worker.data.wmt import EOS, SPECIALS, Corpus, Split, offsets


def synthetic(options: ToyTranslation, seed: int) -> Corpus:
    """A toy translation a small model learns in seconds: reverse (or copy) and map each word.

    Source sentences are uniform random words ``s0..s{V-1}`` of ``min_len..max_len`` words;
    the target is the mapped word ``t{perm[i]}`` for each source word, in reverse order
    (``mode: reverse``, default) or the same order (``mode: copy``); ``ToyTranslation`` declares
    the options.
    """
    n_train, n_val, words = options.train_samples, options.val_samples, options.vocab_words
    lo, hi, mode = options.min_len, options.max_len, options.mode
    if n_train < 1 or n_val < 1 or words < 2 or not 1 <= lo <= hi or mode not in ("reverse", "copy"):
        raise DatasetError(
            "synthetic translation needs train/val_samples >= 1, vocab_words >= 2, "
            "1 <= min_len <= max_len and mode 'reverse' or 'copy'"
        )
    rng = np.random.default_rng(seed)
    perm = rng.permutation(words)
    first = len(SPECIALS)  # source words are ids first.., target words first+words..
    vocab = [*SPECIALS, *(f"s{i}" for i in range(words)), *(f"t{i}" for i in range(words))]

    def make(n: int) -> Split:
        lens = rng.integers(lo, hi + 1, size=n)
        src_parts, tgt_parts = [], []
        for length in lens:
            w = rng.integers(0, words, size=int(length))
            t = perm[w][::-1] if mode == "reverse" else perm[w]
            src_parts.append(np.append(w + first, EOS))
            tgt_parts.append(np.append(t + first + words, EOS))
        return Split(
            np.concatenate(src_parts).astype(np.int32),
            offsets(lens + 1),
            np.concatenate(tgt_parts).astype(np.int32),
            offsets(lens + 1),
        )

    train, test = make(n_train), make(n_val)

    def detokenize(ids: Sequence[int]) -> str:
        return " ".join(vocab[int(i)] for i in ids if EOS < int(i) < len(vocab))

    refs = tuple(detokenize(test.pair(i)[1].tolist()) for i in range(len(test)))
    return Corpus(train, test, refs, len(vocab), detokenize, "synthetic")
