"""Compare runs side by side: time to accuracy, speedup, efficiency, comm share, cost, history.

Per run, figures come from the result summary the engine stores with each finished run; speedup
is against a baseline run (the fewest workers that reached the goal, or the one chosen with
``b``). Below, runs of the same configuration are scored over their repeats with the olympic
mean (``mlbench_tui.results.scoring``), as MLPerf does. Beside, two terminal charts draw the
report's own figure data (``mlbench_tui.report``): speedup against workers per backend, and the
all-reduce bus bandwidth curves of compared 0a runs. Below them, each compared configuration's
history (``mlbench results --history``): its runs over time, with the versions each recorded.
``R`` writes the report of the compared runs.
"""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static
from textual.worker import get_current_worker

from mlbench_tui.errors import MlbenchError
from mlbench_tui.formatting import format_duration, format_money, without_empty
from mlbench_tui.report.figure import Figure, Panel
from mlbench_tui.report.inputs import RunRecord, read_series, sweeps, training
from mlbench_tui.report.network import network_figures
from mlbench_tui.report.scaling import scaling_figures
from mlbench_tui.report.sweep import sweep_figures
from mlbench_tui.results.history import HistoryEntry, configuration, histories, history_rows
from mlbench_tui.results.model import RunResult
from mlbench_tui.results.network_sweep import network_lines, network_table
from mlbench_tui.results.table import value_text
from mlbench_tui.results.time_to_accuracy import MetricPoint
from mlbench_tui.server.client import MlbenchClient
from mlbench_tui.store.api_models import RunInfo
from mlbench_tui.tui.actions import bindings
from mlbench_tui.tui.feed import Backoff, sleep_until
from mlbench_tui.tui.messages import ConnectionChanged
from mlbench_tui.tui.rows import CompareRow, compare_rows
from mlbench_tui.tui.shell import Shell, shell_of
from mlbench_tui.tui.widgets.banner import ConnectionBanner
from mlbench_tui.tui.widgets.metric_chart import MetricChart
from mlbench_tui.tui.widgets.rank_table import STATE_STYLES
from mlbench_tui.tui.widgets.sweep_table import sweep_table
from mlbench_tui.tui.widgets.table import FittedTable

COLUMNS = (
    "run",
    "backend",
    "workers",
    "impl",
    "state",
    "time to accuracy",
    "vs baseline",
    "speedup",
    "efficiency",
    "comm share",
    "cost",
    "best",
    "wall time",
)
SORTS = ("workers", "time to accuracy", "speedup", "comm share", "run")


def _f(value: float | None, fmt: str, empty: str = "—") -> str:
    return empty if value is None else format(value, fmt)


def compare_cells(row: CompareRow, baseline: bool) -> tuple[Text | str, ...]:
    name = Text(row.name)
    if baseline:
        name.append("  (baseline)", style="bold cyan")
    tta = (
        format_duration(row.time_to_accuracy_s)
        if row.time_to_accuracy_s is not None
        else ("not reached" if row.reached is False else "—")
    )
    ratio = "—" if row.vs_baseline is None or baseline else f"{row.vs_baseline:.2f}x"
    return (
        name,
        f"{row.backend} {row.network}" if row.network else row.backend,  # its links, when emulated
        str(row.workers),
        row.implementation,
        Text(row.state, style=STATE_STYLES.get(row.state, "")),
        tta,
        ratio,
        _f(row.speedup, ".2f") + ("x" if row.speedup is not None else ""),
        _f(None if row.efficiency is None else row.efficiency * 100, ".0f") + ("%" if row.efficiency else ""),
        _f(None if row.comm_share is None else row.comm_share * 100, ".1f")
        + ("%" if row.comm_share is not None else ""),
        format_money(row.cost, None, unknown="—"),
        "—" if row.best is None else value_text(row.best),
        format_duration(row.wall_time_s),
    )


def config_table(runs: list[RunInfo]) -> Table | Text:
    """Olympic-mean scores per (spec, backend, implementation, workers) when some configuration has
    repeats: the runs each rests on, its spread (a CV above 5% flagged), and the runs left out."""
    from mlbench_tui.results.scoring import score_configs
    from mlbench_tui.results.table import cv_text, score_notes

    scores = score_configs(run.known_result() for run in runs)
    if not scores or all(s.runs < 2 for s in scores):
        return Text(
            "One run per configuration: repeats are scored with the olympic mean here.", style="grey50"
        )
    table = Table(title="Per configuration, over repeats (olympic mean)", title_justify="left", expand=True)
    networked = any(s.network for s in scores)
    for column in (
        "spec",
        "backend",
        "impl",
        "workers",
        *(["network"] if networked else []),
        "runs",
        "time to accuracy",
        "min",
        "max",
        "CV",
        "speedup",
        "efficiency",
    ):
        table.add_column(column)
    for s in scores:
        table.add_row(
            s.spec_name,
            s.backend,
            s.variant,
            str(s.workers),
            *([s.network or "—"] if networked else []),
            f"{s.reached} of {s.runs}",
            format_duration(s.time_to_accuracy_s, unknown="—"),
            format_duration(s.min_s, unknown="—"),
            format_duration(s.max_s, unknown="—"),
            Text(cv_text(s.cv), style="bold red" if s.too_wide else ""),
            _f(s.speedup, ".2f"),
            _f(None if s.efficiency is None else s.efficiency * 100, ".0f"),
        )
    table.caption = "\n".join(score_notes(scores)[1:]) or None
    table.caption_justify = "left"
    return table


SPEEDUP_TITLE = "speedup vs workers"
NETWORK_TITLE = "speedup vs bandwidth per rank (Mbit/s)"
BUSBW_TITLE = "all-reduce bus bandwidth (GB/s)"
LATENCY_TITLE = "all-reduce latency p50 (us): one rank moves no data, so no bandwidth"


def chart_lines(figures: list[Figure], panel_title: str) -> list[tuple[str, list[tuple[float, float]]]]:
    """The lines of ``panel_title`` in each figure (label, points), for a terminal chart; the
    ideal ``y = x`` of a speedup panel becomes a line of its own."""
    lines: list[tuple[str, list[tuple[float, float]]]] = []
    panels: list[tuple[Figure, Panel]] = [
        (f, p) for f in figures for p in f.panels if p.title == panel_title and p.series
    ]
    for figure, panel in panels:
        prefix = f"{figure.key.split('-', 1)[-1]} " if len(panels) > 1 else ""
        for series in panel.series:
            lines.append((prefix + series.label, list(zip(series.x, series.y, strict=True))))
        if any(ref.y is None for ref in panel.refs):
            xs = sorted({x for series in panel.series for x in series.x})
            lines.append((f"{prefix}ideal", [(x, x) for x in xs]))
    return lines


def history_renderable(entries: list[HistoryEntry]) -> Any:
    """Each compared configuration's history (``results.history``): its runs over time with their
    step time, verdicts and versions, and what changed since the run before."""
    groups = histories(entries)
    if not groups:
        return Text("")
    parts: list[Any] = []
    for (spec, stem, machine), members in groups.items():
        rows = without_empty(history_rows(members), ("WHEN", "RUN", "STATE"))
        title = f"History of {stem} (spec {spec}) on {machine}: {len(members)} run(s)"
        table = Table(title=title, title_justify="left", expand=True)
        for column in rows[0]:
            table.add_column(column.lower())
        for row in rows:
            table.add_row(*row.values())
        parts.append(table)
    return _stack(*parts)


class CompareData(Message):
    """The compared runs, with the metrics of their all-reduce sweeps (fetched once each) and the
    history of their configurations."""

    def __init__(
        self,
        runs: list[RunInfo],
        sweeps: dict[str, dict[str, tuple[MetricPoint, ...]]],
        history: list[HistoryEntry] | None = None,
    ) -> None:
        super().__init__()
        self.runs = runs
        self.sweeps = sweeps
        self.history = history or []


class CompareScreen(Screen[None]):
    """Side-by-side table of chosen runs, refreshed while any of them is still going."""

    SCOPES: ClassVar[tuple[str, ...]] = ("compare",)
    BINDINGS: ClassVar = bindings("compare")

    def __init__(self, run_ids: list[str], *, report_dir: Path | None = None) -> None:
        super().__init__()
        self.run_ids = list(run_ids)
        self.runs: dict[str, RunInfo] = {}
        self.sweeps: dict[str, dict[str, tuple[MetricPoint, ...]]] = {}
        self.rows: list[CompareRow] = []
        self.baseline_id: str | None = None
        self.chosen_baseline: str | None = None
        self.sort = "workers"
        self.report_dir = report_dir  # where R writes (the working directory when None)
        self.charted = False  # the charts hold the latest data (tests wait for it)
        self.report_path: Path | None = None  # the last report R wrote
        self.unshown: list[str] = []  # the charts left out, and why
        self.history: list[HistoryEntry] = []  # the compared configurations' runs over time
        self._finished: dict[str, RunResult] = {}  # an ended run's result with today's figures

    @property
    def mlbench(self) -> Shell:
        return shell_of(self)

    def compose(self) -> ComposeResult:
        yield Static(id="title")
        yield ConnectionBanner(id="banner")
        yield FittedTable(cursor_type="row", zebra_stripes=True, id="compare")
        with Horizontal(id="compare-charts"):
            yield MetricChart(SPEEDUP_TITLE, x_label="workers", id="speedup-chart")
            yield MetricChart(BUSBW_TITLE, x_label="message size (bytes)", log_x=True, id="busbw-chart")
        yield Static(id="configs")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for column in COLUMNS:
            table.add_column(column, key=column)
        self.query_one("#title", Static).update(
            Text.assemble((" mlbench ", "bold reverse"), f"  compare {len(self.run_ids)} runs")
        )
        table.focus()
        self._poll()

    @work(thread=True, exclusive=True, group="compare-feed", exit_on_error=False)
    def _poll(self) -> None:
        worker = get_current_worker()
        client = self.mlbench.client
        backoff = Backoff()
        while not worker.is_cancelled:
            try:
                runs = client.list_runs(limit=10_000)
            except MlbenchError as exc:
                delay = backoff.next()
                self.mlbench.post_status(ConnectionChanged(False, exc.message, delay))
                sleep_until(time.monotonic() + delay, lambda: worker.is_cancelled)
                continue
            if backoff.attempt:
                self.mlbench.post_status(ConnectionChanged(True))
            backoff.reset()
            wanted = [r for r in runs if r.id in set(self.run_ids)]
            sweeps = dict(self.sweeps)
            for run in wanted:  # a finished sweep's curves do not change: fetch them once
                if run.id not in sweeps and run.goal is None and run.state.is_terminal():
                    sweeps[run.id] = read_series(client, run.id, rank=0, points=None)
            self.post_message(CompareData(wanted, sweeps, self._history(client, runs, wanted)))
            going = any(r.state.value in ("running", "pending") for r in wanted)
            sleep_until(time.monotonic() + (2.0 if going else 10.0), lambda: worker.is_cancelled)

    def _history(
        self, client: MlbenchClient, runs: list[RunInfo], wanted: list[RunInfo]
    ) -> list[HistoryEntry]:
        """Every finished run of the compared runs' configurations (an ended run's result is read
        once, with the figures an older version did not store)."""
        keys = {configuration(r.known_result()) for r in wanted}
        entries = []
        for run in runs:
            ended = run.state.is_terminal() and run.result is not None
            if not ended or configuration(run.known_result()) not in keys:
                continue
            if run.id not in self._finished:
                self._finished[run.id] = run.known_result()
            entries.append(HistoryEntry(run.created, self._finished[run.id]))
        return entries

    def on_compare_data(self, message: CompareData) -> None:
        message.stop()
        self.runs = {r.id: r for r in message.runs}
        self.sweeps = message.sweeps
        self.history = message.history
        self._rebuild()
        self._chart()

    def _rebuild(self) -> None:
        ordered = [self.runs[i] for i in self.run_ids if i in self.runs]
        rows, self.baseline_id = compare_rows(ordered, self.chosen_baseline)
        key = {
            "workers": lambda r: (r.workers, r.name),
            "time to accuracy": lambda r: (r.time_to_accuracy_s is None, r.time_to_accuracy_s or 0.0),
            "speedup": lambda r: (r.speedup is None, -(r.speedup or 0.0)),
            "comm share": lambda r: (r.comm_share is None, r.comm_share or 0.0),
            "run": lambda r: (r.name,),
        }[self.sort]
        self.rows = sorted(rows, key=key)
        table = self.query_one(DataTable)
        selected = self.selected_id()
        table.clear()
        for row in self.rows:
            table.add_row(*compare_cells(row, row.id == self.baseline_id), key=row.id)
        if selected is not None:
            ids = [r.id for r in self.rows]
            if selected in ids:
                table.move_cursor(row=ids.index(selected), animate=False)
        self._rebuild_note()

    def _rebuild_note(self) -> None:
        """Below the table: its order, what is not charted and why (said once), and the scores."""
        ordered = [self.runs[i] for i in self.run_ids if i in self.runs]
        missing = len(self.run_ids) - len(ordered)
        note = Text(f"sorted by {self.sort}", style="grey50")
        if missing:
            note.append(f"   {missing} run(s) no longer in the store", style="yellow")
        for line in self.unshown:
            note.append(f"\n{line}", style="grey50")
        sweep = sweep_table(ordered, self.sweeps)
        parts: list[Any] = [note, sweep if sweep is not None else config_table(ordered)]
        lines = network_lines([run.known_result() for run in ordered])
        if lines:
            parts.append(Text(network_table(lines)))
        self.query_one("#configs", Static).update(_stack(*parts, history_renderable(self.history)))

    def _chart(self) -> None:
        """Draw the report's speedup and bus bandwidth lines of the compared runs."""
        ordered = [self.runs[i] for i in self.run_ids if i in self.runs]
        records = [RunRecord(r.known_result(), "", self.sweeps.get(r.id, {})) for r in ordered]
        colours: dict[str, str] = {}
        counts = sorted({r.result.workers for r in training(records)})
        no_scaling = (
            "needs a 1-worker run that reached its goal"
            if len(counts) > 1
            else f"every run used {counts[0] if counts else 1} worker(s): no other worker count to compare"
        )
        by_network = network_figures(training(records), colours)
        speedup_chart = self.query_one("#speedup-chart", MetricChart)
        speedup_chart.log_x = bool(by_network)  # swept over bandwidth: speedup against it
        speedup_chart.x_label = "bandwidth (Mbit/s)" if by_network else "workers"
        scaling = by_network or scaling_figures(training(records), colours)
        charts = (
            ("#speedup-chart", NETWORK_TITLE if by_network else SPEEDUP_TITLE, scaling, "Speedup",
             no_scaling),
            ("#busbw-chart", BUSBW_TITLE, sweep_figures(sweeps(records), colours), "Bus bandwidth",
             "no all-reduce run compared"),
        )  # fmt: skip
        unshown = []
        for chart_id, title, figures, panel, empty in charts:
            chart = self.query_one(chart_id, MetricChart)
            chart.clear()
            lines = chart_lines(figures, panel)
            if not lines and panel == "Bus bandwidth":  # one-rank sweeps: latency only
                lines = chart_lines(figures, "Latency p50")
                title = LATENCY_TITLE if lines else title
            for label, points in lines:
                chart.add_points(label, points, label)
            chart.border_title = title
            chart.display = bool(lines)  # a chart with nothing to draw is not shown, only said once
            if not lines:
                unshown.append(f"no {title} chart: {empty}")
        self.query_one("#compare-charts").display = len(unshown) < len(charts)
        self.unshown = unshown
        self._rebuild_note()
        self.charted = True

    def action_write_report(self) -> None:
        ids = [i for i in self.run_ids if i in self.runs]
        if not ids:
            self.notify("no runs to report on yet", severity="warning")
            return
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        self._write_report(ids, (self.report_dir or Path.cwd()) / f"mlbench-report-{stamp}.html")

    @work(thread=True, exclusive=True, group="compare-report", exit_on_error=False)
    def _write_report(self, run_ids: list[str], path: Path) -> None:
        from mlbench_tui.report.build import write_report

        self.app.call_from_thread(self.notify, f"writing the report of {len(run_ids)} runs…")
        try:
            written = write_report(self.mlbench.client, run_ids, path)
        except (MlbenchError, OSError) as exc:
            self.app.call_from_thread(self.notify, f"report failed: {exc}", severity="error")
            return
        self.report_path = path
        self.app.call_from_thread(
            self.notify, f"wrote {path} ({written.runs} runs, {written.figures} figures)", timeout=10
        )

    def selected_id(self) -> str | None:
        table = self.query_one(DataTable)
        if not self.rows or table.cursor_row < 0 or table.cursor_row >= len(self.rows):
            return None
        return self.rows[table.cursor_row].id

    def action_cycle_sort(self) -> None:
        self.sort = SORTS[(SORTS.index(self.sort) + 1) % len(SORTS)]
        self._rebuild()

    def action_set_baseline(self) -> None:
        run_id = self.selected_id()
        if run_id is None:
            return
        row = next(r for r in self.rows if r.id == run_id)
        if row.time_to_accuracy_s is None:
            self.notify(f"{row.name} has no time to accuracy: it cannot be the baseline", severity="warning")
            return
        self.chosen_baseline = run_id
        self._rebuild()

    def action_open_run(self) -> None:
        from mlbench_tui.tui.screens.run_detail import RunDetailScreen

        run_id = self.selected_id()
        if run_id is not None:
            self.app.push_screen(RunDetailScreen(run_id, self.runs[run_id].name))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_open_run()


def _stack(*parts: Any) -> Any:
    from rich.console import Group

    return Group(*parts)
