"""Regressed or not: two sets of runs compared figure by figure, with a named method and its
confidence interval, a verdict, and the repeats it would take to see a 5% change.

Each side is one configuration's runs (``Side``: a run's headline figure and the samples it rests
on: the step time's timed steps, 0a's timed repetitions, or, for a time to accuracy, the run
alone). The estimate of a side is the median of its runs' medians. The difference is the
candidate's estimate over the base's, less one, and its 95% interval comes from a percentile
bootstrap of that difference (``RESAMPLES`` resamples, seeded, so the same runs give the same
interval). When both sides have repeats, the runs are resampled (each run's median carries its
own sampling noise, so the scatter of the medians is the run-to-run noise a verdict must beat).
With one run a side there is no run-to-run noise to measure: its samples are resampled
(``MAX_SAMPLES`` at most, a seeded subset) and the interval is widened by ``RUN_NOISE_FLOOR``, a
run-to-run noise assumed for each side, so two runs of one configuration are not called different
for the noise within them alone; the output says so, and repeats are the stronger test. Mann-
Whitney U (two-sided, normal approximation with tie correction) is the second opinion, on the
runs' medians with three runs a side or more, else on the samples. The verdict: regressed or
improved when the interval excludes no change, else no significant difference. ``repeats_needed``
is the runs per side a two-sided test at 5% needs to detect a 5% change with 80% power at the
measured noise (run-to-run where there are repeats, else the assumed floor).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from mlbench_tui.results.quantiles import quantile
from mlbench_tui.results.reference_figures import FIGURE_NAMES, faster_is_higher, shown

if TYPE_CHECKING:
    import numpy as np

RESAMPLES = 1000
MAX_SAMPLES = (
    500  # per run in a one-run bootstrap: a seeded random subset of longer series (a wider interval)
)
RUN_NOISE_FLOOR = 0.02
"""The run-to-run noise (relative standard deviation) assumed for a side of one run, which cannot
show its own; with repeats the measured noise takes its place."""
CONFIDENCE = 0.95
DETECT = 0.05  # the change repeats_needed is sized for
Z_ALPHA, Z_POWER = 1.959964, 0.841621  # two-sided 5%, 80% power
METHOD = f"percentile bootstrap ({RESAMPLES} resamples) of the difference of medians; Mann-Whitney U"
ONE_RUN = f"one run a side: its samples resampled, with {RUN_NOISE_FLOOR:.0%} run-to-run noise assumed a side"

Verdict = Literal["regressed", "improved", "no significant difference", "not comparable"]


@dataclass(frozen=True)
class RunSamples:
    """One run's figure: its value (the run's own median) and the samples it rests on."""

    run: str
    value: float
    samples: tuple[float, ...] = ()


@dataclass(frozen=True)
class Side:
    """One side of a comparison for one figure: what it is and its runs."""

    label: str
    runs: tuple[RunSamples, ...]

    @property
    def estimate(self) -> float:
        """The median of the runs' values (the figure as the side states it)."""
        return statistics.median(r.value for r in self.runs)


@dataclass(frozen=True)
class FigureComparison:
    """One figure of the candidate against the base."""

    figure: str
    base: Side
    candidate: Side
    change: float  # candidate / base - 1
    low: float
    high: float
    basis: Literal["runs", "samples"]
    mann_whitney_p: float | None
    mann_whitney_on: Literal["runs", "samples"] | None
    verdict: Verdict
    noise: float | None  # relative standard deviation one repeat carries
    noise_basis: Literal["runs", "samples"] | None
    repeats_needed: int | None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def worse(self) -> bool:
        """Whether the change points the slow way (a longer time, a lower rate)."""
        return self.change < 0 if faster_is_higher(self.figure) else self.change > 0

    def row(self) -> dict[str, str]:
        """The comparison as a table row."""
        p = self.mann_whitney_p
        return {
            "FIGURE": FIGURE_NAMES[self.figure],
            "BASE": f"{shown(self.figure, self.base.estimate)} ({len(self.base.runs)})",
            "CANDIDATE": f"{shown(self.figure, self.candidate.estimate)} ({len(self.candidate.runs)})",
            "CHANGE": f"{self.change:+.1%}",
            "95% CI": f"{self.low:+.1%} .. {self.high:+.1%}" if math.isfinite(self.low) else "-",
            "BY": self.basis if math.isfinite(self.low) else "-",
            "MANN-WHITNEY": "-" if p is None else f"p={p:.3g}",
            "VERDICT": self.verdict,
            "REPEATS FOR 5%": "-" if self.repeats_needed is None else _repeats_text(self),
        }


def _repeats_text(c: FigureComparison) -> str:
    noise = f"{c.noise:.1%}" if c.noise is not None else "?"
    if c.noise_basis == "runs":
        return f"{c.repeats_needed} per side (run-to-run noise {noise})"
    return f"{c.repeats_needed} per side (assumed run-to-run noise {noise}: repeat to measure it)"


def _rng(seed: int) -> np.random.Generator:
    import numpy as np

    return np.random.default_rng(seed)


def _capped(samples: Sequence[float], rng: np.random.Generator) -> np.ndarray:
    import numpy as np

    values = np.asarray(samples, dtype=float)
    if len(values) > MAX_SAMPLES:
        values = rng.choice(values, MAX_SAMPLES, replace=False)
    return values


def _bootstrap_side(side: Side, hierarchical: bool, rng: np.random.Generator) -> np.ndarray:
    """``RESAMPLES`` resampled estimates of a side: its runs' medians resampled, or with one run
    its (capped) samples."""
    import numpy as np

    if hierarchical:
        medians = np.asarray([r.value for r in side.runs])
        return _row_medians(medians[rng.integers(0, len(medians), size=(RESAMPLES, len(medians)))])
    pooled = np.concatenate([_capped(r.samples, rng) if r.samples else [r.value] for r in side.runs])
    return _row_medians(pooled[rng.integers(0, len(pooled), size=(RESAMPLES, len(pooled)))])


def _row_medians(matrix: np.ndarray) -> np.ndarray:
    """The median of each row (``np.median``'s value: a partial sort around the middle, which
    costs a fraction of ``np.median``'s own on thousands of rows)."""
    import numpy as np

    n = matrix.shape[1]
    middle = np.partition(matrix, (n - 1) // 2 if n % 2 else (n // 2 - 1, n // 2), axis=1)
    if n % 2:
        return middle[:, n // 2]
    return (middle[:, n // 2 - 1] + middle[:, n // 2]) / 2


def _pooled(side: Side, rng: np.random.Generator) -> list[float]:
    return [float(x) for r in side.runs for x in _capped(r.samples, rng)]


def mann_whitney(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Two-sided p-value of the Mann-Whitney U test (normal approximation, tie-corrected);
    None when either side is empty or every value is tied."""
    n1, n2 = len(a), len(b)
    if not n1 or not n2:
        return None
    pooled = sorted([(v, 0) for v in a] + [(v, 1) for v in b])
    ranks = [0.0] * len(pooled)
    ties = 0.0
    i = 0
    while i < len(pooled):
        j = i
        while j + 1 < len(pooled) and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        for k in range(i, j + 1):
            ranks[k] = (i + j) / 2 + 1
        t = j - i + 1
        ties += t**3 - t
        i = j + 1
    r1 = sum(r for r, (_, side) in zip(ranks, pooled, strict=True) if side == 0)
    u = r1 - n1 * (n1 + 1) / 2
    n = n1 + n2
    variance = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1))) if n > 1 else 0.0
    if variance <= 0:
        return None
    z = (abs(u - n1 * n2 / 2) - 0.5) / math.sqrt(variance)  # continuity correction
    return min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2)))


def _noise(side: Side) -> tuple[float | None, Literal["runs", "samples"] | None]:
    """A side's relative noise per repeat: the runs' coefficient of variation with repeats, else
    the within-run standard error of its run's median (a lower bound on run-to-run noise)."""
    values = [r.value for r in side.runs]
    if len(values) >= 2 and statistics.fmean(values) > 0:
        return statistics.stdev(values) / statistics.fmean(values), "runs"
    samples = sorted(side.runs[0].samples) if side.runs else []
    if len(samples) < 2:
        return None, None
    middle = quantile(samples, 0.5)
    spread = (quantile(samples, 0.75) - quantile(samples, 0.25)) / 1.349  # a robust standard deviation
    return (1.2533 * spread / math.sqrt(len(samples)) / middle if middle > 0 else None), "samples"


def repeats_needed(noise: float, detect: float = DETECT) -> int:
    """Runs per side for a two-sided 5% test to see a ``detect`` change with 80% power."""
    return max(2, math.ceil(2 * ((Z_ALPHA + Z_POWER) * noise / detect) ** 2))


def compare_figure(figure: str, base: Side, candidate: Side, *, seed: int = 0) -> FigureComparison:
    """The candidate's ``figure`` against the base's (both sides need a run)."""
    import numpy as np

    rng = _rng(seed)
    hierarchical = len(base.runs) >= 2 and len(candidate.runs) >= 2
    change = candidate.estimate / base.estimate - 1.0
    have_samples = all(r.samples for r in (*base.runs, *candidate.runs))
    notes: list[str] = []
    if not hierarchical and not have_samples:
        low = high = math.nan
        verdict: Verdict = "not comparable"
        notes.append(f"{FIGURE_NAMES[figure]}: one run a side and no samples within a run: repeat the runs")
    else:
        b = _bootstrap_side(base, hierarchical, rng)
        c = _bootstrap_side(candidate, hierarchical, rng)
        ok = b > 0
        ratios = c[ok] / b[ok] - 1.0
        if not hierarchical:  # the run-to-run noise one run a side cannot show: assumed
            ratios = (1 + ratios) * np.exp(rng.normal(0.0, RUN_NOISE_FLOOR * math.sqrt(2), len(ratios))) - 1
            notes.append(f"{FIGURE_NAMES[figure]}: {ONE_RUN}")
        tail = (1 - CONFIDENCE) / 2 * 100
        low, high = (float(x) for x in np.percentile(ratios, [tail, 100 - tail]))
        if low > 0 or high < 0:
            worse = high < 0 if faster_is_higher(figure) else low > 0
            verdict = "regressed" if worse else "improved"
        else:
            verdict = "no significant difference"
    on_runs = len(base.runs) >= 3 and len(candidate.runs) >= 3
    if on_runs:
        p = mann_whitney([r.value for r in base.runs], [r.value for r in candidate.runs])
    elif have_samples:
        p = mann_whitney(_pooled(base, rng), _pooled(candidate, rng))
    else:
        p = None
    noises = [n for n in (_noise(base), _noise(candidate)) if n[0] is not None]
    noise, noise_basis = max(noises, key=lambda n: (n[1] == "runs", n[0] or 0.0)) if noises else (None, None)
    if noise_basis == "samples":  # one run a side: at least the noise its interval assumed
        noise = max(noise or 0.0, RUN_NOISE_FLOOR)
    return FigureComparison(
        figure=figure,
        base=base,
        candidate=candidate,
        change=change,
        low=low,
        high=high,
        basis="runs" if hierarchical else "samples",
        mann_whitney_p=p,
        mann_whitney_on=("runs" if on_runs else "samples") if p is not None else None,
        verdict=verdict,
        noise=noise,
        noise_basis=noise_basis,
        repeats_needed=repeats_needed(noise) if noise is not None and noise > 0 else None,
        notes=tuple(notes),
    )


def regressions(comparisons: Sequence[FigureComparison], percent: float) -> list[FigureComparison]:
    """The figures that regressed (significantly) by more than ``percent`` percent."""
    return [c for c in comparisons if c.verdict == "regressed" and abs(c.change) * 100 > percent]
