"""BLEU from statistics summed over ranks equals sacrebleu's corpus BLEU."""

from __future__ import annotations

import numpy as np
import pytest
import sacrebleu
from mlbench_worker.translation.bleu import bleu_from_stats, bleu_stats

HYPS = [
    "The cat sat on the mat.",
    "A quick brown fox jumps over the lazy dog",
    "Das ist ein kleines Haus.",
    "the the the the",
    "Es regnet heute in Berlin, sagte er.",
]
REFS = [
    "The cat is sitting on the mat.",
    "The quick brown fox jumped over the lazy dog.",
    "Das ist ein kleines Haus.",
    "The cat is on the mat.",
    "Heute regnet es in Berlin, sagte er.",
]


def test_matches_sacrebleu_corpus_bleu() -> None:
    expected = sacrebleu.corpus_bleu(HYPS, [REFS]).score
    assert bleu_from_stats(bleu_stats(HYPS, REFS)) == pytest.approx(expected, abs=1e-9)
    assert bleu_from_stats(bleu_stats(REFS, REFS)) == pytest.approx(100.0)


def test_statistics_of_disjoint_shares_add_up_to_the_whole_corpus() -> None:
    whole = sacrebleu.corpus_bleu(HYPS, [REFS]).score
    shares = [bleu_stats(HYPS[r::2], REFS[r::2]) for r in range(2)]  # two "ranks"
    assert bleu_from_stats(np.sum(shares, axis=0)) == pytest.approx(whole, abs=1e-9)
    # a rank with nothing to score contributes zeros
    assert bleu_from_stats(bleu_stats(HYPS, REFS) + bleu_stats([], [])) == pytest.approx(whole, abs=1e-9)
    assert bleu_from_stats(bleu_stats([], [])) == 0.0
    with pytest.raises(ValueError):
        bleu_stats(HYPS, REFS[:2])
