"""The run screen's charts: one ``MetricChart`` per charted metric in a grid, and all their state.

The grid decides what each chart draws: rank 0's line for a global metric, a line per rank for
step time and telemetry on a run of a few ranks; on a wide run (``run_charts.wide``) the step time
as p50/p90/max bands across ranks plus one rank charted on demand. It folds the run's series deltas
into the charts, loads a new chart's history from the server (downsampled there) and keeps the x
origin of time-sampled charts. It reads the screen's rank views (step times for the live bands,
GPU utilisation for idle marks, the GPU's total memory) and changes nothing of the screen's state.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from mlbench_worker import sysmetrics as sm
from textual import work
from textual.containers import Grid

from mlbench_tui.formatting import format_number
from mlbench_tui.results.ranks import STEP_TIME, percentile
from mlbench_tui.spec.tasks import sweep_of
from mlbench_tui.store.api_models import MetricBands, RunDetail
from mlbench_tui.tui import run_charts
from mlbench_tui.tui.feed import HistoryPlan, fetch_history
from mlbench_tui.tui.goal import find_underused
from mlbench_tui.tui.messages import RunBatch, SeriesDelta
from mlbench_tui.tui.shell import shell_of
from mlbench_tui.tui.widgets.metric_chart import MetricChart
from mlbench_tui.tui.widgets.rank_table import RankView

BANDS = (("p50", "p50"), ("p90", "p90"), ("max", "max"))  # percentiles across ranks: key, label


class ChartGrid(Grid):
    """The charts of one run (see the module doc); ``ranks`` are the screen's rank views."""

    def __init__(self, run_id: str, ranks: Mapping[int, RankView], *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.run_id = run_id
        self.ranks = ranks
        self.run: RunDetail | None = None
        self.metrics: list[str] = []  # the charted metrics, in grid order
        self.charts: dict[str, MetricChart] = {}  # metric name -> its chart, in grid order
        self.metric_ranks: dict[str, set[int]] = {}  # the ranks seen reporting each metric
        self.rank_on_chart: int | None = None  # a wide run's rank whose step time is charted too
        self._band_x = -math.inf  # the step of the last live band point (bands go forward only)
        self._built = False
        self._t0: float | None = None  # x origin of the telemetry charts (seconds)

    @property
    def wide(self) -> bool:
        return self.run is not None and run_charts.wide(self.run)

    def set_run(self, run: RunDetail) -> None:
        """The run as last read; the first one opens its charts (``run_charts.opening_charts``)."""
        first = self.run is None
        self.run = run
        if first:
            self.metrics = run_charts.opening_charts(run)
            self._build()

    def show(self, metrics: list[str]) -> bool:
        """Chart ``metrics`` (the metric picker's choice); False when they are charted already."""
        if metrics == self.metrics:
            return False
        self.metrics = metrics
        self._build()
        return True

    # -- data -------------------------------------------------------------------------------
    def add_series(self, deltas: Iterable[SeriesDelta]) -> None:
        """Live points: the charted metrics' (of the chart rank, and on a wide run of the rank
        charted on demand), a live band point from every rank's latest step time."""
        band_x = None
        for d in self._fold(deltas):
            if d.name == STEP_TIME:
                step = d.last()[0]
                if step is not None:
                    band_x = step if band_x is None else max(band_x, step)
        if band_x is not None and self.wide:
            self._live_band(float(band_x))
        self._label_gpu_memory()

    def add_bands(self, found: MetricBands) -> None:
        """A wide run's history of percentiles across ranks: one line per percentile."""
        for band in found.bands:
            chart = self.charts.get(band.name)
            if chart is None:
                continue
            xs = [float(s) if s is not None else t for s, t in zip(band.step, band.t, strict=True)]
            scale = run_charts.look(band.name).scale
            for key, label in BANDS:
                ys = [y * scale for y in getattr(band, key)]
                chart.add_points(key, list(zip(xs, ys, strict=True)), label=label)
            if xs:
                self._band_x = max(self._band_x, xs[-1])

    def _fold(self, deltas: Iterable[SeriesDelta]) -> list[SeriesDelta]:
        """Fold the deltas into the charts (O(points) only for what is charted); the non-empty
        deltas, in order."""
        folded = []
        for d in deltas:
            if not len(d):
                continue
            folded.append(d)
            self.metric_ranks.setdefault(d.name, set()).add(d.rank)
            if d.name in self.metrics:
                self._chart_points(d.name, d.rank, d)
        return folded

    def _label_gpu_memory(self) -> None:
        """The GPU memory chart's subtitle: the GPU's total, which a rank reports once."""
        chart = self.charts.get(sm.GPU_MEM_USED_MIB)
        if chart is None or chart.border_subtitle:
            return
        totals = [v.telemetry.gpu_mem_total_mib for v in self.ranks.values()]
        known = [t for t in totals if t is not None]
        if known:
            chart.border_subtitle = f"of {format_number(max(known) / 1024)} GiB per GPU"

    def _chart_rank(self, name: str) -> int:
        """Charts show rank 0 (global metrics are equal on every rank), or the lowest rank seen."""
        ranks = self.metric_ranks.get(name)
        return 0 if not ranks or 0 in ranks else min(ranks)

    def _chart_points(self, name: str, rank: int, delta: SeriesDelta) -> None:
        chart = self.charts.get(name)
        if chart is None:
            return
        if not run_charts.per_rank(name):
            if rank == self._chart_rank(name):
                scale = run_charts.look(name).scale
                chart.add_points(f"r{rank}", [(x, y * scale) for x, y in delta.xy()], label=name)
            return
        if not self.wide:
            shown = rank < run_charts.MAX_RANK_SERIES
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
        chart = self.charts.get(STEP_TIME)
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
        if not self.wide or rank == self.rank_on_chart:
            return
        chart = self.charts.get(STEP_TIME)
        if chart is not None and self.rank_on_chart is not None:
            chart.remove_series(f"r{self.rank_on_chart}")
        self.rank_on_chart = rank
        if chart is None:
            self.notify(f"chart step_time (m) to see rank {rank}'s step time", severity="warning")
            return
        self._load_history(HistoryPlan(one_rank=[STEP_TIME], rank=rank), replace=False)

    # -- charts -----------------------------------------------------------------------------
    def _build(self) -> None:
        """Chart ``metrics``: charts that stay keep their widget and data, dropped ones go, new
        ones are added at the end and get their history from the server."""
        goal = self.run.goal if self.run else None
        old, self.charts = self.charts, {}
        added = []
        for name in self.metrics:
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
                if name == STEP_TIME and self.run is not None and run_charts.wide(self.run):
                    chart.border_subtitle = f"p50 · p90 · max across {self.run.workers} ranks"
                added.append(chart)
            self.charts[name] = chart
        for chart in old.values():
            chart.remove()
        if added:
            self.mount_all(added)
        self.styles.grid_size_rows = max(1, math.ceil(len(self.charts) / 2))
        if self.run is not None and added and self._built:  # the first ones come with the run
            names = [name for name, c in self.charts.items() if c in added]
            self._load_history(run_charts.chart_plan(self.run, names))
            if self.rank_on_chart is not None and STEP_TIME in names:
                self._load_history(HistoryPlan(one_rank=[STEP_TIME], rank=self.rank_on_chart), replace=False)
        self._built = True

    @work(thread=True, name="chart history", group="chart-history", exit_on_error=False)
    def _load_history(self, plan: HistoryPlan, replace: bool = True) -> None:
        """New charts (or a rank charted on demand) start with the run's whole history,
        downsampled by the server."""
        batch = fetch_history(shell_of(self).client, self.run_id, plan)
        self.app.call_from_thread(self._show_history, plan, batch, replace)

    def _show_history(self, plan: HistoryPlan, batch: RunBatch, replace: bool) -> None:
        """History replaces what the stream drew meanwhile (points must come in x order): the
        whole charts, or (``replace`` False) the series of the rank charted on demand."""
        for name in {*(plan.series or ()), *plan.one_rank, *plan.bands}:
            chart = self.charts.get(name)
            if chart is None:
                continue
            if replace:
                chart.clear()
            else:
                chart.remove_series(f"r{plan.rank}")
        if not replace and plan.rank != self.rank_on_chart:
            return  # another rank was chosen meanwhile
        if batch.bands is not None:
            self.add_bands(batch.bands)
        self._fold(batch.series.values())
        if self.run is not None and self.run.state.is_terminal():  # no more is coming: say so
            for name, chart in self.charts.items():
                if not chart.series:
                    chart.say_empty(f"no data: the run ended without recording {name}")


def _chart_id(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)
