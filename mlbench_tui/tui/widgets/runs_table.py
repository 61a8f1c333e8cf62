"""The runs table: one row per run, updated in place so the cursor and scroll survive refreshes."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

from mlbench_tui.formatting import format_duration, format_elapsed
from mlbench_tui.results.table import value_text
from mlbench_tui.tui.rows import RunRow, format_age
from mlbench_tui.tui.widgets.bars import progress_bar
from mlbench_tui.tui.widgets.rank_table import STATE_STYLES
from mlbench_tui.tui.widgets.table import FittedTable

COLUMNS = (
    "", "name", "task", "backend", "workers", "impl", "state", "progress", "best", "time to goal", "age",
)  # fmt: skip


def _best(row: RunRow) -> Text:
    if row.best is None:
        return Text("—", style="grey50")
    short = row.metric.removeprefix("val_global_")
    return Text.assemble(f"{value_text(row.best)} ", (short, "grey50"))


def _time_to_goal(row: RunRow) -> Text:
    if row.time_to_goal_s is not None:
        return Text(format_duration(row.time_to_goal_s), style="bold")
    if row.eta_s is not None:
        return Text(f"~{format_elapsed(row.eta_s)} left", style="grey50")
    return Text("—", style="grey50")


def row_cells(row: RunRow, marked: bool, now: float) -> tuple[Text | str, ...]:
    """The cells of one run's line."""
    if row.queued_by is not None:
        progress: Text = Text(f"queued (apply {row.queued_by})", style="grey50")
    elif row.progress is None:
        progress = Text("no goal", style="grey50")
    else:
        style = "red" if row.state == "failed" else "yellow" if row.state == "cancelled" else "green"
        progress = progress_bar(row.progress, 10, style=style)
    return (
        Text("●", style="bold magenta") if marked else "",
        row.name,
        row.task,
        row.backend,
        str(row.workers),
        Text(row.implementation or "—", style="" if row.implementation else "grey50"),
        Text(row.state, style=STATE_STYLES.get(row.state, "")),
        progress,
        _best(row),
        _time_to_goal(row),
        format_age(row.created, now),
    )


class RunsTable(FittedTable):
    """DataTable of ``RunRow``s keyed by run id."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, id=id)
        self._order: list[str] = []
        self._cells: dict[str, tuple[Text | str, ...]] = {}

    def on_mount(self) -> None:
        for column in COLUMNS:
            self.add_column(column, key=column or "mark")

    @property
    def selected_id(self) -> str | None:
        if not self._order or self.cursor_row < 0 or self.cursor_row >= len(self._order):
            return None
        return self._order[self.cursor_row]

    def show_rows(self, rows: Sequence[RunRow], marked: set[str], now: float) -> None:
        """Show ``rows`` in this order; unchanged cells are left alone, the selection follows its run."""
        order = [r.id for r in rows]
        cells = {r.id: row_cells(r, r.id in marked, now) for r in rows}
        keys = [c or "mark" for c in COLUMNS]
        if order == self._order:
            for run_id in order:
                old = self._cells.get(run_id)
                for i, cell in enumerate(cells[run_id]):
                    if old is None or str(old[i]) != str(cell) or _style(old[i]) != _style(cell):
                        self.update_cell(run_id, keys[i], cell)
        else:
            selected = self.selected_id
            self.clear()
            for run_id in order:
                self.add_row(*cells[run_id], key=run_id)
            self._order = order
            if selected in order:
                self.move_cursor(row=order.index(selected), animate=False)
        self._cells = cells


def _style(cell: Text | str) -> str:
    if isinstance(cell, Text):
        return f"{cell.style}|{[(s.start, s.end, str(s.style)) for s in cell.spans]}"
    return ""
