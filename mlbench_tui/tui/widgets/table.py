"""The DataTable every screen uses: Textual's, with columns that always fit what they show.

Updated cells widen their column, and every cached line is repainted once Textual has resized
the columns (its idle resize keeps lines painted with the old widths otherwise).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey, RowKey


class FittedTable(DataTable[Any]):
    """A DataTable whose columns follow updated cells, and whose lines never outlive a width."""

    def update_cell(
        self,
        row_key: RowKey | str,
        column_key: ColumnKey | str,
        value: Any,
        *,
        update_width: bool = True,
    ) -> None:
        super().update_cell(row_key, column_key, value, update_width=update_width)

    def _update_dimensions(self, new_rows: Iterable[RowKey]) -> None:
        # Runs on idle, only after the table changed, once the columns of the changed cells
        # were resized: any width may differ from what the cached lines were painted with.
        super()._update_dimensions(new_rows)
        self._update_count += 1  # the key of every render cache: what was painted is stale
        self.refresh()
