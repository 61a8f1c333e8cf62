"""The runs screen: every run in the store, live, filterable and sortable; the TUI's home."""

from __future__ import annotations

import time
from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input
from textual.worker import get_current_worker

from mlbench_tui.store.api_models import RunInfo
from mlbench_tui.tui.actions import bindings
from mlbench_tui.tui.feed import RunsFeed
from mlbench_tui.tui.messages import RunsUpdated
from mlbench_tui.tui.rows import SORT_KEYS, STATES, RunRow, run_row, sort_rows
from mlbench_tui.tui.screens import run_commands
from mlbench_tui.tui.shell import Shell, shell_of
from mlbench_tui.tui.widgets.banner import ConnectionBanner
from mlbench_tui.tui.widgets.runs_table import RunsTable
from mlbench_tui.tui.widgets.status_line import StatusLine


class RunsScreen(Screen[None]):
    """Runs table with a text filter, a state filter, sorting, marks, and run commands."""

    SCOPES: ClassVar[tuple[str, ...]] = ("runs",)
    BINDINGS: ClassVar = bindings("runs")

    def __init__(self) -> None:
        super().__init__()
        self.runs: dict[str, RunInfo] = {}
        self.rows: list[RunRow] = []
        self.goal_points: dict[str, list[tuple[float, float]]] = {}
        self.state_filter = "all"
        self.sort_key = "age"
        self.sort_reverse = False
        self.marked: set[str] = set()
        self.loaded = False
        self.first_run_shown = False
        self.feed: RunsFeed | None = None

    @property
    def mlbench(self) -> Shell:
        return shell_of(self)

    def compose(self) -> ComposeResult:
        yield StatusLine(id="title")
        yield ConnectionBanner(id="banner")
        yield Input(placeholder="filter runs: words match name, spec, task, backend, state", id="filter")
        yield StatusLine(id="runs-status")
        yield RunsTable(id="runs")
        yield Footer()

    def on_mount(self) -> None:
        self._update_title()
        self._update_status()
        self.query_one(RunsTable).focus()
        self.start_feed()

    # -- data -------------------------------------------------------------------------------
    def start_feed(self) -> None:
        app = self.mlbench
        self.feed = RunsFeed(app.client, self.post_message, app.post_status, interval=app.runs_interval)
        self._run_feed(self.feed)

    @work(thread=True, exclusive=True, group="runs-feed", exit_on_error=False)
    def _run_feed(self, feed: RunsFeed) -> None:
        worker = get_current_worker()
        feed.run(lambda: worker.is_cancelled)

    def refresh_data(self) -> None:
        if self.feed is not None:
            self.feed.wake.set()

    def on_screen_suspend(self) -> None:
        """Another screen covers the list: stop polling (its own feed keeps the view live).

        Not while the store is empty: the first-run screen waits on this list for the first run."""
        if self.feed is not None and self.runs:
            self.feed.paused.set()

    def on_screen_resume(self) -> None:
        if self.feed is not None and self.feed.paused.is_set():
            self.feed.paused.clear()
            self.feed.wake.set()

    def on_runs_updated(self, message: RunsUpdated) -> None:
        self.runs = {r.id: r for r in message.runs}
        self.goal_points = message.goal_points
        self.marked &= set(self.runs)
        self.loaded = True
        self._rebuild()
        if self.runs and self.feed is not None and self.app.screen is not self:
            # Opened straight onto another screen (a run): the list is painted once, then waits.
            # Textual repaints the screen on top wherever the one below changes, so a list that
            # kept updating underneath would cost a full redraw of the run screen every second.
            self.feed.paused.set()
        if not self.runs and not self.first_run_shown and self.app.screen is self:
            from mlbench_tui.tui.screens.first_run import FirstRunScreen

            self.first_run_shown = True
            self.app.push_screen(FirstRunScreen())
        if self.mlbench.first_paint is None:
            self.call_after_refresh(self._painted)

    def _painted(self) -> None:
        if self.mlbench.first_paint is None:
            self.mlbench.first_paint = time.time()

    def _rebuild(self) -> None:
        text = self.query_one("#filter", Input).value.strip()
        rows = [run_row(r, self.goal_points.get(r.id, ())) for r in self.runs.values()]
        rows = [r for r in rows if r.matches(text, self.state_filter)]
        self.rows = sort_rows(rows, self.sort_key, self.sort_reverse)
        self.query_one(RunsTable).show_rows(self.rows, self.marked, self.mlbench.clock())
        self._update_title()
        self._update_status()

    def _update_title(self) -> None:
        running = sum(1 for r in self.runs.values() if r.state.value == "running")
        title = Text()
        title.append(" mlbench ", style="bold reverse")
        title.append(f"  runs: {len(self.runs)}")
        if running:
            title.append(f"  ({running} running)", style="green")
        title.append(f"   {self.mlbench.server_url}", style="grey50")
        self.query_one("#title", StatusLine).show(title)

    def _update_status(self) -> None:
        status = Text()
        status.append(" state: ", style="bold")
        status.append(self.state_filter)
        status.append("   sort: ", style="bold")
        status.append(f"{self.sort_key} {'↑' if self.sort_reverse else '↓'}")
        if self.marked:
            status.append(f"   marked: {len(self.marked)} (c to compare)", style="magenta")
        if self.loaded and self.runs and not self.rows:
            status.append("   no run matches the filters (esc clears them)", style="yellow")
        elif not self.loaded:
            status.append("   loading…", style="grey50")
        self.query_one("#runs-status", StatusLine).show(status)

    # -- filter input -----------------------------------------------------------------------
    @on(Input.Changed, "#filter")
    def _filter_changed(self) -> None:
        self._rebuild()

    @on(Input.Submitted, "#filter")
    def _filter_done(self) -> None:
        self.query_one(RunsTable).focus()

    @on(DataTable.RowSelected, "#runs")
    def _row_selected(self, event: DataTable.RowSelected) -> None:
        self._open(str(event.row_key.value))

    # -- actions ----------------------------------------------------------------------------
    def selected(self) -> RunInfo | None:
        run_id = self.query_one(RunsTable).selected_id
        return self.runs.get(run_id) if run_id else None

    def _open(self, run_id: str) -> None:
        from mlbench_tui.tui.screens.run_detail import RunDetailScreen

        run = self.runs.get(run_id)
        if run is not None:
            self.app.push_screen(RunDetailScreen(run.id, run.name))

    def action_open_run(self) -> None:
        run = self.selected()
        if run is None:
            self.notify("no run selected", severity="warning")
            return
        self._open(run.id)

    def action_focus_filter(self) -> None:
        self.query_one("#filter", Input).focus()

    def action_cycle_state(self) -> None:
        self.state_filter = STATES[(STATES.index(self.state_filter) + 1) % len(STATES)]
        self._rebuild()

    def action_cycle_sort(self) -> None:
        self.sort_key = SORT_KEYS[(SORT_KEYS.index(self.sort_key) + 1) % len(SORT_KEYS)]
        self._rebuild()

    def action_reverse_sort(self) -> None:
        self.sort_reverse = not self.sort_reverse
        self._rebuild()

    def action_clear_filters(self) -> None:
        self.query_one("#filter", Input).value = ""
        self.state_filter = "all"
        self.marked.clear()
        self._rebuild()
        self.query_one(RunsTable).focus()

    def action_toggle_mark(self) -> None:
        run = self.selected()
        if run is None:
            return
        self.marked ^= {run.id}
        self._rebuild()
        table = self.query_one(RunsTable)
        if table.cursor_row < table.row_count - 1:
            table.move_cursor(row=table.cursor_row + 1)

    def action_compare(self) -> None:
        from mlbench_tui.tui.screens.compare import CompareScreen

        if len(self.marked) >= 2:
            ids = [r.id for r in self.rows if r.id in self.marked] or sorted(self.marked)
        else:
            run = self.selected()
            if run is None:
                self.notify(
                    "mark runs with space (or select a run of a sweep) to compare", severity="warning"
                )
                return
            ids = [
                r.id
                for r in self.runs.values()
                if r.spec_name == run.spec_name and r.spec_hash == run.spec_hash
            ]
            if len(ids) < 2:
                self.notify(
                    f"{run.name} is the only run of its spec: mark runs with space to compare them",
                    severity="warning",
                )
                return
        self.app.push_screen(CompareScreen(ids))

    def action_cancel_run(self) -> None:
        run = self.selected()
        if run is not None:
            run_commands.cancel_run(self.mlbench, run.id, run.name, run.state.value)

    def action_delete_run(self) -> None:
        run = self.selected()
        if run is not None:
            run_commands.delete_run(self.mlbench, run.id, run.name, run.state.value)

    def action_rerun(self) -> None:
        run = self.selected()
        if run is not None:
            run_commands.rerun(self.mlbench, run.id, run.name)
