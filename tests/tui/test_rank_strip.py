"""The rank strip's layout: one cell per rank in rows of 8 to 128, folding ranks into a cell
(the worst of them shown) once a run has more ranks than 8 rows hold."""

from __future__ import annotations

import pytest
from textual.app import App, ComposeResult

from mlbench_tui.tui.widgets.rank_strip import UNKNOWN, Cell, RankStrip

pytestmark = pytest.mark.anyio

OK = Cell(2, "█", "green")
BAD = Cell(4, "█", "red")


@pytest.mark.parametrize(
    ("ranks", "width", "layout"),
    [
        (1024, 134, (128, 1, 8)),  # 8 nodes' rows of 128: every rank its own cell
        (1024, 80, (64, 2, 8)),  # a narrower terminal: two ranks a cell
        (4096, 134, (128, 4, 8)),
        (2, 134, (128, 1, 1)),
        (16, 10, (4, 1, 4)),  # narrower than 8 cells: what fits
    ],
)
def test_layout_fits_any_run_in_eight_rows(ranks: int, width: int, layout: tuple[int, int, int]) -> None:
    strip = RankStrip()
    strip.cells = (UNKNOWN,) * ranks
    assert strip.layout_for(width) == layout


async def test_a_folded_cell_shows_its_worst_rank() -> None:
    class StripApp(App[None]):
        def compose(self) -> ComposeResult:
            yield RankStrip()

    async with StripApp().run_test(size=(80, 12)) as pilot:
        strip = pilot.app.query_one(RankStrip)
        cells = [OK] * 1024
        cells[5] = BAD  # shares the third cell of the first row with rank 4
        strip.show(cells)
        await pilot.pause()
        assert strip.size.height == 8
        first = strip.render_line(0)
        assert first.text.startswith("    0 ") and len(first.text.rstrip()) == 6 + 64
        styles = [
            seg.style.color.name for seg in first if seg.style and seg.style.color and seg.text.strip("0 ")
        ]
        assert styles == ["green", "red", "green"]  # runs of one style: ranks 0-3, 4-5, 6-127
        assert strip.render_line(1).text.startswith("  128 ")
