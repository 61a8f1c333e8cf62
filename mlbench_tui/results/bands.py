"""How far a figure may be from its expected value and still be normal: a band from measured spread.

A reference row measured more than once carries the spread of its repeats (their coefficient of
variation): a new run on a healthy machine of that class falls within ``Z`` standard deviations
of the reference's mean, widened for the reference's own uncertainty (``sqrt(1 + 1/n)``, a
prediction interval). A row measured once carries only its run's within-run spread, and so does
the run being judged: half the p10-p90 range of its steps (or of 0a's repetitions at the size the
figure is read at) over the median; the wider of the two is the band then, and says where it
came from. A time to accuracy has no within-run spread: without repeats it has no band.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mlbench_tui.results.reference_figures import BUSBW, LATENCY, STEP_TIME
from mlbench_tui.spec.reference_table import MIN_BAND

if TYPE_CHECKING:
    from mlbench_tui.results.model import RunResult
    from mlbench_tui.spec.reference_table import ReferenceRow


@dataclass(frozen=True)
class Band:
    """A band's half-width as a fraction of the expected value, and what it was measured from."""

    half_width: float
    source: str


def reference_band(row: ReferenceRow) -> Band | None:
    """The band from the reference's repeats (None for a row measured once)."""
    half = row.repeats_band()
    return None if half is None else Band(half, f"the reference's {row.repeats} repeats")


def within_run_spread(result: RunResult, figure: str) -> float | None:
    """Half the p10-p90 range over the median of what ``figure`` rests on in ``result``."""
    if figure == STEP_TIME:
        st = result.step_time
        if st is None or st.median_s <= 0:
            return None
        return (st.p90_s - st.p10_s) / 2 / st.median_s
    if figure in (LATENCY, BUSBW):
        figures = (result.allreduce or {}).get(result.precision or "fp32")
        if figures is None:
            return None
        return figures.min_size_spread if figure == LATENCY else figures.peak_busbw_spread
    return None


def run_band(result: RunResult, figure: str, row: ReferenceRow | None = None) -> Band | None:
    """The band from within-run spread: this run's, or the reference run's where that is wider."""
    own = within_run_spread(result, figure)
    theirs = row.step_spread if row is not None else None
    what = "repetitions" if figure in (LATENCY, BUSBW) else "steps"
    if own is None and theirs is None:
        return None
    if theirs is not None and (own is None or theirs > own):
        return Band(
            max(MIN_BAND, theirs), f"the reference run's spread of its {what} (p10-p90; measured once)"
        )
    assert own is not None
    return Band(
        max(MIN_BAND, own), f"this run's spread of its {what} (p10-p90; the reference was measured once)"
    )
