"""The run screen's Logs tab actions: regex search and only-matches, the rank filter (cycled, or
a rank set typed as ``0-7,512``, whose latest lines come from the server), follow, wrap, save.

A mixin of ``RunDetailScreen`` (its ``run_id``, ``mlbench`` app and ``action_show_tab``), kept
apart so the screen's module stays about the run's state.
"""

from __future__ import annotations

from pathlib import Path

from textual import on, work
from textual.screen import Screen
from textual.widgets import Input

from mlbench_tui.ranksets import RankSet, RankSetError, parse_ranks
from mlbench_tui.tui.feed import LOG_LINES
from mlbench_tui.tui.shell import Shell, shell_of
from mlbench_tui.tui.widgets.log_view import LogEntry, LogView


class RunLogsActions(Screen[None]):
    """The Logs tab's actions and handlers (see the module doc)."""

    run_id: str
    run_name: str
    saved_path: Path | None = None

    @property
    def mlbench(self) -> Shell:
        return shell_of(self)

    def action_show_tab(self, tab: str) -> None:  # the screen's own
        raise NotImplementedError

    def _logs(self) -> LogView:
        return self.query_one(LogView)

    def action_search_logs(self) -> None:
        self.action_show_tab("logs")
        search = self.query_one("#log-search", Input)
        search.display = True
        search.focus()

    @on(Input.Submitted, "#log-search")
    def _search(self, event: Input.Submitted) -> None:
        error = self._logs().set_pattern(event.value)
        if error:
            self.notify(error, severity="error")
            return
        event.input.display = False
        self._logs().query_one("RichLog").focus()
        if event.value and self._logs().goto_match() is None:
            self.notify(f"no line matches /{event.value}/", severity="warning")

    def action_next_match(self) -> None:
        self._step_match(1)

    def action_previous_match(self) -> None:
        self._step_match(-1)

    def _step_match(self, step: int) -> None:
        self.action_show_tab("logs")
        logs = self._logs()
        if logs.pattern is None:
            self.notify("search first (/): n and N move between its matches", severity="warning")
        elif logs.goto_match(step) is None:
            self.notify(f"no line matches /{logs.pattern.pattern}/", severity="warning")

    def action_back(self) -> None:
        """Esc closes an open search or rank box, then clears the search highlight, then leaves."""
        boxes = [box for box in self.query(Input) if box.display]
        if boxes:
            for box in boxes:
                box.display = False
            self._logs().query_one("RichLog").focus()
        elif self._logs().pattern is not None:
            self._logs().set_pattern("")
        else:
            self.app.pop_screen()

    def action_filter_ranks(self) -> None:
        self.action_show_tab("logs")
        ranks = self.query_one("#log-ranks", Input)
        ranks.display = True
        ranks.focus()

    @on(Input.Submitted, "#log-ranks")
    def _filter_ranks(self, event: Input.Submitted) -> None:
        try:
            ranks = parse_ranks(event.value) if event.value.strip() else None
        except RankSetError as exc:
            self.notify(exc.message, severity="error")
            return
        self._logs().ranks = ranks
        event.input.display = False
        self._logs().query_one("RichLog").focus()

    @on(LogView.RanksChanged)
    def _log_ranks_changed(self, message: LogView.RanksChanged) -> None:
        if message.ranks is not None:
            self._fetch_log_tail(message.ranks)

    @work(thread=True, exclusive=True, name="logs of a rank set", group="log-tail", exit_on_error=False)
    def _fetch_log_tail(self, ranks: RankSet) -> None:
        """The set's latest lines from the server (the view's buffer holds all ranks' latest)."""
        page = self.mlbench.client.logs(self.run_id, ranks=str(ranks), limit=LOG_LINES, tail=True)
        lines = [LogEntry(ln.rank, ln.stream, ln.t, ln.text, ln.id) for ln in page.lines]
        self.app.call_from_thread(self._logs().show_tail, ranks, lines)

    def action_toggle_grep(self) -> None:
        logs = self._logs()
        if logs.pattern is None:
            self.notify("search first (/): only-matches filters on the search regex", severity="warning")
            return
        logs.only_matches = not logs.only_matches

    def action_cycle_rank(self) -> None:
        self.action_show_tab("logs")
        self._logs().cycle_rank()

    def action_toggle_follow(self) -> None:
        self._logs().follow = not self._logs().follow

    def action_toggle_wrap(self) -> None:
        self._logs().wrap = not self._logs().wrap

    def action_save_logs(self) -> None:
        from mlbench_tui.settings import Paths

        safe = "".join(c if c.isalnum() or c in "._-" else "-" for c in self.run_name)
        path = Path(Paths.from_env().state_dir) / "logs" / f"{safe}.log"
        try:
            count = self._logs().save(path)
        except OSError as exc:
            self.notify(f"cannot save logs: {exc}", severity="error")
            return
        self.notify(f"saved {count} lines to {path}")
        self.saved_path = path
