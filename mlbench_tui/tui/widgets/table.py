"""The DataTable every screen uses: columns follow updated cells, and no line outlives a width."""

from __future__ import annotations

from typing import Any

from textual import events
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey, RowKey


class FittedTable(DataTable[Any]):
    """A DataTable whose columns follow updated cells, and whose lines never outlive a width.

    DataTable sizes its columns on idle, after the change, but keeps the lines it painted in
    between in caches that a new width does not clear: a header or row painted before the resize
    stayed misaligned until its next change. After DataTable's own idle pass, a change in any
    column's width clears those caches through the public ``notify_style_update``.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._painted_widths: tuple[int, ...] = ()

    def update_cell(
        self,
        row_key: RowKey | str,
        column_key: ColumnKey | str,
        value: Any,
        *,
        update_width: bool = True,
    ) -> None:
        super().update_cell(row_key, column_key, value, update_width=update_width)

    def on_idle(self, _: events.Idle) -> None:
        """Runs after DataTable's own idle handler, which resized the columns of changed cells."""
        widths = tuple(column.get_render_width(self) for column in self.ordered_columns)
        if widths != self._painted_widths:
            self._painted_widths = widths
            self.notify_style_update()  # clears every render cache and repaints
