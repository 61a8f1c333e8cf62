"""The Ranks tab: how a run's ranks fare as a whole, each rank at a glance, and the worst first.

From the top: the ranks' states and the spread of their figures across ranks (step time, comm
share and busy time, see ``results.ranks``), a strip of one cell per rank coloured by its busy
time against the median (``RankStrip``), and a table of the ``TABLE_ROWS`` worst ranks, or of
the ranks a search names (``0-7,512``), with state, host, step, step time, busy time and the
compute/comm/data split as a stacked bar, then the rank's latest hardware telemetry (CPU, memory,
GPU utilisation, GPU memory, power; a GPU far idler than the others' flagged, see
``goal.find_underused``). However many ranks a run has, the table holds at most
``TABLE_ROWS`` rows and an update touches only the cells that changed; enter on a row asks for
that rank's step time on the chart (``RankChosen``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import DataTable, Input, Static

from mlbench_tui.formatting import format_step
from mlbench_tui.ranksets import EXAMPLE, RankSet, RankSetError, parse_ranks
from mlbench_tui.results.ranks import (
    STRAGGLER_FACTOR,
    RankFigures,
    against_others,
    find_stragglers,
    spread,
    worst_first,
)
from mlbench_tui.tui import rank_telemetry
from mlbench_tui.tui.goal import find_underused
from mlbench_tui.tui.rank_telemetry import RankTelemetry
from mlbench_tui.tui.widgets.bars import stacked_bar
from mlbench_tui.tui.widgets.rank_strip import UNKNOWN, Cell, RankStrip
from mlbench_tui.tui.widgets.table import FittedTable

PART_STYLES = (("compute", "green"), ("comm", "dark_orange"), ("data", "dodger_blue1"), ("other", "grey50"))
BAR_WIDTH = 24
TABLE_ROWS = 50
SLOW_FACTOR = 1.1  # busy time over this many times the other ranks' median: drawn as slow (yellow)
STATE_STYLES = {
    "running": "green",
    "succeeded": "bold green",
    "failed": "bold red",
    "cancelled": "yellow",
    "pending": "grey50",
    "unknown": "grey50",
}


@dataclass
class RankView(RankFigures):
    """What the run screen knows about one rank: its figures (``RankFigures``), state, host and
    latest hardware telemetry."""

    state: str = "pending"
    host: str | None = None
    epoch: float | None = None
    telemetry: RankTelemetry = field(default_factory=RankTelemetry)


def legend() -> Text:
    text = Text("  ")
    for name, style in PART_STYLES:
        text.append("█ ", style=style)
        text.append(f"{name}   ")
    text.append("strip: ", style="bold")
    text.append("█", style="green")
    text.append(f" ≤{SLOW_FACTOR:g}x ")
    text.append("█", style="yellow")
    text.append(f" >{SLOW_FACTOR:g}x ")
    text.append("█", style="red")
    text.append(f" >{STRAGGLER_FACTOR:g}x the other ranks' busy time  ")
    text.append("✗", style="bold red")
    text.append(" failed  · none   ")
    text.append("⚠ idle GPU: util < median/1.25", style="bold red")
    return text


def _ms(seconds: float) -> str:
    return format_step(seconds)


def _pct(fraction: float) -> str:
    return f"{fraction * 100:.1f}%"


class RankTable(Vertical):
    """The Ranks tab's widgets; ``update_ranks`` shows a new state of every rank."""

    COLUMNS = (
        "rank", "state", "host", "step", "epoch", "step time", "busy", "compute | comm | data", "comm %",
        *rank_telemetry.COLUMNS,
    )  # fmt: skip

    class RankChosen(Message):
        """Enter on a rank's row: chart that rank."""

        def __init__(self, rank: int) -> None:
            super().__init__()
            self.rank = rank

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._rows: dict[int, tuple[Text, ...]] = {}  # rank -> the cells shown
        self.shown: list[int] = []  # the ranks in the table, in order
        self.stragglers: set[int] = set()
        self.underused: set[int] = set()
        self.search: RankSet | None = None
        self._views: list[RankView] = []

    def compose(self) -> ComposeResult:
        yield Static(id="rank-summary")
        yield RankStrip(id="rank-strip")
        yield Input(
            placeholder=f"ranks to show, e.g. {EXAMPLE} (enter; empty: the worst ranks)", id="rank-search"
        )
        yield FittedTable(cursor_type="row", zebra_stripes=True, id="rank-table")
        yield Static(legend(), id="rank-legend")

    def on_mount(self) -> None:
        self.query_one("#rank-search", Input).display = False
        table = self.query_one(DataTable)
        for column in self.COLUMNS:
            table.add_column(column, key=column)

    # -- search -----------------------------------------------------------------------------
    def find(self) -> None:
        """Show the rank search and focus it."""
        search = self.query_one("#rank-search", Input)
        search.display = True
        search.focus()

    @on(Input.Submitted, "#rank-search")
    def _searched(self, event: Input.Submitted) -> None:
        event.stop()
        error = self.set_search(event.value)
        if error is not None:
            self.app.notify(error, severity="error")
            return
        event.input.display = False
        self.query_one(DataTable).focus()

    def set_search(self, text: str) -> str | None:
        """Show the ranks of the set ``text`` (empty: the worst); the parse error, if any."""
        try:
            self.search = parse_ranks(text) if text.strip() else None
        except RankSetError as exc:
            return exc.message
        self.update_ranks(self._views)
        return None

    @on(DataTable.RowSelected, "#rank-table")
    def _chosen(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if event.row_key.value is not None:
            self.post_message(self.RankChosen(int(event.row_key.value)))

    # -- showing ----------------------------------------------------------------------------
    def update_ranks(self, ranks: Sequence[RankView]) -> None:
        """Show ``ranks``: the summary, the strip, and the table's rows (only cells whose text or
        style changed are touched: a live run changes a step and a step time per rank per update,
        and each ``update_cell`` costs a repaint)."""
        self._views = list(ranks)
        busy = {r.rank: r.busy for r in ranks}
        self.stragglers = find_stragglers({r: b for r, b in busy.items() if b is not None})
        utils = {r.rank: r.telemetry.gpu_util for r in ranks if r.telemetry.gpu_util is not None}
        self.underused = find_underused(utils)
        chosen = [r for r in ranks if self.search is None or r.rank in self.search]
        order = worst_first(chosen)[:TABLE_ROWS]
        self.query_one("#rank-summary", Static).update(
            self._summary(ranks, len(chosen), len(order)), layout=False
        )
        self.query_one(RankStrip).show(self._strip(ranks, busy))
        self._table(order)

    def _summary(self, ranks: Sequence[RankView], chosen: int, shown: int) -> Text:
        text = Text()
        counts = Counter(r.state for r in ranks)
        text.append(f"{len(ranks)} ranks: ", style="bold")
        for i, (state, n) in enumerate(counts.most_common()):
            text.append(", " if i else "")
            text.append(f"{n} {state}", style=STATE_STYLES.get(state, ""))
        if self.stragglers:
            text.append("   stragglers: ", style="bold red")
            text.append(", ".join(str(r) for r in sorted(self.stragglers)[:12]), style="bold red")
            if len(self.stragglers) > 12:
                text.append(f" and {len(self.stragglers) - 12} more", style="bold red")
        text.append("\n")
        step = spread({r.rank: r.step_time for r in ranks})
        comm = spread({r.rank: r.comm_share for r in ranks})
        busy = spread({r.rank: r.busy for r in ranks})
        if step is not None:
            final = all(r.final for r in ranks if r.step_time is not None)
            text.append("step time ", style="bold")
            text.append(f"p50 {_ms(step.p50)}  p90 {_ms(step.p90)}  max {_ms(step.max)} (r{step.max_rank}) ")
            label = "[median of timed steps]   " if final else "[latest report window]   "
            text.append(label, style="grey50")
        if comm is not None:
            text.append("comm ", style="bold")
            text.append(
                f"p50 {_pct(comm.p50)}  p10 {_pct(comm.p10)}  min {_pct(comm.min)} (r{comm.min_rank})   "
            )
        if busy is not None and comm is not None:
            text.append("busy ", style="bold")
            text.append(f"p50 {_ms(busy.p50)}  p90 {_ms(busy.p90)}  max {_ms(busy.max)} (r{busy.max_rank})")
        text.append("\n")
        if self.search is None:
            what = (
                f"the {shown} worst of {len(ranks)} ranks"
                if shown < len(ranks)
                else "every rank, worst first"
            )
        else:
            what = f"ranks {self.search}: {chosen} of this run's" + (
                f", the {shown} worst" if shown < chosen else ""
            )
        text.append(what, style="grey50")
        text.append("   (k: find ranks; enter: chart a rank's step time)", style="grey50")
        return text

    @staticmethod
    def _strip(ranks: Sequence[RankView], busy: dict[int, float | None]) -> list[Cell]:
        ratio = against_others({r: b for r, b in busy.items() if b is not None})
        cells = [UNKNOWN] * (max((r.rank for r in ranks), default=-1) + 1)
        for r in ranks:
            b = busy[r.rank]
            if r.state == "failed":
                cells[r.rank] = Cell(5, "✗", "bold red")
            elif b is None or r.rank not in ratio:
                cells[r.rank] = UNKNOWN
            elif ratio[r.rank] > STRAGGLER_FACTOR:
                cells[r.rank] = Cell(4, "█", "red")
            elif ratio[r.rank] > SLOW_FACTOR:
                cells[r.rank] = Cell(3, "█", "yellow")
            else:
                cells[r.rank] = Cell(2, "█", "green")
        return cells

    def _table(self, order: Sequence[RankView]) -> None:
        table: DataTable[Text | str] = self.query_one(DataTable)
        ranks = [v.rank for v in order]
        if ranks != self.shown:  # other ranks, or another order: at most TABLE_ROWS rows anew
            table.clear()
            self._rows.clear()
            self.shown = ranks
        for view in order:
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
        busy = view.busy if share is not None else None
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
            Text("—" if view.step_time is None else _ms(view.step_time), style=row_style),
            Text("—" if busy is None else _ms(busy), style=row_style),
            bar,
            Text("—" if share is None else _pct(share), style=row_style),
            *(
                Text(
                    cell + " ⚠" * (idle_gpu and column == "GPU"), style="bold red" if idle_gpu else row_style
                )
                for column, cell in zip(rank_telemetry.COLUMNS, view.telemetry.cells(), strict=True)
            ),
        ]
