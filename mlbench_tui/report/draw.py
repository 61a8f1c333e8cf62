"""Draw ``figure.Figure`` data with matplotlib (Agg, no pyplot state) to PNG or SVG bytes.

The only module of the project that imports matplotlib, and only ``mlbench report`` and the
TUI's report key import it. Panels sit side by side (two columns from four panels on); a
figure's pixel size is chosen by the caller (``--width``/``--height``) or by its panel count.
"""

from __future__ import annotations

import io
import math
import textwrap
from typing import Any, Literal

import matplotlib

matplotlib.use("Agg", force=False)

from matplotlib.figure import Figure as MplFigure
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, MaxNLocator, NullFormatter, NullLocator

from mlbench_tui.report.figure import Figure, Panel

ImageFormat = Literal["png", "svg"]
DPI = 100
PANEL_WIDTH_PX = 480
ROW_HEIGHT_PX = 380
STYLE: Any = {  # rc settings for every figure (Any: matplotlib types each key as a literal)
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.titleweight": "bold",
    "axes.titley": 1.0,  # a fixed title height: matplotlib's automatic one measures every tick label
    "axes.titlepad": 6.0,
    "axes.labelsize": 9,
    "axes.grid": True,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.6,
    "legend.fontsize": 7.5,
    "legend.frameon": True,  # a light box: a legend over a reference line stays readable
    "legend.framealpha": 0.9,
    "legend.edgecolor": "#dddddd",
    "figure.titlesize": 11,
    "figure.titleweight": "bold",
    "svg.hashsalt": "mlbench",  # stable ids: the same figure data gives the same SVG
    "svg.fonttype": "path",  # self-contained: no font needed where the SVG is opened
}


def grid_of(panels: int) -> tuple[int, int]:
    """(rows, columns) for ``panels`` side by side: one row up to three, then two columns."""
    if panels <= 3:
        return 1, max(1, panels)
    return math.ceil(panels / 2), 2


NOTE_LINE_PX = 15  # a line of the notes drawn under a figure file
TITLE_PX = 14  # the figure's title, from the top edge


def default_size(figure: Figure) -> tuple[int, int]:
    """Width and height in pixels for ``figure`` when the caller asks for none."""
    rows, cols = grid_of(len(figure.panels))
    return max(640, PANEL_WIDTH_PX * cols), ROW_HEIGHT_PX * rows + 40


def size_for(figure: Figure, width: int | None, height: int | None) -> tuple[int, int]:
    """The size to draw at: the caller's, else the panel grid's; one side given scales the other
    (a wide figure of six panels given only a width keeps its rows readable)."""
    default_w, default_h = default_size(figure)
    if width and not height:
        return width, max(100, round(default_h * width / default_w))
    if height and not width:
        return max(100, round(default_w * height / default_h)), height
    return width or default_w, height or default_h


def note_lines(figure: Figure, width: int) -> list[str]:
    """The figure's notes wrapped to ``width`` pixels of 7.5-point text."""
    chars = max(40, int(width / 6.2))
    return [
        line for note in figure.notes for line in textwrap.wrap(f"- {note}", chars, subsequent_indent="  ")
    ]


def render(
    figure: Figure,
    fmt: ImageFormat = "png",
    *,
    width: int | None = None,
    height: int | None = None,
    notes: bool = False,
) -> bytes:
    """The figure as PNG or SVG bytes, ``width`` x ``height`` pixels (at 100 dpi); with ``notes``,
    its notes are written under the panels (a figure file carries the caveats the page shows), the
    figure taller by as much when the caller did not set its height."""
    asked_height = height
    width, height = size_for(figure, width, height)
    lines = note_lines(figure, width) if notes else []
    notes_px = NOTE_LINE_PX * len(lines) + (12 if lines else 0)
    if asked_height is None:
        height += notes_px
    with matplotlib.rc_context(STYLE):
        fig = MplFigure(figsize=(width / DPI, height / DPI), dpi=DPI)
        rows, cols = grid_of(len(figure.panels))
        axes = fig.subplots(
            rows, cols, squeeze=False, gridspec_kw=_margins(width, height, rows, cols, notes_px)
        ).ravel()
        for ax, panel in zip(axes, figure.panels, strict=False):
            _draw_panel(ax, panel)
        for ax in axes[len(figure.panels) :]:
            ax.set_visible(False)
        fig.suptitle(figure.title, y=1 - TITLE_PX / height, va="top")
        if lines:
            text = "\n".join(lines)
            fig.text(
                8 / width, (notes_px - 8) / height, text, ha="left", va="top", fontsize=7.5, color="#333"
            )
        buffer = io.BytesIO()
        fig.savefig(buffer, format=fmt, dpi=DPI, metadata=_metadata(fmt), **_save_options(fmt))
    return buffer.getvalue()


def _margins(width: int, height: int, rows: int, cols: int, below: int = 0) -> dict[str, float]:
    """Fixed margins in pixels as figure fractions: one layout pass fewer than matplotlib's
    constrained layout, which measured every label and then drew the figure a second time;
    ``below``: pixels under the panels kept for the notes."""
    left, right, top, bottom, between_x, between_y = 62, 14, 66, 48 + below, 74, 84
    panel_w = (width - left - right - between_x * (cols - 1)) / cols
    panel_h = (height - top - bottom - between_y * (rows - 1)) / rows
    return {
        "left": left / width,
        "right": 1 - right / width,
        "top": 1 - top / height,
        "bottom": bottom / height,
        "wspace": between_x / max(panel_w, 1),
        "hspace": between_y / max(panel_h, 1),
    }


def compact(value: float, _pos: object = None) -> str:
    """A tick label in SI shorthand: 0.01, 1, 100, 10k, 1M, 1G."""
    for factor, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:g}{suffix}"
    return f"{value:g}"


def _save_options(fmt: ImageFormat) -> dict[str, Any]:
    # zlib level 1: a third of the time of the default level for a file about 15% larger
    return {"pil_kwargs": {"compress_level": 1}} if fmt == "png" else {}


def _metadata(fmt: ImageFormat) -> dict[str, Any]:
    # No creation date: the same data gives the same file.
    return {"Date": None} if fmt == "svg" else {"Software": "mlbench report (matplotlib)"}


def _draw_panel(ax: Any, panel: Panel) -> None:
    ax.set_title(panel.title)
    ax.set_xlabel(panel.x_label)
    ax.set_ylabel(panel.y_label)
    if panel.empty:
        ax.text(
            0.5,
            0.5,
            panel.note or "nothing recorded",
            ha="center",
            va="center",
            transform=ax.transAxes,
            color="#666666",
            wrap=True,
        )
        ax.set_xticks([])
        ax.set_yticks([])
        return
    if panel.stacks:
        _draw_bars(ax, panel)
    xs: list[float] = []
    ys: list[float] = [ref.y for ref in panel.refs if ref.y is not None and ref.x is None]
    for series in panel.series:
        xs.extend(series.x)
        ys.extend((*series.y, *(series.low or ()), *(series.high or ())))
        if series.low is not None and series.high is not None:
            if series.marker:  # discrete points (worker counts): min-max error bars
                lower = [y - lo for y, lo in zip(series.y, series.low, strict=True)]
                upper = [hi - y for y, hi in zip(series.y, series.high, strict=True)]
                ax.errorbar(
                    series.x,
                    series.y,
                    yerr=[lower, upper],
                    fmt="none",
                    ecolor=series.colour,
                    elinewidth=1.0,
                    capsize=3,
                    alpha=0.8,
                )
            else:  # a curve: a shaded band
                ax.fill_between(
                    series.x, series.low, series.high, color=series.colour, alpha=0.15, linewidth=0
                )
        ax.plot(
            series.x,
            series.y,
            linestyle=series.style,
            marker=series.marker or "",
            markersize=4,
            color=series.colour,
            linewidth=series.width,
            label=series.label,
        )
    for ref in panel.refs:
        if ref.x is not None:
            ax.axvline(ref.x, linestyle=ref.style, color=ref.colour, linewidth=1.0, label=ref.label)
            xs.append(ref.x)
        elif ref.y is None:
            top = max(xs) if xs else 1.0
            ax.plot([1, top], [1, top], linestyle=ref.style, color=ref.colour, linewidth=1.0, label=ref.label)
        else:
            ax.axhline(ref.y, linestyle=ref.style, color=ref.colour, linewidth=1.0, label=ref.label)
    mark_xs = [m.x for m in panel.marks] + xs
    for mark in panel.marks:
        ax.scatter([mark.x], [mark.y], marker=mark.symbol, s=45, color=mark.colour, zorder=5)
        # the label reads away from the nearer side, so it stays inside the axes
        leftmost = mark.x <= (min(mark_xs) + max(mark_xs)) / 2
        ax.annotate(
            mark.label,
            (mark.x, mark.y),
            textcoords="offset points",
            xytext=(6 if leftmost else -6, 6),
            fontsize=7,
            color=mark.colour,
            ha="left" if leftmost else "right",
        )
        xs.append(mark.x)
        ys.append(mark.y)
    for log, axis, scale, values in (
        (panel.x_log, ax.xaxis, ax.set_xscale, xs),
        (panel.y_log, ax.yaxis, ax.set_yscale, ys),
    ):
        if log:  # plain labels (1k, 10M), no minor ticks: each tick is an object matplotlib lays out
            scale("log")
            positive = [v for v in values if v > 0]
            narrow = bool(positive) and max(positive) / min(positive) < 100
            axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0) if narrow else (1.0,), numticks=8))
            axis.set_major_formatter(FuncFormatter(compact))
            axis.set_minor_locator(NullLocator())
            axis.set_minor_formatter(NullFormatter())
            if positive:  # every point inside, with room: a point never falls below the lowest tick
                (ax.set_xlim if axis is ax.xaxis else ax.set_ylim)(min(positive) / 1.5, max(positive) * 1.5)
    for log, axis in ((panel.x_log or bool(panel.stacks), ax.xaxis), (panel.y_log, ax.yaxis)):
        # five ticks read as well as nine and cost half as much to lay out; bars keep their categories
        if not log:
            axis.set_major_locator(MaxNLocator(nbins=5))
    if panel.x_integer and xs and not panel.stacks:
        ticks = sorted(set(xs))
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticklabels([f"{t:g}" for t in ticks])
    if panel.x_ticks and not panel.stacks:
        ax.xaxis.set_major_locator(FixedLocator([x for x, _ in panel.x_ticks]))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticklabels([label for _, label in panel.x_ticks])
    if panel.y_from_zero and not panel.y_log:
        ax.set_ylim(bottom=0)
    if panel.corner:
        ax.text(0.01, 0.99, panel.corner, ha="left", va="top", transform=ax.transAxes, color="#444444")
    if ax.get_legend_handles_labels()[1]:
        ax.legend(loc="best")


def _draw_bars(ax: Any, panel: Panel) -> None:
    positions = list(range(len(panel.categories)))
    bottom = [0.0] * len(positions)
    for stack in panel.stacks:
        ax.bar(
            positions,
            stack.values,
            bottom=bottom,
            label=stack.label,
            color=stack.colour,
            hatch=stack.hatch,
            edgecolor="white",
            linewidth=0.5,
            width=0.7,
        )
        bottom = [b + v for b, v in zip(bottom, stack.values, strict=True)]
    top = max(bottom, default=0.0)
    for x, y, text in zip(positions, bottom, panel.labels, strict=False):
        if text:
            ax.annotate(
                text,
                (x, y),
                textcoords="offset points",
                xytext=(0, 3),
                ha="center",
                va="bottom",
                fontsize=7.5,
            )
    ax.set_ylim(0, top * (1.18 if panel.labels else 1.08) or 1.0)
    ax.set_xticks(positions)
    ax.set_xticklabels(
        panel.categories,
        rotation=30 if len(positions) > 6 else 0,
        ha="right" if len(positions) > 6 else "center",
    )
    ax.grid(axis="x", visible=False)
