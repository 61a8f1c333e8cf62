"""The run screen: goal progress on top, then tabs for overview, ranks, charts and logs.

State lives here and is changed only by ``on_run_changed`` (batches from ``RunFeed``): the run,
per-rank views, goal metric points, environment and failures. Widgets get the deltas: the charts
(``widgets.chart_grid``) own what they draw, the Logs tab's actions are ``run_logs``'.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any, ClassVar

from mlbench_worker import wire
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Footer, Input, Static, TabbedContent, TabPane
from textual.worker import get_current_worker

from mlbench_tui.errors import MlbenchError
from mlbench_tui.results.ranks import RANK_METRICS, settle_ranks
from mlbench_tui.spec.tasks import sweep_of
from mlbench_tui.store.api_models import EventOut, MetricName, RanksLatest, RunDetail
from mlbench_tui.tui import rank_telemetry, run_charts
from mlbench_tui.tui.actions import bindings
from mlbench_tui.tui.feed import HistoryPlan, RunFeed
from mlbench_tui.tui.goal import goal_status
from mlbench_tui.tui.messages import RunChanged, RunGone, RunSlow, SeriesDelta
from mlbench_tui.tui.rows import _ts
from mlbench_tui.tui.screens import run_commands
from mlbench_tui.tui.screens.run_logs import RunLogsActions
from mlbench_tui.tui.widgets.banner import ConnectionBanner
from mlbench_tui.tui.widgets.chart_grid import ChartGrid
from mlbench_tui.tui.widgets.goal_progress import GoalProgress
from mlbench_tui.tui.widgets.log_view import LogEntry, LogView
from mlbench_tui.tui.widgets.rank_table import RankTable, RankView
from mlbench_tui.tui.widgets.run_overview import environment_renderable, result_renderable, summary_renderable
from mlbench_tui.tui.widgets.status_line import StatusLine

RANK_FIGURES = (*RANK_METRICS, *rank_telemetry.SERIES)  # what the rank table shows of each rank


def _goal_points(d: SeriesDelta) -> list[tuple[float, float]]:
    """(t, value) of a delta for goal progress; a bucket adds its min and max before its last value,
    so the best value stays exact when the server summarises several points into one."""
    if d.mins is None or d.maxs is None:
        return [(t, v) for t, v in zip(d.ts, d.values, strict=True) if v is not None]
    out: list[tuple[float, float]] = []
    for t, v, lo, hi in zip(d.ts, d.values, d.mins, d.maxs, strict=True):
        if lo is not None and hi is not None and lo != hi:
            out.append((t, lo))
            out.append((t, hi))
        if v is not None:
            out.append((t, v))
    return out


def history_plan(run: RunDetail, charts: list[str] | None = None) -> HistoryPlan:
    """What a run screen reads when it opens, and its stream summarises: its charts (by default
    those of ``run_charts.opening_charts``), the goal metric (goal progress) and every rank's step time and
    tracker totals (rank table): their history on a run of a few ranks, each rank's latest
    value on a wide one."""
    goal = run.goal.metric if run.goal is not None else None
    names = list(charts) if charts is not None else run_charts.opening_charts(run)
    if goal and goal not in names:
        names.append(goal)
    if not run_charts.wide(run):
        return HistoryPlan(series=names + [n for n in RANK_FIGURES if n not in names])
    return dataclasses.replace(run_charts.chart_plan(run, names), latest=list(RANK_FIGURES))


class RunDetailScreen(RunLogsActions):
    """Everything about one run, live."""

    SCOPES: ClassVar[tuple[str, ...]] = ("run", "logs")
    BINDINGS: ClassVar = bindings("run", "logs")

    def __init__(self, run_id: str, name: str = "") -> None:
        super().__init__()
        self.run_id = run_id
        self.run_name = name or run_id
        self.run: RunDetail | None = None
        self.ranks: dict[int, RankView] = {}
        self.goal_points: list[tuple[float, float]] = []
        self.goal_rank: int | None = None
        self.metric_names: list[MetricName] = []
        self.environment: dict[str, Any] = {}
        self.failures: list[wire.RankFailed] = []
        self.stop: wire.RunStop | None = None
        self.feed: RunFeed | None = None
        self.gone = False
        self._ranks_stale = False

    def compose(self) -> ComposeResult:
        yield StatusLine(id="title")
        yield ConnectionBanner(id="banner")
        yield GoalProgress(id="goal")
        yield StatusLine(id="loading")
        with TabbedContent(id="tabs", initial="overview"):
            with TabPane("Overview [1]", id="overview"), VerticalScroll():
                yield Static(id="summary")
                yield Static(id="result")
                yield Static(id="environment")
            with TabPane("Ranks [2]", id="ranks"):
                yield RankTable(id="rank-view")
            with TabPane("Charts [3]", id="charts"):
                yield ChartGrid(self.run_id, self.ranks, id="chart-grid")
            with TabPane("Logs [4]", id="logs"):
                yield Input(placeholder="regex to highlight (enter to apply, empty clears)", id="log-search")
                yield Input(
                    placeholder="ranks to show, e.g. 0-7,512 (enter; empty: all ranks)", id="log-ranks"
                )
                yield LogView(id="log-view")
        yield Footer()

    def on_mount(self) -> None:
        self._update_title()
        self.query_one("#log-search", Input).display = False
        self.query_one("#log-ranks", Input).display = False
        self.query_one(LogView).set_live(False)  # the overview is shown first
        self.query_one("#loading", StatusLine).show(Text("loading run…", style="grey50"))
        self.feed = RunFeed(
            self.mlbench.client,
            self.run_id,
            self.post_message,
            self.mlbench.post_status,
            interval=self.mlbench.update_interval,
            history=history_plan,
        )
        self._run_feed(self.feed)
        self.set_interval(1.0, self._tick)

    @work(thread=True, exclusive=True, group="run-feed", exit_on_error=False)
    def _run_feed(self, feed: RunFeed) -> None:
        worker = get_current_worker()
        feed.run(lambda: worker.is_cancelled)

    def refresh_data(self) -> None:
        if self.feed is not None:
            self.feed.wake.set()

    # -- state updates ----------------------------------------------------------------------
    def on_run_gone(self, message: RunGone) -> None:
        self.gone = True
        self.notify(f"run {self.run_name} was deleted", severity="warning")
        self._update_title()

    def on_run_slow(self, message: RunSlow) -> None:
        """A read timed out or failed on the server: say so (the feed retries), no traceback."""
        text = Text("the server is slow to answer; ", style="yellow")
        text.append(f"retrying in {message.retry_in:g} s", style="bold yellow")
        text.append(f"   ({message.detail})", style="grey50")
        loading = self.query_one("#loading", StatusLine)
        loading.display = True
        loading.show(text)

    def on_run_changed(self, message: RunChanged) -> None:
        batch = message.batch
        if batch.run is not None:
            loading = self.query_one("#loading", StatusLine)
            if loading.display:
                loading.display = False
            self._set_run(batch.run)
        for rank in batch.ranks:
            view = self.ranks.setdefault(rank.rank, RankView(rank.rank))
            view.state = rank.state.value
            view.host = rank.host or rank.pod or view.host
        if batch.names is not None:
            self.metric_names = batch.names
        if batch.latest is not None:
            self._add_latest(batch.latest)
        if batch.bands is not None:
            self.charts.add_bands(batch.bands)
        if batch.series:
            self._add_series(batch.series.values())
        if batch.events:
            self._add_events(batch.events)
        if batch.lines:
            self.query_one(LogView).add_lines(
                LogEntry(line.rank, line.stream, line.t, line.text, line.id) for line in batch.lines
            )
        if batch.run is not None or batch.ranks or batch.series or batch.latest is not None:
            self._show_ranks()
        self._update_goal()
        if batch.run is not None or batch.events:
            self._update_overview()

    def _set_run(self, run: RunDetail) -> None:
        first = self.run is None
        self.run = run
        self.run_name = run.name
        for rank in run.ranks:
            view = self.ranks.setdefault(rank.rank, RankView(rank.rank))
            view.state = rank.state.value
            view.host = rank.host or rank.pod or view.host
        for r in range(run.workers):
            self.ranks.setdefault(r, RankView(r))
        if run.result is not None:
            settle_ranks(self.ranks, run.result.step_time)
        if run.result is not None and run.result.telemetry is not None:
            for figures in run.result.telemetry.ranks:
                view = self.ranks.setdefault(figures.rank, RankView(figures.rank))
                view.telemetry.finished(figures)
        if first:
            logs = self.query_one(LogView)
            logs.origin_t = _ts(run.started) or _ts(run.created)
            logs.ranks_seen.update(range(run.workers))
        self.charts.set_run(run)
        self._update_title()

    def _add_latest(self, latest: RanksLatest) -> None:
        """Every rank's latest figures (a wide run opening): O(ranks), no chart work."""
        for series in latest.series:
            for rank, step, epoch, value in zip(
                series.rank, series.step, series.epoch, series.value, strict=True
            ):
                view = self.ranks.get(rank)
                if view is None:
                    view = self.ranks[rank] = RankView(rank)
                if value is not None and not view.take(series.name, value, step):
                    view.telemetry.update(series.name, value)
                if epoch is not None and (view.epoch is None or epoch > view.epoch):
                    view.epoch = epoch

    def _add_series(self, deltas: Iterable[SeriesDelta]) -> None:
        """Fold new points in: O(series) for rank views and goal; the charts take them after."""
        deltas = list(deltas)
        goal_metric = self.run.goal.metric if self.run is not None and self.run.goal is not None else ""
        for d in deltas:
            if not len(d):
                continue
            view = self.ranks.get(d.rank)
            if view is None:
                view = self.ranks[d.rank] = RankView(d.rank)
            step, epoch, value = d.last()
            if value is not None and not view.take(d.name, value):
                view.telemetry.update(d.name, value)
            if step is not None and sweep_of(d.name) is None and (view.step is None or step > view.step):
                view.step = step
            if epoch is not None and (view.epoch is None or epoch > view.epoch):
                view.epoch = epoch
            if d.name == goal_metric:
                if self.goal_rank is None:
                    self.goal_rank = d.rank
                if d.rank == self.goal_rank:
                    self.goal_points.extend(_goal_points(d))
        self.charts.add_series(deltas)

    @property
    def charts(self) -> ChartGrid:
        return self.query_one(ChartGrid)

    def chart_rank(self, rank: int) -> None:
        """Chart one rank's step time beside the bands (a wide run; another rank replaces it)."""
        self.action_show_tab("charts")
        self.charts.chart_rank(rank)

    @on(RankTable.RankChosen)
    def _rank_chosen(self, message: RankTable.RankChosen) -> None:
        self.chart_rank(message.rank)

    def _add_events(self, events: Iterable[EventOut]) -> None:
        for event in events:
            payload = wire.parse_event(event.kind, event.payload)
            if isinstance(payload, wire.Environment) and (not self.environment or event.rank == 0):
                self.environment = dict(payload.facts)
            elif isinstance(payload, wire.RankFailed):
                rank = payload.rank if payload.rank is not None else event.rank
                self.failures.append(dataclasses.replace(payload, rank=rank))
            elif isinstance(payload, wire.RunStop):
                self.stop = payload

    # -- painting ---------------------------------------------------------------------------
    def _tick(self) -> None:
        """Once a second: elapsed time and ETA move even when no data arrives."""
        self._update_goal()

    def _elapsed(self) -> float | None:
        if self.run is None:
            return None
        start = _ts(self.run.started) or _ts(self.run.created)
        end = _ts(self.run.finished) or self.mlbench.clock()
        return max(0.0, end - start) if start else None

    def _update_goal(self) -> None:
        if self.run is None:
            return
        status = goal_status(self.run.goal, self.goal_points)
        result = self.run.result
        self.query_one(GoalProgress).show_goal(
            status,
            state=self.run.state.value,
            elapsed_s=self._elapsed(),
            time_to_goal_s=result.time_to_accuracy_s if result is not None else None,
        )

    def _update_title(self) -> None:
        title = Text()
        title.append(" mlbench ", style="bold reverse")
        title.append(f"  run {self.run_name}", style="bold")
        if self.run is not None:
            state = self.run.state.value
            title.append(
                f"  {state}",
                style={"running": "green", "failed": "red", "succeeded": "bold green"}.get(state, ""),
            )
            title.append(
                f"   {self.run.task} · {self.run.backend} · {self.run.workers} worker(s)", style="grey50"
            )
        if self.gone:
            title.append("   (deleted)", style="bold red")
        self.query_one("#title", StatusLine).show(title)

    def _update_overview(self) -> None:
        if self.run is None:
            return
        self.query_one("#summary", Static).update(summary_renderable(self.run))
        self.query_one("#result", Static).update(result_renderable(self.run, self.failures, self.stop))
        env = self.environment or (dict(self.run.result.fingerprint) if self.run.result else {})
        self.query_one("#environment", Static).update(environment_renderable(env))

    # -- actions ----------------------------------------------------------------------------
    def _show_ranks(self, *, now: bool = False) -> None:
        """Update the rank table, or only mark it stale while its tab is hidden (it is redrawn
        when shown): a table nobody sees should not cost repaints 4 times a second."""
        if now or self.query_one(TabbedContent).active == "ranks":
            self._ranks_stale = False
            self.query_one(RankTable).update_ranks(list(self.ranks.values()))
        else:
            self._ranks_stale = True

    @on(TabbedContent.TabActivated, "#tabs")
    def _tab_shown(self, event: TabbedContent.TabActivated) -> None:
        self._shown(event.pane.id or "")

    def _shown(self, tab: str) -> None:
        """Widgets nobody sees are only marked stale: they catch up when their tab is shown."""
        if tab == "ranks":
            if self._ranks_stale:
                self._show_ranks(now=True)
            self.query_one("#rank-table").focus()  # arrows and enter pick a rank
        self.query_one(LogView).set_live(tab == "logs")

    def action_show_tab(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab
        self._shown(tab)  # at once, not after the tab's activation message

    def action_cancel_run(self) -> None:
        if self.run is not None:
            run_commands.cancel_run(
                self.mlbench,
                self.run.id,
                self.run.name,
                self.run.state.value,
            )

    def action_rerun(self) -> None:
        if self.run is not None:
            run_commands.rerun(self.mlbench, self.run.id, self.run.name)

    def action_pick_metrics(self) -> None:
        """Ask the server for the run's metric names (only now: on a big run they cost a scan),
        then open the picker; with the server slow or gone, the names seen so far are offered."""
        self._fetch_metric_names()

    @work(thread=True, exclusive=True, group="metric-names", exit_on_error=False)
    def _fetch_metric_names(self) -> None:
        error = None
        try:
            names = self.mlbench.client.metric_names(self.run_id)
        except MlbenchError as exc:
            names, error = None, exc
        self.app.call_from_thread(self._open_picker, names, error)

    def _open_picker(self, fetched: list[MetricName] | None, error: BaseException | None) -> None:
        from mlbench_tui.tui.screens.metric_picker import MetricPickerScreen

        if fetched is not None:
            self.metric_names = fetched
        elif error is not None:
            self.notify(f"metric names: {error}; showing the ones seen so far", severity="warning")
        charts = self.charts
        names = sorted({m.name for m in self.metric_names} | set(charts.metric_ranks))

        def picked(chosen: list[str] | None) -> None:
            if chosen is not None and charts.show(chosen):
                if self.feed is not None and self.run is not None:
                    self.feed.show(history_plan(self.run, chosen).names or [])
                self.action_show_tab("charts")

        if self.app.screen is self:
            self.app.push_screen(MetricPickerScreen(names, charts.metrics), picked)

    def action_find_ranks(self) -> None:
        self.action_show_tab("ranks")
        self.query_one(RankTable).find()
