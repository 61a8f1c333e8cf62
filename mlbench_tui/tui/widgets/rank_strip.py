"""Every rank of a run at a glance: one cell per rank, coloured by how it fares, rows of 8 to 128.

A run of 1,024 ranks fits in eight lines of 128 cells (a row of eight cells is a node of eight
GPUs); a wider run, or a narrower terminal, folds several ranks into one cell, which shows the
worst of them. The owner hands over one ``Cell`` per rank; the widget repaints only when they
change and asks for a layout only when its height does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from rich.segment import Segment
from rich.style import Style
from textual.geometry import Size
from textual.strip import Strip
from textual.widget import Widget

ROW_SIZES = (128, 64, 32, 16, 8)  # cells per row: the widest that fits
MAX_ROWS = 8
LABEL = 6  # "  512 " before each row


class Cell(NamedTuple):
    """What one rank's cell shows; the larger ``severity`` wins when ranks share a cell."""

    severity: int
    char: str
    style: str


UNKNOWN = Cell(0, "·", "grey50")


class RankStrip(Widget):
    """The cells of ``show``'s ranks, in rank order, with the first rank of each row as a label."""

    DEFAULT_CSS = """
    RankStrip {
        height: auto;
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.cells: tuple[Cell, ...] = ()
        self._styles: dict[str, Style] = {}

    def show(self, cells: Sequence[Cell]) -> None:
        """Show one cell per rank (rank ``i`` is ``cells[i]``)."""
        new = tuple(cells)
        if new == self.cells:
            return
        resized = len(new) != len(self.cells)
        self.cells = new
        self.refresh(layout=resized)

    def layout_for(self, width: int) -> tuple[int, int, int]:
        """(cells per row, ranks per cell, rows) for a strip ``width`` cells wide."""
        room = max(1, width - LABEL)
        per_row = next((n for n in ROW_SIZES if n <= room), room)
        per_cell = max(1, math.ceil(len(self.cells) / (per_row * MAX_ROWS)))
        rows = math.ceil(len(self.cells) / (per_row * per_cell))
        return per_row, per_cell, rows

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return self.layout_for(width)[2]

    def _style(self, name: str) -> Style:
        style = self._styles.get(name)
        if style is None:
            style = self._styles[name] = Style.parse(name)
        return style

    def render_line(self, y: int) -> Strip:
        width = self.content_size.width
        per_row, per_cell, rows = self.layout_for(width)
        if y >= rows:
            return Strip.blank(width)
        first = y * per_row * per_cell
        segments = [Segment(f"{first:>{LABEL - 1}} ", self._style("grey50"))]
        text, style = "", ""
        for i in range(per_row):
            start = first + i * per_cell
            group = self.cells[start : start + per_cell]
            if not group:
                break
            cell = group[0] if per_cell == 1 else max(group, key=lambda c: c.severity)
            if cell.style != style and text:  # one segment per run of one style
                segments.append(Segment(text, self._style(style)))
                text = ""
            text, style = text + cell.char, cell.style
        if text:
            segments.append(Segment(text, self._style(style)))
        return Strip(segments).adjust_cell_length(width)
