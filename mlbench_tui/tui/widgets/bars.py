"""Text bars for table cells: a progress bar and a stacked bar (compute / comm / data / other).

Cells of a DataTable are Rich ``Text``; these build them with eighth-block precision for the
progress bar and largest-remainder rounding for the stacked bar, so the parts always fill exactly
``width`` cells and a non-zero part never disappears entirely.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

_EIGHTHS = " ▏▎▍▌▋▊▉"


def progress_bar(
    fraction: float, width: int = 12, *, style: str = "green", empty_style: str = "grey37"
) -> Text:
    """A bar of ``width`` cells filled to ``fraction`` (0..1) with sub-cell precision, then a percent."""
    fraction = min(max(fraction, 0.0), 1.0)
    eighths = round(fraction * width * 8)
    full, part = divmod(eighths, 8)
    text = Text()
    text.append("█" * full, style=style)
    if full < width:
        text.append(_EIGHTHS[part] if part else " ", style=style if part else empty_style)
        text.append("·" * (width - full - 1), style=empty_style)
    text.append(f" {fraction * 100:3.0f}%")
    return text


def split_cells(values: Sequence[float], width: int) -> list[int]:
    """Integer cell counts proportional to ``values`` that sum to ``width`` (largest remainder).

    Every positive value gets at least one cell when there is room for it.
    """
    total = sum(v for v in values if v > 0)
    if total <= 0 or width <= 0:
        return [0] * len(values)
    exact = [max(v, 0.0) / total * width for v in values]
    cells = [int(x) for x in exact]
    for i, v in enumerate(values):
        if v > 0 and cells[i] == 0 and sum(cells) < width:
            cells[i] = 1
    remainder = width - sum(cells)
    order = sorted(range(len(values)), key=lambda i: exact[i] - int(exact[i]), reverse=True)
    for i in order:
        if remainder <= 0:
            break
        if values[i] > 0:
            cells[i] += 1
            remainder -= 1
    while sum(cells) > width:  # minimums pushed us over: take from the largest part
        j = max(range(len(cells)), key=lambda i: cells[i])
        cells[j] -= 1
    return cells


def stacked_bar(parts: Sequence[tuple[float, str]], width: int = 24) -> Text:
    """One bar split into coloured parts ((value, style), ...), proportional to the values."""
    text = Text()
    counts = split_cells([v for v, _ in parts], width)
    for (_, style), n in zip(parts, counts, strict=True):
        if n:
            text.append("█" * n, style=style)
    if not any(counts):
        text.append("·" * width, style="grey37")
    return text
