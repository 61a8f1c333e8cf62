"""What a report figure holds, as data: panels, series, bars, reference lines and marks.

Figure builders (``scaling``, ``sweep``, ``training``) return these plain frozen dataclasses;
``draw`` turns them into matplotlib figures. Tests pin the data (which series, points and labels
a figure holds), not pixels, and no builder imports matplotlib. Colours are chosen here, by
backend, so a backend keeps its colour in every figure of a report.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

# Colour-blind-safe (Okabe-Ito), one per backend in every figure; unknown backends take the rest.
BACKEND_COLOURS: dict[str, str] = {
    "gloo": "#0072B2",
    "mpi": "#E69F00",
    "nccl": "#009E73",
    "tensorflow": "#CC79A7",
}
SPARE_COLOURS = ("#D55E00", "#56B4E9", "#F0E442", "#000000")
# One per run where a chart overlays a task's runs (Okabe-Ito, then Tableau's), distinct in order.
RUN_COLOURS = (
    "#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9", "#000000", "#F0E442",
    "#8C564B", "#7F7F7F", "#BCBD22", "#17BECF",
)  # fmt: skip
REFERENCE_COLOUR = "#555555"  # published baselines and ideal lines
GOAL_COLOUR = "#C62828"
LineStyle = Literal["-", "--", "-.", ":"]
LINE_STYLES: tuple[LineStyle, ...] = (
    "-",
    "--",
    "-.",
    ":",
)  # a series' second key: framework, world size, dtype


def run_colour(index: int) -> str:
    """The colour of the ``index``-th run of an overlay chart."""
    return RUN_COLOURS[index % len(RUN_COLOURS)]


def backend_colour(backend: str, known: dict[str, str] | None = None) -> str:
    """The colour of ``backend``: a fixed one for known backends, else the next spare one (stable
    within ``known``, the mapping a report fills as it meets backends)."""
    if backend in BACKEND_COLOURS:
        return BACKEND_COLOURS[backend]
    known = {} if known is None else known
    if backend not in known:
        known[backend] = SPARE_COLOURS[len(known) % len(SPARE_COLOURS)]
    return known[backend]


@dataclass(frozen=True)
class Series:
    """One line (or set of points) with an optional spread band (``low``..``high`` per point)."""

    label: str
    x: tuple[float, ...]
    y: tuple[float, ...]
    colour: str
    style: LineStyle = "-"
    marker: str | None = "o"
    low: tuple[float, ...] | None = None
    high: tuple[float, ...] | None = None
    width: float = 1.6


@dataclass(frozen=True)
class Mark:
    """A labelled point: a failed run, a run that missed its goal, a straggling rank."""

    x: float
    y: float
    label: str
    colour: str
    symbol: str = "x"


@dataclass(frozen=True)
class RefLine:
    """A horizontal reference (a goal, a published time), a vertical one (a moment: training
    starts, the goal is reached) or a diagonal ``y = x`` (ideal speedup)."""

    label: str
    y: float | None = None  # horizontal at y; None (and no x) means the y = x diagonal
    colour: str = REFERENCE_COLOUR
    style: LineStyle = "--"
    x: float | None = None  # vertical at x


@dataclass(frozen=True)
class BarStack:
    """One layer of stacked bars: its values at each of the panel's bar categories."""

    label: str
    values: tuple[float, ...]
    colour: str
    hatch: str = ""


@dataclass(frozen=True)
class Panel:
    """One set of axes."""

    title: str
    x_label: str
    y_label: str
    series: tuple[Series, ...] = ()
    marks: tuple[Mark, ...] = ()
    refs: tuple[RefLine, ...] = ()
    categories: tuple[str, ...] = ()  # bar categories (x tick labels) when the panel has bars
    stacks: tuple[BarStack, ...] = ()
    x_log: bool = False
    y_log: bool = False
    x_integer: bool = False  # worker counts: integer ticks at the measured values
    x_ticks: tuple[tuple[float, str], ...] = ()  # named x ticks (bandwidths: '10Mbit', 'unlimited')
    y_from_zero: bool = False
    note: str = ""  # why the panel is left out when it has nothing to draw
    corner: str = ""  # a label in the panel's top-left corner (a total the axis does not reach)
    labels: tuple[str, ...] = ()  # text over each bar category (its value, its ratio to a baseline)

    @property
    def empty(self) -> bool:
        return not (self.series or self.marks or self.stacks)


def _joined(words: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


@dataclass(frozen=True)
class Figure:
    """A figure of one or more panels side by side, with what it measures in words."""

    key: str  # file stem: scaling-tui-fixture, allreduce-fp32, run-<name>
    title: str
    caption: str
    panels: tuple[Panel, ...]
    section: str = ""  # heading it sits under in the HTML report
    notes: tuple[str, ...] = field(default_factory=tuple)  # failed/not-reached runs, references

    def without_empty(self) -> Figure:
        """This figure less its panels with nothing to draw, each replaced by a sentence saying
        why in the notes, one per reason (a figure of only empty panels is left as its title and
        notes)."""
        empty = [p for p in self.panels if p.empty]
        if not empty:
            return self
        by_reason: dict[str, list[str]] = {}
        for panel in empty:
            by_reason.setdefault(panel.note or "nothing was recorded", []).append(panel.title)
        why = tuple(
            f"{_joined(titles)} {'is' if len(titles) == 1 else 'are'} left out: {reason}."
            for reason, titles in by_reason.items()
        )
        kept = tuple(p for p in self.panels if not p.empty)
        return replace(self, panels=kept, notes=(*self.notes, *why))

    def panel(self, title: str) -> Panel:
        """The panel titled ``title`` (tests and the TUI look panels up by title)."""
        for panel in self.panels:
            if panel.title == title:
                return panel
        raise KeyError(f"{self.key} has no panel {title!r}: {[p.title for p in self.panels]}")
