"""Per-rank table: state, step/epoch, step time and the compute/comm/data split as a stacked bar,
then the rank's latest hardware telemetry (CPU, memory, GPU utilisation, GPU memory, power).

Stragglers (step time well above the median of all ranks, see ``goal.find_stragglers``) are shown
in the warning style with a marker, which is the first thing to look at when scaling is poor; so
are ranks whose GPU sits idle far more than the others' (``goal.find_underused``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from mlbench_tui.tui import rank_telemetry
from mlbench_tui.tui.goal import find_stragglers, find_underused
from mlbench_tui.tui.rank_telemetry import RankTelemetry
from mlbench_tui.tui.widgets.bars import stacked_bar
from mlbench_tui.tui.widgets.table import FittedTable

PART_STYLES = (("compute", "green"), ("comm", "dark_orange"), ("data", "dodger_blue1"), ("other", "grey50"))
BAR_WIDTH = 24
STATE_STYLES = {
    "running": "green",
    "succeeded": "bold green",
    "failed": "bold red",
    "cancelled": "yellow",
    "pending": "grey50",
    "unknown": "grey50",
}


@dataclass
class RankView:
    """What the run screen knows about one rank (from rank states and tracker metrics)."""

    rank: int
    state: str = "pending"
    host: str | None = None
    step: int | None = None
    epoch: float | None = None
    step_time: float | None = None  # seconds, recent
    compute: float = 0.0  # cumulative seconds (tracker totals)
    comm: float = 0.0
    data: float = 0.0
    other: float = 0.0
    telemetry: RankTelemetry = field(default_factory=RankTelemetry)

    @property
    def comm_share(self) -> float | None:
        total = self.compute + self.comm + self.data + self.other
        return self.comm / total if total > 0 else None


def legend() -> Text:
    text = Text("  ")
    for name, style in PART_STYLES:
        text.append("█ ", style=style)
        text.append(f"{name}   ")
    text.append("⚠ straggler: step time > 1.25x median", style="bold red")
    text.append("   ")
    text.append("⚠ idle GPU: utilisation < median / 1.25", style="bold red")
    return text


class RankTable(Vertical):
    """The per-rank table with its legend; ``update_ranks`` redraws only when the values change."""

    COLUMNS = (
        "rank", "state", "host", "step", "epoch", "step time", "compute | comm | data", "comm %",
        *rank_telemetry.COLUMNS,
    )  # fmt: skip

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._rows: dict[int, tuple[Text, ...]] = {}  # rank -> the cells shown
        self.stragglers: set[int] = set()
        self.underused: set[int] = set()

    def compose(self) -> ComposeResult:
        table = FittedTable(cursor_type="row", zebra_stripes=True, id="rank-table")
        yield table
        yield Static(legend(), id="rank-legend")

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for column in self.COLUMNS:
            table.add_column(column, key=column)

    def update_ranks(self, ranks: Sequence[RankView]) -> None:
        """Show ``ranks``; only cells whose text or style changed are touched (a live run changes
        a step and a step time per rank per update, and each ``update_cell`` costs a repaint)."""
        table: DataTable[Text | str] = self.query_one(DataTable)
        self.stragglers = find_stragglers({r.rank: r.step_time for r in ranks if r.step_time is not None})
        utils = {r.rank: r.telemetry.gpu_util for r in ranks if r.telemetry.gpu_util is not None}
        self.underused = find_underused(utils)
        wanted = {r.rank for r in ranks}
        for rank in list(self._rows):
            if rank not in wanted:
                table.remove_row(str(rank))
                del self._rows[rank]
        for view in sorted(ranks, key=lambda r: r.rank):
            cells = tuple(self._cells(view, view.rank in self.stragglers, view.rank in self.underused))
            old = self._rows.get(view.rank)
            if old is None:
                table.add_row(*cells, key=str(view.rank))
            else:
                for column, cell, before in zip(self.COLUMNS, cells, old, strict=True):
                    if cell != before or cell.style != before.style:  # Text == ignores the base style
                        table.update_cell(str(view.rank), column, cell)
            self._rows[view.rank] = cells

    @staticmethod
    def _cells(view: RankView, straggler: bool, idle_gpu: bool) -> list[Text]:
        row_style = "bold red" if straggler else ""
        state = Text(view.state, style=STATE_STYLES.get(view.state, ""))
        if straggler:
            state.append(" ⚠ slow", style="bold red")
        share = view.comm_share
        bar = stacked_bar(
            [
                (view.compute, "green"),
                (view.comm, "dark_orange"),
                (view.data, "dodger_blue1"),
                (view.other, "grey50"),
            ],
            BAR_WIDTH,
        )
        return [
            Text(str(view.rank), style=row_style),
            state,
            Text(view.host or "—", style=row_style),
            Text("—" if view.step is None else str(view.step), style=row_style),
            Text("—" if view.epoch is None else f"{view.epoch:.2f}", style=row_style),
            Text("—" if view.step_time is None else f"{view.step_time * 1000:.1f} ms", style=row_style),
            bar,
            Text("—" if share is None else f"{share * 100:.1f}%", style=row_style),
            *(
                Text(
                    cell + " ⚠" * (idle_gpu and column == "GPU"), style="bold red" if idle_gpu else row_style
                )
                for column, cell in zip(rank_telemetry.COLUMNS, view.telemetry.cells(), strict=True)
            ),
        ]
