"""Rasterise chart series into braille cells: 2x4 dots per terminal cell, one colour per cell.

``draw_chart`` takes ``MinMaxSeries`` and a size in cells and returns rows of ``(text, style)``
runs, where style is a name (``"series-0"``, ``"goal"``, ``"axis"``, ``"label"``, ``""``) that the
widget maps to a real style. Work is O(width x height): each series is reduced to about one bucket
per dot column first, each dot column becomes one vertical span (min..max, joined to its
neighbour so lines stay connected), and a span is written a whole cell at a time from a table.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mlbench_tui.tui.widgets.series import MinMaxSeries

BRAILLE_BASE = 0x2800
# Dot bit for (column dx in 0..1, row dy in 0..3) inside one braille cell.
_DOT = ((0x01, 0x02, 0x04, 0x40), (0x08, 0x10, 0x20, 0x80))
# _SPAN[dx][a][b]: bits of rows a..b (inclusive) in column dx.
_SPAN = [
    [[sum(_DOT[dx][r] for r in range(a, b + 1)) if b >= a else 0 for b in range(4)] for a in range(4)]
    for dx in range(2)
]

Run = tuple[str, str]

_CHARS = [" "] + [chr(BRAILLE_BASE + bits) for bits in range(1, 256)]
GOAL_OWNER = 6
# owner index -> style name: -1 empty, 0..5 series, 6 the goal line
_OWNER_STYLE = {-1: "", **{i: f"series-{i}" for i in range(6)}, GOAL_OWNER: "goal"}


@dataclass(frozen=True)
class ChartLayout:
    """Where the plot sits inside the widget, in cells."""

    label_width: int
    plot_width: int
    plot_height: int


_SI_PREFIXES = ((1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""), (1e-3, "m"), (1e-6, "µ"), (1e-9, "n"))


def format_value(value: float, width: int = 7) -> str:
    """A compact number that fits ``width`` cells, never in scientific notation: ``87.5``,
    ``0.0421``, and with an SI prefix where the plain number would not fit (``123k``, ``25.6µ``
    for 2.565e-05 s)."""
    if not math.isfinite(value):
        return str(value)[:width]
    for digits in (4, 3, 2):
        text = f"{value:.{digits}g}"
        if len(text) <= width and "e" not in text:
            return text
    size = abs(value)
    factor, prefix = next(((f, p) for f, p in _SI_PREFIXES if size >= f), _SI_PREFIXES[-1])
    for digits in (3, 2, 1):
        text = f"{value / factor:.{digits}g}"
        if "e" not in text and len(text) + len(prefix) <= width:
            return text + prefix
    return f"{value / factor:.0f}{prefix}"[:width]


def layout_for(width: int, height: int) -> ChartLayout:
    label_width = 8 if width >= 30 else 0
    return ChartLayout(
        label_width, max(1, width - label_width - (1 if label_width else 0)), max(1, height - 2)
    )


def _x_extent(series: Sequence[MinMaxSeries]) -> tuple[float, float]:
    lo = min((s.xmin for s in series if len(s)), default=0.0)
    hi = max((s.xmax for s in series if len(s)), default=1.0)
    if hi <= lo:
        hi = lo + 1.0
    return lo, hi


def _column_spans(
    series: MinMaxSeries,
    dots_w: int,
    x_lo: float,
    x_hi: float,
    y_hi: float,
    y_scale: float,
) -> tuple[list[int], list[int]]:
    """Per dot column, the top and bottom dot rows this series covers (top > bottom: empty).

    Buckets become vertical spans; consecutive buckets are joined (interpolated across empty
    columns), so a line stays connected at any density.
    """
    scale = (dots_w - 1) / (x_hi - x_lo)
    tops = [1 << 30] * dots_w
    bottoms = [-1] * dots_w
    x0s, x1s, ymins, ymaxs, yfirsts, ylasts = series.columns(dots_w)
    prev_col = -1
    prev_y = 0
    for x0, x1, ymin, ymax, yfirst, ylast in zip(x0s, x1s, ymins, ymaxs, yfirsts, ylasts, strict=True):
        c0 = int((x0 - x_lo) * scale + 0.5)
        c1 = int((x1 - x_lo) * scale + 0.5)
        top = int((y_hi - ymax) * y_scale + 0.5)
        bottom = int((y_hi - ymin) * y_scale + 0.5)
        first = int((y_hi - yfirst) * y_scale + 0.5)
        if prev_col >= 0:
            if c0 <= prev_col + 1:
                lo, hi = (prev_y, first) if prev_y < first else (first, prev_y)
                if lo < tops[c0]:
                    tops[c0] = lo
                if hi > bottoms[c0]:
                    bottoms[c0] = hi
            else:  # interpolate across the empty columns between the two buckets
                step = (first - prev_y) / (c0 - prev_col)
                last_row = prev_y
                for col in range(prev_col + 1, c0 + 1):
                    row = round(prev_y + step * (col - prev_col))
                    lo, hi = (last_row, row) if last_row < row else (row, last_row)
                    if lo < tops[col]:
                        tops[col] = lo
                    if hi > bottoms[col]:
                        bottoms[col] = hi
                    last_row = row
        for col in range(c0, c1 + 1):
            if top < tops[col]:
                tops[col] = top
            if bottom > bottoms[col]:
                bottoms[col] = bottom
        prev_col = c1
        prev_y = int((y_hi - ylast) * y_scale + 0.5)
    return tops, bottoms


def draw_chart(
    series: Sequence[MinMaxSeries],
    width: int,
    height: int,
    *,
    goal: float | None = None,
    x_label: str = "",
    legend: Sequence[str] | None = None,
    empty: str = "waiting for data…",
    y_format: Callable[[float], str] | None = None,
) -> list[list[Run]]:
    """Render ``series`` into ``height`` rows of runs totalling ``width`` cells each; ``empty`` is
    what a chart without points says, ``y_format`` writes the y labels (default: ``format_value``)."""
    y_text = y_format or format_value
    width = max(width, 1)
    height = max(height, 3)
    lay = layout_for(width, height)
    pw, ph = lay.plot_width, lay.plot_height
    dots_w, dots_h = pw * 2, ph * 4
    filled = [s for s in series if len(s)]
    rows: list[list[Run]] = []

    # Legend row.
    legend_runs: list[Run] = []
    used = 0
    for i, s in enumerate(series):
        text = (legend[i] if legend and i < len(legend) else s.name) + "  "
        text = "● " + text
        if used + len(text) > width:
            break
        legend_runs.append((text, f"series-{i % 6}"))
        used += len(text)
    if goal is not None and used + 14 <= width:
        text = f"┄ goal {format_value(goal)}"
        legend_runs.append((text, "goal"))
        used += len(text)
    legend_runs.append((" " * (width - used), ""))
    rows.append(legend_runs)

    if not filled:
        message = empty
        for r in range(ph):
            if r == ph // 2:
                pad = max(0, (width - len(message)) // 2)
                rows.append(
                    [
                        (" " * pad, ""),
                        (message[: width - pad], "label"),
                        (" " * max(0, width - pad - len(message)), ""),
                    ]
                )
            else:
                rows.append([(" " * width, "")])
        rows.append([(" " * width, "")])
        return rows

    x_lo, x_hi = _x_extent(filled)
    y_lo = min(s.ymin for s in filled)
    y_hi = max(s.ymax for s in filled)
    if goal is not None and math.isfinite(goal):
        y_lo, y_hi = min(y_lo, goal), max(y_hi, goal)
    if y_hi <= y_lo:
        y_lo, y_hi = y_lo - 0.5, y_hi + 0.5
    y_scale = (dots_h - 1) / (y_hi - y_lo)

    def to_y(value: float) -> int:
        return int((y_hi - value) * y_scale + 0.5)

    cells = [0] * (pw * ph)
    owner = [-1] * (pw * ph)
    for s in filled:
        style_idx = series.index(s) % 6
        tops, bottoms = _column_spans(s, dots_w, x_lo, x_hi, y_hi, y_scale)
        for col in range(dots_w):
            a, b = tops[col], bottoms[col]
            if a > b:
                continue
            a = max(a, 0)
            b = min(b, dots_h - 1)
            cx, dx = divmod(col, 2)
            span = _SPAN[dx]
            for cy in range(a >> 2, (b >> 2) + 1):
                lo = a - cy * 4 if cy * 4 < a else 0
                hi = b - cy * 4 if b < cy * 4 + 3 else 3
                k = cy * pw + cx
                cells[k] |= span[lo][hi]
                owner[k] = style_idx

    goal_row = -1
    goal_bits = 0
    if goal is not None and math.isfinite(goal):
        gy = to_y(goal)
        goal_row, dy = divmod(gy, 4)
        goal_bits = _DOT[0][dy] | _DOT[1][dy]

    # Y labels at the top, the middle, the goal and the bottom rows.
    labels: dict[int, str] = {}
    if lay.label_width:
        labels[0] = y_text(y_hi)
        labels[ph - 1] = y_text(y_lo)
        if ph >= 5:
            labels.setdefault(ph // 2, y_text(y_hi - (y_hi - y_lo) * ((ph // 2) * 4 + 2) / (dots_h - 1)))
        if 0 <= goal_row < ph:
            labels[goal_row] = y_text(goal if goal is not None else 0.0)

    lw = lay.label_width
    for r in range(ph):
        runs: list[Run] = []
        if lw:
            label = labels.get(r, "")
            runs.append(
                (label.rjust(lw - 1)[: lw - 1] + " ", "goal" if r == goal_row and r in labels else "label")
            )
            runs.append(("┤" if r in labels else "│", "axis"))
        base = r * pw
        row_bits = cells[base : base + pw]
        row_owner = owner[base : base + pw]
        if r == goal_row:
            # The goal row: a dashed line where there is no data, merged into the data cells.
            for c in range(pw):
                if row_bits[c]:
                    row_bits[c] |= goal_bits
                elif c % 2 == 0:
                    row_bits[c] = goal_bits
                    row_owner[c] = GOAL_OWNER
        if not any(row_bits):
            runs.append((" " * pw, ""))
        else:
            text = "".join([_CHARS[b] for b in row_bits])
            cuts = [c for c in range(1, pw) if row_owner[c] != row_owner[c - 1]]
            start = 0
            for end in [*cuts, pw]:
                runs.append((text[start:end], _OWNER_STYLE[row_owner[start]]))
                start = end
        rows.append(runs)

    # X axis row: min at the left, the label in the middle, max at the right.
    left = format_value(x_lo)
    right = format_value(x_hi)
    axis_pad = " " * (lw + (1 if lw else 0))
    mid_space = width - len(axis_pad) - len(left) - len(right)
    if mid_space >= len(x_label) + 2:
        before = (mid_space - len(x_label)) // 2
        axis = left + " " * before + x_label + " " * (mid_space - before - len(x_label)) + right
    elif mid_space >= 1:
        axis = left + " " * mid_space + right
    else:
        axis = left[: max(0, width - len(axis_pad))]
    rows.append([(axis_pad, ""), (axis[: width - len(axis_pad)].ljust(width - len(axis_pad)), "label")])
    return rows
