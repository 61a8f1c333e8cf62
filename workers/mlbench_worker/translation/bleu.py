"""Corpus BLEU with sacrebleu, computed from statistics summed over ranks.

Each rank scores its share of the test set with ``sacrebleu`` (13a tokenisation, exponential
smoothing: sacrebleu's defaults) and keeps the sufficient statistics: matching and total
n-gram counts (n = 1..4), hypothesis and reference lengths. These add up over disjoint
shares, so summing them with one all-reduce and calling ``BLEU.compute_bleu`` gives exactly
the corpus BLEU of the whole test set.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

STATS = 10  # 4 matches, 4 totals, hypothesis length, reference length


def bleu_stats(hypotheses: Sequence[str], references: Sequence[str]) -> np.ndarray:
    """The sufficient statistics of ``hypotheses`` against one reference each."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    if not hypotheses:
        return np.zeros(STATS, dtype=np.float64)
    from sacrebleu.metrics.bleu import BLEU

    score = BLEU().corpus_score(list(hypotheses), [list(references)])
    return np.asarray([*score.counts, *score.totals, score.sys_len, score.ref_len], dtype=np.float64)


def bleu_from_stats(stats: Sequence[float] | np.ndarray) -> float:
    """Corpus BLEU (0-100) from summed statistics."""
    from sacrebleu.metrics.bleu import BLEU

    s = [round(float(v)) for v in stats]
    if s[8] == 0:
        return 0.0
    return float(BLEU.compute_bleu(s[0:4], s[4:8], s[8], s[9], smooth_method="exp").score)
