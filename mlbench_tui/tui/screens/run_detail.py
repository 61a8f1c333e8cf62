"""The run screen: goal progress on top, then tabs for overview, ranks, charts and logs.

State lives here and is changed only by ``on_run_changed`` (batches from ``RunFeed``): the run,
per-rank views, goal metric points, environment and failures. Widgets get the deltas.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import Any, ClassVar

from mlbench_worker import sysmetrics as sm
from mlbench_worker import wire
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import Grid, VerticalScroll
from textual.widgets import Footer, Input, Static, TabbedContent, TabPane
from textual.worker import get_current_worker

from mlbench_tui.errors import MlbenchError
from mlbench_tui.formatting import format_number
from mlbench_tui.results.ranks import RANK_METRICS, STEP_TIME, percentile
from mlbench_tui.spec.tasks import sweep_of
from mlbench_tui.store.api_models import EventOut, MetricBands, MetricName, RanksLatest, RunDetail
from mlbench_tui.tui import rank_telemetry, run_charts
from mlbench_tui.tui.actions import bindings
from mlbench_tui.tui.feed import HistoryPlan, RunFeed, fetch_history
from mlbench_tui.tui.goal import find_underused, goal_status
from mlbench_tui.tui.messages import RunBatch, RunChanged, RunGone, RunSlow, SeriesDelta
from mlbench_tui.tui.rows import _ts
from mlbench_tui.tui.screens import run_commands
from mlbench_tui.tui.screens.run_logs import RunLogsActions
from mlbench_tui.tui.widgets.banner import ConnectionBanner
from mlbench_tui.tui.widgets.goal_progress import GoalProgress
from mlbench_tui.tui.widgets.log_view import LogEntry, LogView
from mlbench_tui.tui.widgets.metric_chart import MetricChart
from mlbench_tui.tui.widgets.rank_table import RankTable, RankView
from mlbench_tui.tui.widgets.run_overview import environment_renderable, result_renderable, summary_renderable
from mlbench_tui.tui.widgets.status_line import StatusLine

MAX_RANK_SERIES = 6  # a run of more ranks charts its step time as percentile bands across ranks
RANK_FIGURES = (*RANK_METRICS, *rank_telemetry.SERIES)  # what the rank table shows of each rank
BANDS = (("p50", "p50"), ("p90", "p90"), ("max", "max"))  # percentiles across ranks: key, label


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


def wide(run: RunDetail) -> bool:
    """Whether a run has too many ranks to chart one line each (its step time is drawn as bands)."""
    return run.workers > MAX_RANK_SERIES


def chart_plan(run: RunDetail, names: list[str]) -> HistoryPlan:
    """The history of the charts of ``names``: every rank's on a run of a few ranks; on a wide
    run rank 0's (global metrics are equal on every rank) and the step time as bands across
    ranks, so the work stays that of a few series, not of one series per rank."""
    if not wide(run):
        return HistoryPlan(series=list(names))
    return HistoryPlan(
        one_rank=[n for n in names if n != STEP_TIME], bands=[STEP_TIME] if STEP_TIME in names else []
    )


def per_rank(name: str) -> bool:
    """Charts with one line per rank (up to ``MAX_RANK_SERIES``): step time and the telemetry."""
    return name == STEP_TIME or sm.is_sys(name)


def history_plan(run: RunDetail, charts: list[str] | None = None) -> HistoryPlan:
    """What a run screen reads when it opens, and its stream summarises: its charts (by default
    those of ``run_charts.opening_charts``), the goal metric (goal progress) and every rank's step time and
    tracker totals (rank table): their history on a run of a few ranks, each rank's latest
    value on a wide one."""
    goal = run.goal.metric if run.goal is not None else None
    names = list(charts) if charts is not None else run_charts.opening_charts(run)
    if goal and goal not in names:
        names.append(goal)
    if not wide(run):
        return HistoryPlan(series=names + [n for n in RANK_FIGURES if n not in names])
    return dataclasses.replace(chart_plan(run, names), latest=list(RANK_FIGURES))


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
        self.chart_metrics: list[str] = []
        self.environment: dict[str, Any] = {}
        self.failures: list[wire.RankFailed] = []
        self.stop: wire.RunStop | None = None
        self.feed: RunFeed | None = None
        self.gone = False
        self.rank_on_chart: int | None = None  # a wide run's rank whose step time is charted too
        self._band_x = -math.inf  # the step of the last live band point (bands go forward only)
        self._metric_ranks: dict[str, set[int]] = {}
        self._charts: dict[str, MetricChart] = {}  # metric name -> its chart, in grid order
        self._charts_built = False
        self._ranks_stale = False
        self._t0: float | None = None  # x origin of the telemetry charts (seconds)

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
                yield Grid(id="chart-grid")
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
            self._add_bands(batch.bands)
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
        if run.result is not None and run.result.telemetry is not None:
            for figures in run.result.telemetry.ranks:
                view = self.ranks.setdefault(figures.rank, RankView(figures.rank))
                view.telemetry.finished(figures)
        if first:
            logs = self.query_one(LogView)
            logs.origin_t = _ts(run.started) or _ts(run.created)
            logs.ranks_seen.update(range(run.workers))
            self.chart_metrics = run_charts.opening_charts(run)
            self._build_charts()
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

    def _add_bands(self, found: MetricBands) -> None:
        """A wide run's history of percentiles across ranks: one line per percentile."""
        for band in found.bands:
            chart = self._charts.get(band.name)
            if chart is None:
                continue
            xs = [float(s) if s is not None else t for s, t in zip(band.step, band.t, strict=True)]
            scale = run_charts.look(band.name).scale
            for key, label in BANDS:
                ys = [y * scale for y in getattr(band, key)]
                chart.add_points(key, list(zip(xs, ys, strict=True)), label=label)
            if xs:
                self._band_x = max(self._band_x, xs[-1])

    def _add_series(self, deltas: Iterable[SeriesDelta], *, charts_only: bool = False) -> None:
        """Fold new points in: O(series) for rank views and goal, O(points) only for the charts
        (of the chart rank, and on a wide run of the rank charted on demand)."""
        goal_metric = self.run.goal.metric if self.run is not None and self.run.goal is not None else ""
        band_x = None
        for d in deltas:
            if not len(d):
                continue
            self._metric_ranks.setdefault(d.name, set()).add(d.rank)
            if not charts_only:
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
                if d.name == STEP_TIME and step is not None:
                    band_x = step if band_x is None else max(band_x, step)
            if d.name in self.chart_metrics:
                self._chart_points(d.name, d.rank, d)
        if band_x is not None and self._wide:
            self._live_band(float(band_x))
        if not charts_only:
            self._label_gpu_memory()

    def _label_gpu_memory(self) -> None:
        """The GPU memory chart's subtitle: the GPU's total, which a rank reports once."""
        chart = self._charts.get(sm.GPU_MEM_USED_MIB)
        if chart is None or chart.border_subtitle:
            return
        totals = [v.telemetry.gpu_mem_total_mib for v in self.ranks.values()]
        known = [t for t in totals if t is not None]
        if known:
            chart.border_subtitle = f"of {format_number(max(known) / 1024)} GiB per GPU"

    @property
    def _wide(self) -> bool:
        return self.run is not None and wide(self.run)

    def _chart_rank(self, name: str) -> int:
        """Charts show rank 0 (global metrics are equal on every rank), or the lowest rank seen."""
        ranks = self._metric_ranks.get(name)
        return 0 if not ranks or 0 in ranks else min(ranks)

    def _chart_points(self, name: str, rank: int, delta: SeriesDelta) -> None:
        chart = self._charts.get(name)
        if chart is None:
            return
        if not per_rank(name):
            if rank == self._chart_rank(name):
                scale = run_charts.look(name).scale
                chart.add_points(f"r{rank}", [(x, y * scale) for x, y in delta.xy()], label=name)
            return
        if not self._wide:
            shown = rank < MAX_RANK_SERIES
        elif name == STEP_TIME:  # and the bands
            shown = rank == self.rank_on_chart
        else:  # the telemetry of a wide run: the chart rank's (its history is that rank's)
            shown = rank == self._chart_rank(name)
        if not shown:
            return
        scale = run_charts.look(name).scale
        points = [(x, y * scale) for x, y in delta.xy()]
        label = f"rank {rank}"
        if sm.is_sys(name):  # sampled in time: x is seconds since the run started
            origin = self._time_origin(points)
            points = [(t - origin, v) for t, v in points]
        if name == sm.GPU_UTIL:
            utils = {
                r: v.telemetry.gpu_util for r, v in self.ranks.items() if v.telemetry.gpu_util is not None
            }
            label += " ⚠ idle" if rank in find_underused(utils) else ""
        chart.add_points(f"r{rank}", points, label=label)

    def _time_origin(self, points: list[tuple[float, float]]) -> float:
        """The x origin of time-sampled charts: the run's start, else the first sample seen."""
        if self._t0 is None:
            started = self.run.started if self.run is not None else None
            self._t0 = started.timestamp() if started is not None else min(t for t, _ in points)
        return self._t0

    def _live_band(self, x: float) -> None:
        """One point per band from every rank's latest step time: O(ranks) per update, and the
        chart gets three points however many ranks reported."""
        chart = self._charts.get(STEP_TIME)
        if chart is None:
            return
        pairs = sorted((v.step_time, v.rank) for v in self.ranks.values() if v.step_time is not None)
        if not pairs:
            return
        values = [v for v, _ in pairs]
        self._band_x = x = max(self._band_x, x)
        scale = run_charts.look(STEP_TIME).scale
        for (key, label), value in zip(
            BANDS, (percentile(values, 50), percentile(values, 90), values[-1]), strict=True
        ):
            chart.add_points(key, [(x, value * scale)], label=label)

    def chart_rank(self, rank: int) -> None:
        """Chart one rank's step time beside the bands (a wide run; another rank replaces it)."""
        self.action_show_tab("charts")
        if not self._wide or rank == self.rank_on_chart:
            return
        chart = self._charts.get(STEP_TIME)
        if chart is not None and self.rank_on_chart is not None:
            chart.remove_series(f"r{self.rank_on_chart}")
        self.rank_on_chart = rank
        if chart is None:
            self.notify(f"chart step_time (m) to see rank {rank}'s step time", severity="warning")
            return
        self._load_history(HistoryPlan(one_rank=[STEP_TIME], rank=rank), replace=False)

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

    # -- charts -----------------------------------------------------------------------------
    def _build_charts(self) -> None:
        """Chart ``chart_metrics``: charts that stay keep their widget and data, dropped ones go,
        new ones are added at the end and get their history from the server."""
        grid = self.query_one("#chart-grid", Grid)
        goal = self.run.goal if self.run else None
        old, self._charts = self._charts, {}
        added = []
        for name in self.chart_metrics:
            chart = old.pop(name, None)
            if chart is None:
                sweep = sweep_of(name)
                look = run_charts.look(name)
                chart = MetricChart(
                    look.title,
                    metric=name,
                    scale=look.scale,
                    y_format=look.y_format,
                    goal=goal.target if goal is not None and goal.metric == name else None,
                    x_label=sweep.x_label if sweep is not None else "seconds" if sm.is_sys(name) else "step",
                    log_x=sweep is not None,
                    id=f"chart-{_chart_id(name)}",
                    classes="chart",
                )
                if name == STEP_TIME and self.run is not None and wide(self.run):
                    chart.border_subtitle = f"p50 · p90 · max across {self.run.workers} ranks"
                added.append(chart)
            self._charts[name] = chart
        for chart in old.values():
            chart.remove()
        if added:
            grid.mount_all(added)
        grid.styles.grid_size_rows = max(1, math.ceil(len(self._charts) / 2))
        if self.run is not None and added and self._charts_built:  # the first ones come with the run
            names = [name for name, c in self._charts.items() if c in added]
            self._load_history(chart_plan(self.run, names))
            if self.rank_on_chart is not None and STEP_TIME in names:
                self._load_history(HistoryPlan(one_rank=[STEP_TIME], rank=self.rank_on_chart), replace=False)
        self._charts_built = True

    @work(thread=True, name="chart history", group="chart-history", exit_on_error=False)
    def _load_history(self, plan: HistoryPlan, replace: bool = True) -> None:
        """New charts (or a rank charted on demand) start with the run's whole history,
        downsampled by the server."""
        batch = fetch_history(self.mlbench.client, self.run_id, plan)
        self.app.call_from_thread(self._show_history, plan, batch, replace)

    def _show_history(self, plan: HistoryPlan, batch: RunBatch, replace: bool) -> None:
        """History replaces what the stream drew meanwhile (points must come in x order): the
        whole charts, or (``replace`` False) the series of the rank charted on demand."""
        for name in {*(plan.series or ()), *plan.one_rank, *plan.bands}:
            chart = self._charts.get(name)
            if chart is None:
                continue
            if replace:
                chart.clear()
            else:
                chart.remove_series(f"r{plan.rank}")
        if not replace and plan.rank != self.rank_on_chart:
            return  # another rank was chosen meanwhile
        if batch.bands is not None:
            self._add_bands(batch.bands)
        self._add_series(batch.series.values(), charts_only=True)
        if self.run is not None and self.run.state.is_terminal():  # no more is coming: say so
            for name, chart in self._charts.items():
                if not chart.series:
                    chart.say_empty(f"no data: the run ended without recording {name}")

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
        names = sorted({m.name for m in self.metric_names} | set(self._metric_ranks))

        def picked(chosen: list[str] | None) -> None:
            if chosen is not None and chosen != self.chart_metrics:
                self.chart_metrics = chosen
                self._build_charts()
                if self.feed is not None and self.run is not None:
                    self.feed.show(history_plan(self.run, chosen).names or [])
                self.action_show_tab("charts")

        if self.app.screen is self:
            self.app.push_screen(MetricPickerScreen(names, self.chart_metrics), picked)

    def action_find_ranks(self) -> None:
        self.action_show_tab("ranks")
        self.query_one(RankTable).find()


def _chart_id(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)
