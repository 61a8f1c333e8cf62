"""One format per kind of value: durations, ages, figures and plain-text tables."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from mlbench_tui.formatting import format_age, format_duration, format_figure, render_table


def test_durations_pad_the_smaller_unit() -> None:
    cases = {0: "0s", 5: "5s", 59.9: "59s", 65: "1m05s", 187: "3m07s", 3600: "1h00m", 3725: "1h02m"}
    cases[2 * 86400 + 3 * 3600] = "2d03h"
    assert {s: format_duration(s) for s in cases} == cases
    assert format_duration(None) == "—" and format_duration(math.inf) == "—"
    assert format_duration(None, unknown="?") == "?" and format_duration(-3) == "0s"


def test_ages_read_as_durations_then_dates() -> None:
    now = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    assert format_age(now - timedelta(seconds=65), now) == "1m05s ago"
    assert format_age((now - timedelta(hours=5)).replace(tzinfo=None), now) == "5h00m ago"  # naive is UTC
    assert format_age(now - timedelta(days=3), now) == "2026-02-26"
    assert format_age(None) == "-"


def test_figures_and_tables() -> None:
    assert [format_figure(16.0, "s"), format_figure(5 / 3, "x"), format_figure(0.5, "%")] == [
        "16.0s",
        "1.67x",
        "50%",
    ]
    assert format_figure(0.00123, "$") == "$0.0012" and format_figure(71.23456) == "71.23"
    assert format_figure(None, "s") == "-" and format_figure(3) == "3"
    assert [format_figure(v, "MiB") for v in (12.0, 999.0, 1000.0, 1536.0, 10240.0, 81559.0)] == [
        "12M", "999M", "1.0G", "1.5G", "10G", "80G",
    ]  # fmt: skip
    assert format_figure(0.0123456, "kWh") == "0.0123 kWh"
    table = render_table([{"RUN": "a", "STATE": "succeeded"}, {"RUN": "long-name", "STATE": "failed"}])
    assert table.splitlines() == ["RUN        STATE", "a          succeeded", "long-name  failed"]
    assert render_table([]) == ""
