"""A live metric chart: braille lines, min/max downsampled to the widget width, optional goal line.

Points are appended as they arrive; the widget only marks itself dirty and asks for a refresh, so
many appends within one frame cost one redraw. A redraw reduces each series to about one bucket
per dot column (see ``series.MinMaxSeries``), so it costs the same at 100 or 100k points.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from textual.geometry import Size
from textual.strip import Strip
from textual.widget import Widget

from mlbench_tui.formatting import format_metric
from mlbench_tui.tui.widgets.braille import Run, draw_chart
from mlbench_tui.tui.widgets.series import MinMaxSeries

SERIES_STYLES = 6


class MetricChart(Widget):
    """One chart with one or more named series; ``log_x`` plots x on a log10 scale (sizes)."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        *(f"chart--series-{i}" for i in range(SERIES_STYLES)),
        "chart--goal",
        "chart--axis",
        "chart--label",
    }

    def __init__(
        self,
        title: str = "",
        *,
        goal: float | None = None,
        x_label: str = "step",
        log_x: bool = False,
        metric: str | None = None,
        scale: float = 1.0,
        y_format: Callable[[float], str] | None = None,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.border_title = title
        self.metric_name = metric or title  # the legend shows each series' latest value in its unit
        self.scale = scale  # points are the metric's values times this (us for seconds, GiB for MiB)
        self.y_format = y_format  # the y labels in the chart's unit (bandwidth: 34.7KB/s, not 34.7µ)
        self._empty = "waiting for data…"
        self.goal = goal
        self.x_label = x_label
        self.log_x = log_x
        self._series: dict[str, MinMaxSeries] = {}
        self._labels: dict[str, str] = {}
        self._strips: list[Strip] = []
        self._drawn_size = Size(0, 0)
        self._dirty = True
        self._resolved: dict[str, Style] | None = None  # resolved component styles, see _chart_styles

    # -- data -------------------------------------------------------------------------------
    @property
    def series(self) -> dict[str, MinMaxSeries]:
        return self._series

    def add_points(self, key: str, points: Iterable[tuple[float, float]], label: str | None = None) -> None:
        """Append points to series ``key`` (created on first use); x must be non-decreasing. A new
        ``label`` replaces the series' legend (a rank flagged or no longer flagged)."""
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = MinMaxSeries(key)
        if label is not None or key not in self._labels:
            self._labels[key] = label or key
        if self.log_x:
            for x, y in points:
                if x > 0:
                    series.append(math.log10(x), y)
        else:
            series.extend(points)
        self._invalidate()

    def remove_series(self, key: str) -> None:
        """Drop series ``key`` (if charted)."""
        if self._series.pop(key, None) is not None:
            self._labels.pop(key, None)
            self._invalidate()

    def say_empty(self, text: str) -> None:
        """What the chart says while it has no points (``waiting for data…`` until told otherwise,
        e.g. that the run ended without recording this metric)."""
        if text != self._empty:
            self._empty = text
            self._invalidate()

    def clear(self) -> None:
        self._series.clear()
        self._labels.clear()
        self._invalidate()

    def _invalidate(self) -> None:
        self._dirty = True
        self.refresh()

    # -- rendering --------------------------------------------------------------------------
    def render_strips(self, width: int, height: int) -> list[Strip]:
        """Draw the whole chart at ``width`` x ``height`` cells (also what the benchmark times)."""
        series = list(self._series.values())
        legend = []
        for key, s in self._series.items():
            last = s.last
            value = f" {format_metric(self.metric_name, last[1] / self.scale)}" if last else ""
            legend.append(f"{self._labels[key]}{value}")
        x_label = f"log10 {self.x_label}" if self.log_x else self.x_label
        rows = draw_chart(
            series, width, height, goal=self.goal, x_label=x_label, legend=legend, empty=self._empty,
            y_format=self.y_format,
        )  # fmt: skip
        styles = self._chart_styles()
        return [self._strip(row, styles, width) for row in rows[:height]]

    def _chart_styles(self) -> dict[str, Style]:
        """The chart's styles by name, resolved once: Textual drops its own style cache on every
        ``refresh`` (4 a second per live chart); ours lasts until the CSS or theme changes."""
        if self._resolved is None:
            styles = {
                "": self.rich_style,
                "goal": self.get_component_rich_style("chart--goal"),
                "axis": self.get_component_rich_style("chart--axis"),
                "label": self.get_component_rich_style("chart--label"),
            }
            for i in range(SERIES_STYLES):
                styles[f"series-{i}"] = self.get_component_rich_style(f"chart--series-{i}")
            self._resolved = styles
        return self._resolved

    def notify_style_update(self) -> None:
        self._resolved = None
        self._dirty = True
        super().notify_style_update()

    @staticmethod
    def _strip(row: list[Run], styles: Mapping[str, Style], width: int) -> Strip:
        segments = [Segment(text, styles.get(style)) for text, style in row if text]
        return Strip(segments).adjust_cell_length(width)

    def render_line(self, y: int) -> Strip:
        size = self.content_size
        if self._dirty or size != self._drawn_size:
            self._strips = self.render_strips(size.width, size.height) if size.area else []
            self._drawn_size = size
            self._dirty = False
        if y < len(self._strips):
            return self._strips[y]
        return Strip.blank(size.width, self._chart_styles()[""])
