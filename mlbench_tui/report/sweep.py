"""Task 0a figures: all-reduce latency and bus bandwidth against message size, and the best bus
bandwidth against world size, one line per backend and world size, repeats aggregated.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from mlbench_tui.report.figure import LINE_STYLES, Figure, LineStyle, Panel, Series, backend_colour
from mlbench_tui.report.inputs import RunRecord
from mlbench_tui.report.scaling import outcome_line
from mlbench_tui.results.allreduce import SizeFigures, Spread, SweepCurve, SweepRun, aggregate, run_curves

SWEEP_CAPTION = (
    "Each point is one message size: the time of one all-reduce (p50 and p99 over the repetitions "
    "at that size, rank 0's clock, after warm-up) and the bus bandwidth, algbw x 2(n-1)/n as "
    "nccl-tests defines it, so values are comparable across world sizes. Lines are the olympic mean "
    "over repeats of a configuration; the band spans their min and max. Line colour is the backend, "
    "line style the world size."
)
BEST_CAPTION = (
    "The highest bus bandwidth each backend reached at any message size, against the number of "
    "ranks (one line per backend and dtype); an ideal ring all-reduce keeps it flat."
)


def _sweep_runs(records: Sequence[RunRecord]) -> list[SweepRun]:
    return [
        SweepRun(
            r.result.framework,
            r.result.backend,
            r.result.workers,
            run_curves(p for ps in r.metrics.values() for p in ps),
            network=r.result.network_label,
        )
        for r in records
    ]


Pick = Callable[[SizeFigures], Spread | None]
PANELS: tuple[tuple[str, Pick, float, str], ...] = (  # title, figure, scale, unit
    ("Latency p50", lambda p: p.latency_p50_s, 1e6, "microseconds (log)"),
    ("Latency p99", lambda p: p.latency_p99_s, 1e6, "microseconds (log)"),
    ("Bus bandwidth", lambda p: p.busbw_gbps, 1.0, "GB/s (log)"),
)


def _line(
    curve: SweepCurve, pick: Pick, scale: float, colours: dict[str, str], styles: dict[int, LineStyle]
) -> Series | None:
    points = [(p.bytes, spread) for p in curve.points if (spread := pick(p)) is not None]
    if not points:
        return None
    spreads = [s for _, s in points]
    return Series(
        curve.label,
        tuple(float(b) for b, _ in points),
        tuple(s.mean * scale for s in spreads),
        backend_colour(curve.backend, colours),
        styles[curve.workers],
        marker=None,
        low=tuple(s.low * scale for s in spreads) if curve.runs > 1 else None,
        high=tuple(s.high * scale for s in spreads) if curve.runs > 1 else None,
    )


def sweep_figures(records: Sequence[RunRecord], colours: dict[str, str]) -> list[Figure]:
    """One figure per dtype (latency p50, p99, bus bandwidth) and the best-busbw figure."""
    curves = aggregate(_sweep_runs(records))
    worlds = sorted({c.workers for c in curves})
    styles = {w: LINE_STYLES[i % len(LINE_STYLES)] for i, w in enumerate(worlds)}
    notes = tuple(f"{r.result.name}: {why}" for r in records if (why := _sweep_outcome(r)) is not None)
    figures = []
    for dtype in sorted({c.dtype for c in curves}):
        mine = [c for c in curves if c.dtype == dtype]
        panels = []
        for title, pick, scale, unit in PANELS:
            lines = tuple(s for c in mine if (s := _line(c, pick, scale, colours, styles)) is not None)
            panels.append(
                Panel(
                    title, "message size (bytes, log)", unit, series=lines, x_log=True, y_log=True,
                    note=_no_curve(mine),
                )
            )  # fmt: skip
        figures.append(
            Figure(
                f"allreduce-{dtype}",
                f"All-reduce {dtype}: latency and bus bandwidth against message size",
                SWEEP_CAPTION,
                tuple(panels),
                section="All-reduce (task 0a)",
                notes=notes,
            )
        )
    if not figures and notes:  # only failed sweeps: still say so
        empty = Panel(
            "Bus bandwidth", "message size (bytes, log)", "GB/s", note="no all-reduce curve was recorded"
        )
        figures.append(
            Figure("allreduce", "All-reduce", SWEEP_CAPTION, (empty,), "All-reduce (task 0a)", notes)
        )
    if curves:
        figures.append(_best_figure(curves, colours))
    return figures


def _no_curve(curves: Sequence[SweepCurve]) -> str:
    """Why a panel of ``curves`` drew nothing: one rank moves no data (no bus bandwidth)."""
    if curves and all(c.workers == 1 for c in curves):
        return "one rank moves no data, so a one-rank all-reduce has no bus bandwidth"
    return "no run recorded it"


def _sweep_outcome(record: RunRecord) -> str | None:
    if record.result.state.value == "succeeded":
        return None if record.metrics else "succeeded but recorded no all-reduce curve"
    return outcome_line(record.result)


def _best_figure(curves: Sequence[SweepCurve], colours: dict[str, str]) -> Figure:
    dtypes = sorted({c.dtype for c in curves})
    series = []
    for backend, framework, dtype in sorted({(c.backend, c.framework, c.dtype) for c in curves}):
        points = []
        for curve in curves:
            best = curve.best_busbw
            if (
                (curve.backend, curve.framework, curve.dtype) == (backend, framework, dtype)
                and best
                and best.busbw_gbps
            ):
                points.append((curve.workers, best.busbw_gbps))
        if points:
            points.sort()
            label = f"{'' if framework == 'pytorch' else framework + ' '}{backend} {dtype}"
            series.append(
                Series(
                    label,
                    tuple(float(w) for w, _ in points),
                    tuple(s.mean for _, s in points),
                    backend_colour(backend, colours),
                    LINE_STYLES[dtypes.index(dtype) % len(LINE_STYLES)],
                    low=tuple(s.low for _, s in points),
                    high=tuple(s.high for _, s in points),
                )
            )
    panel = Panel(
        "Best bus bandwidth",
        "world size (ranks)",
        "GB/s",
        series=tuple(series),
        x_integer=True,
        y_from_zero=True,
        note=_no_curve(curves),
    )
    return Figure(
        "allreduce-best-busbw",
        "All-reduce: best bus bandwidth against world size",
        BEST_CAPTION,
        (panel,),
        section="All-reduce (task 0a)",
    )
