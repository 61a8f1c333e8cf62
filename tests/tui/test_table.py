"""The shared FittedTable: a line painted before Textual resizes the columns is painted again after."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from textual.app import App, ComposeResult
from textual.geometry import Region
from textual.widgets import DataTable

from mlbench_tui.tui.widgets.table import FittedTable


class _TableApp(App[None]):
    def __init__(self, table: DataTable[str]) -> None:
        super().__init__()
        self.table = table
        table.styles.height = 8  # fixed, as in a screen's layout: a new row does not resize it

    def compose(self) -> ComposeResult:
        yield self.table


def _lines(table: DataTable[str]) -> tuple[str, str]:
    """The header and first row as the screen would paint them now."""
    header, row = table.render_lines(Region(0, 0, table.size.width, 2))
    return header.text, row.text


async def _after_growth(
    table: DataTable[str], grow: Callable[[DataTable[str]], object], *rows: tuple[str, str]
) -> tuple[str, str]:
    """Header and first row once ``grow`` lengthened a run cell of a table showing ``rows``,
    painted before the next idle."""
    app = _TableApp(table)
    async with app.run_test(size=(80, 10)) as pilot:
        table.add_column("run", key="run")
        table.add_column("state", key="state")
        for i, cells in enumerate(rows):
            table.add_row(*cells, key=f"r{i + 1}")
        await pilot.pause()
        grow(table)
        _lines(table)  # a paint between the change and the idle pass that sizes the columns
        await pilot.pause()
        return _lines(table)


def test_the_header_follows_columns_that_grew_after_it_was_painted() -> None:
    header, row = asyncio.run(
        _after_growth(FittedTable(), lambda t: t.add_row("a-much-longer-run-name", "done", key="r1"))
    )
    assert "a-much-longer-run-name" in row, row
    assert row.index("done") == header.index("state"), (header, row)


def test_updated_cells_widen_their_column_and_the_header() -> None:
    def grow(table: DataTable[str]) -> None:
        table.update_cell("r1", "run", "renamed-to-something-long")

    header, row = asyncio.run(_after_growth(FittedTable(), grow, ("r", "done")))
    assert "renamed-to-something-long" in row, row
    assert row.index("done") == header.index("state"), (header, row)


def test_live_rank_cells_that_grow_are_shown_whole() -> None:
    """A rank first seen pending, then with its host and a five-digit step (a live run)."""
    from mlbench_tui.tui.widgets.rank_table import RankTable, RankView

    class _Ranks(App[None]):
        def compose(self) -> ComposeResult:
            yield RankTable()

    async def main() -> str:
        app = _Ranks()
        async with app.run_test(size=(140, 12)) as pilot:
            ranks = app.query_one(RankTable)
            ranks.update_ranks([RankView(rank=0)])
            await pilot.pause()
            ranks.update_ranks(
                [RankView(rank=0, state="running", host="worker-0.mlbench-run", step=12345, epoch=3.5)]
            )
            await pilot.pause()
            table = ranks.query_one(DataTable)
            return table.render_lines(Region(0, 0, table.size.width, 2))[1].text

    row = asyncio.run(main())
    assert "worker-0.mlbench-run" in row and "12345" in row and "running" in row, row
