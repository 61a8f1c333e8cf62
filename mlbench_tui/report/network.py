"""The network figure: runs swept over bandwidth read against it (MLBench's fourth dimension).

Time to accuracy, speedup against one worker and communication share, each against each rank's
link bandwidth, one line per optimizer, backend and world size (``results.network_sweep``, which
``mlbench results`` and the TUI's compare screen read too); a fourth panel checks the links
themselves: the rate each run's links carried against the one configured. Unlimited links sit
right of the fastest rate.
"""

from __future__ import annotations

from collections.abc import Sequence

from mlbench_tui.report.figure import (
    LINE_STYLES,
    REFERENCE_COLOUR,
    Figure,
    LineStyle,
    Mark,
    Panel,
    RefLine,
    Series,
    backend_colour,
)
from mlbench_tui.report.inputs import RunRecord
from mlbench_tui.results.network_sweep import NetworkLine, labels, network_lines

CAPTION = (
    "Each point is one world size and bandwidth: the olympic mean time to accuracy of its repeats "
    "that reached the goal, its speedup over the 1-worker run (one rank has no link, so that run is "
    "every bandwidth's baseline), and the share of training time spent in the gradient all-reduce. "
    "Bandwidth is each rank's link in each direction; on local runs every emulated node is a network "
    "namespace whose veth link tc shapes. Link rate checks the links: the fastest second any node's "
    "link carried, against the configured rate (never above it, beyond the token bucket's burst; "
    "far below it, the run never filled its links). Colour is the optimizer, the marker the world "
    "size, the line style the backend."
)
OPTIMIZER_COLOURS: dict[str, str] = {
    "centralized_sgd": "#0072B2",
    "power_sgd": "#D55E00",
    "centralized_adam": "#009E73",
}
BACKEND_STYLES: dict[str, LineStyle] = {"gloo": "-", "nccl": "--", "mpi": "-."}
MARKERS = ("o", "s", "^", "D", "v", "P")


def _x(bandwidth: int | None, unlimited_at: float) -> float:
    return unlimited_at if bandwidth is None else bandwidth / 1e6


def _series(
    lines: Sequence[NetworkLine],
    colours: dict[str, str],
    pick: str,
    unlimited_at: float | None,
    *,
    scale: float = 1.0,
    style: LineStyle | None = None,
) -> tuple[Series, ...]:
    """One series per line: ``pick`` of each point (unlimited links at ``unlimited_at``, or left out
    when None); colour by optimizer, marker by world size, line style by backend."""
    workers = sorted({line.workers for line in lines})
    out: list[Series] = []
    for line, label in zip(lines, labels(lines), strict=True):
        known = [
            (p, v)
            for p in line.points
            if (v := getattr(p, pick)) is not None
            and (p.bandwidth_bps is not None or unlimited_at is not None)
        ]
        if not known:
            continue
        colour = OPTIMIZER_COLOURS.get(line.optimizer or "") or backend_colour(line.backend, colours)
        out.append(
            Series(
                label,
                tuple(_x(p.bandwidth_bps, unlimited_at or 0.0) for p, _ in known),
                tuple(float(v) * scale for _, v in known),
                colour,
                style or BACKEND_STYLES.get(line.backend, LINE_STYLES[len(out) % len(LINE_STYLES)]),
                marker=MARKERS[workers.index(line.workers) % len(MARKERS)],
            )
        )
    return tuple(out)


def network_figure(records: Sequence[RunRecord], colours: dict[str, str]) -> Figure | None:
    """The figure of ``records`` swept over the network (None when they span one network point)."""
    results = [r.result for r in records]
    lines = network_lines(results)
    if not lines:
        return None
    rates = sorted({p.bandwidth_bps for line in lines for p in line.points if p.bandwidth_bps is not None})
    unlimited_at = (rates[-1] / 1e6 * 10) if rates else 1000.0
    ticks = [
        (bps / 1e6, p.bandwidth_label) for line in lines for p in line.points if (bps := p.bandwidth_bps)
    ]
    if any(p.bandwidth_bps is None for line in lines for p in line.points):
        ticks.append((unlimited_at, "unlimited"))
    x_ticks = tuple(sorted(set(ticks)))
    axis = "link bandwidth per rank (Mbit/s, log)"
    tta = Panel(
        "Time to accuracy", axis, "seconds",
        series=_series(lines, colours, "time_to_accuracy_s", unlimited_at),
        x_log=True, x_ticks=x_ticks, y_from_zero=True, note="no run reached its goal",
    )  # fmt: skip
    speedup = Panel(
        "Speedup", axis, "speedup vs 1 worker (x)", series=_series(lines, colours, "speedup", unlimited_at),
        refs=(RefLine("1 worker", 1.0),), x_log=True, x_ticks=x_ticks, y_from_zero=True,
        note="speedup needs a 1-worker run that reached the goal",
    )  # fmt: skip
    comm = Panel(
        "Communication share", axis, "% of training time in all-reduce",
        series=_series(lines, colours, "communication_fraction", unlimited_at, scale=100.0),
        x_log=True, x_ticks=x_ticks, y_from_zero=True, note="no run reported its phase split",
    )  # fmt: skip
    return Figure(
        key="network",
        title="Network: time to accuracy, speedup and communication against bandwidth",
        caption=CAPTION,
        panels=(tta, speedup, comm, _link_panel(lines, records, colours)),
        section="Network",
        notes=tuple(_notes(records)),
    )


def _link_panel(lines: Sequence[NetworkLine], records: Sequence[RunRecord], colours: dict[str, str]) -> Panel:
    """The fastest second each line's links carried against the configured rate (the diagonal):
    a shaped link stays on or under it; a run whose shaping did not hold is marked."""
    series = _series(lines, colours, "peak_mbit_s", None, style=":")
    marks = tuple(
        Mark(r.result.network.bandwidth_bps / 1e6, r.result.network.peak_mbit_s, "not shaped", "#C62828")
        for r in records
        if r.result.network is not None
        and r.result.network.held is False
        and r.result.network.bandwidth_bps is not None
        and r.result.network.peak_mbit_s is not None
    )
    configured = sorted({x for s in series for x in s.x})
    ideal = Series(
        "configured rate", tuple(configured), tuple(configured), REFERENCE_COLOUR, "--", marker=None
    )
    return Panel(
        "Link rate",
        "configured (Mbit/s, log)",
        "fastest second carried (Mbit/s, log)",
        series=(ideal, *series) if series else (),
        marks=marks,
        x_log=True,
        y_log=True,
        note="no run recorded its link's counters",
    )


def _notes(records: Sequence[RunRecord]) -> list[str]:
    notes = []
    for record in records:
        figures = record.result.network
        if figures is None:
            continue
        if figures.held is False:
            notes.append(
                f"{record.result.name}: links not shaped for the whole run: {'; '.join(figures.problems)}"
            )
        if figures.nccl_socket:
            notes.append(
                f"{record.result.name}: NCCL on its socket transport between emulated nodes "
                "(compare only with other such runs)"
            )
    return list(dict.fromkeys(notes))


def network_figures(records: Sequence[RunRecord], colours: dict[str, str]) -> list[Figure]:
    figure = network_figure(records, colours)
    return [] if figure is None else [figure]
