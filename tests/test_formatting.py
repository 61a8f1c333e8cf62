"""One format per kind of value: golden strings for the edge cases a reader meets (zero,
negative, NaN, None, rounding across a unit boundary), clock readings, ages and tables."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from mlbench_tui.formatting import (
    format_age,
    format_bytes,
    format_duration,
    format_elapsed,
    format_energy,
    format_figure,
    format_latency,
    format_mebibytes,
    format_metric,
    format_mib,
    format_money,
    format_number,
    format_step,
    render_table,
)

NAN = math.nan


def test_durations_read_three_figures_in_a_unit_that_suits_them() -> None:
    cases = {
        0.0286: "28.6 ms",  # a GPU time to accuracy that printed "0.0s"
        0.0004526: "0.453 ms",
        0.425: "0.425 s",
        1.4: "1.40 s",
        16.0: "16.0 s",
        65: "1 m 05 s",
        187: "3 m 07 s",
        3725: "1 h 02 m",
        2 * 86400 + 3 * 3600: "2 d 03 h",
    }
    assert {s: format_duration(s) for s in cases} == cases


def test_durations_round_before_they_choose_a_unit() -> None:
    assert format_duration(0.09996) == "0.100 s"  # 99.96 ms rounds to 100 ms: seconds
    assert format_duration(0.09994) == "99.9 ms"
    assert format_duration(59.96) == "1 m 00 s"  # not "60.0 s"
    assert format_duration(3599.6) == "1 h 00 m"
    assert format_duration(86399) == "1 d 00 h"


def test_durations_zero_negative_and_unknown() -> None:
    assert format_duration(0) == "0 s" and format_duration(-0.0286) == "-28.6 ms"
    assert format_duration(None) == "-" and format_duration(NAN) == "-" and format_duration(math.inf) == "-"
    assert format_duration(None, unknown="—") == "—"
    assert format_duration(1e-9) == "0.00000100 ms"  # never scientific notation


def test_latencies_in_microseconds_then_milliseconds() -> None:
    assert [format_latency(s) for s in (2.565e-5, 5.15e-5, 0.0009994, 0.0009996, 0.0123, 1.5)] == [
        "25.6 us", "51.5 us", "999 us", "1.00 ms", "12.3 ms", "1.50 s",
    ]  # fmt: skip
    assert format_latency(0) == "0 us" and format_latency(-2e-5) == "-20.0 us"
    assert format_latency(None) == "-" and format_latency(NAN) == "-"


def test_step_times_always_in_milliseconds() -> None:
    assert [format_step(s) for s in (0.0004526, 0.0091, 1.25)] == ["0.453 ms", "9.10 ms", "1250 ms"]
    assert format_step(None) == "-" and format_step(NAN) == "-"


def test_energy_in_the_unit_that_reads_one_to_999() -> None:
    cases = {
        185.3: "185 J",  # the H200 run that read "5.15e-05 kWh"
        0.5: "0.500 J",
        999.4: "999 J",
        999.5: "1.00 kJ",
        42_100: "42.1 kJ",
        999.4e3: "999 kJ",
        999.6e3: "278 Wh",
        3.5e6: "972 Wh",
        3.6e6: "1.00 kWh",
        3.6e9: "1000 kWh",
    }
    assert {j: format_energy(j) for j in cases} == cases
    assert format_energy(0) == "0 J" and format_energy(-185) == "-185 J"
    assert format_energy(None) == "-" and format_energy(NAN) == "-"


def test_money_carries_its_currency() -> None:
    assert format_money(1.54e-5, "USD") == "0.0000154 USD"  # read "$0.0000" before
    assert format_money(0.9996, "EUR") == "1.00 EUR"
    assert format_money(1234.567, "CHF") == "1,234.57 CHF"
    assert format_money(0, "USD") == "0.00 USD" and format_money(-3.2, "USD") == "-3.20 USD"
    assert format_money(0.42, None) == "0.420 USD"  # the default currency
    assert format_money(None, "USD") == "-" and format_money(NAN, "USD") == "-"


def test_bytes_in_binary_units() -> None:
    cases = {0: "0 B", 512: "512 B", 1023.6: "1.00 KiB", 4096: "4.00 KiB", 236 * 2**20: "236 MiB"}
    cases |= {1.5 * 2**30: "1.50 GiB", 140 * 2**30: "140 GiB", 1023.6 * 2**20: "1.00 GiB"}
    assert {n: format_bytes(n) for n in cases} == cases
    assert format_bytes(None) == "-" and format_bytes(NAN) == "-"
    assert format_mebibytes(236.0) == "236 MiB" and format_mebibytes(0.004) == "4.10 KiB"
    assert format_mebibytes(None) == "-"


def test_compact_mebibytes_never_read_zero_for_a_small_allocation() -> None:
    assert [format_mib(v) for v in (0.004, 0.0, 12.0, 999.0, 1000.0, 1536.0, 10240.0, 81559.0)] == [
        "4K", "0M", "12M", "999M", "1.0G", "1.5G", "10G", "80G",
    ]  # fmt: skip


def test_plain_numbers_never_in_scientific_notation() -> None:
    assert format_number(2.565e-5) == "0.0000257" and format_number(71.23456, digits=4) == "71.23"
    assert format_number(None) == "-" and format_number(NAN) == "-"


def test_clock_readings_are_whole_seconds() -> None:
    cases = {0: "0s", 5: "5s", 59.9: "59s", 65: "1m05s", 187: "3m07s", 3600: "1h00m", 3725: "1h02m"}
    cases[2 * 86400 + 3 * 3600] = "2d03h"
    assert {s: format_elapsed(s) for s in cases} == cases
    assert format_elapsed(None) == "—" and format_elapsed(math.inf) == "—"
    assert format_elapsed(None, unknown="?") == "?" and format_elapsed(-3) == "0s"


def test_ages_read_as_durations_then_dates() -> None:
    now = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    assert format_age(now - timedelta(seconds=65), now) == "1m05s ago"
    assert format_age((now - timedelta(hours=5)).replace(tzinfo=None), now) == "5h00m ago"  # naive is UTC
    assert format_age(now - timedelta(days=3), now) == "2026-02-26"
    assert format_age(None) == "-"


def test_figures_and_tables() -> None:
    assert [format_figure(16.0, "s"), format_figure(5 / 3, "x"), format_figure(0.5, "%")] == [
        "16.0 s",
        "1.67x",
        "50%",
    ]
    assert format_figure(0.00123, "$") == "0.00123 USD" and format_figure(71.23456) == "71.23"
    assert format_figure(None, "s") == "-" and format_figure(3) == "3" and format_figure(NAN) == "-"
    assert format_figure(5.15e-05, "kWh") == "185 J" and format_figure(2.565e-05) == "0.00002565"
    table = render_table([{"RUN": "a", "STATE": "succeeded"}, {"RUN": "long-name", "STATE": "failed"}])
    assert table.splitlines() == ["RUN        STATE", "a          succeeded", "long-name  failed"]
    assert render_table([]) == ""


def test_metrics_read_in_the_unit_their_name_declares() -> None:
    cases = {
        "step_time": (0.0004526, "0.453 ms"),  # the TUI read 0.0004526
        "phase_backprop": (0.0123, "12.3 ms"),
        "allreduce_fp32_latency_p50": (2.565e-05, "25.6 us"),  # read 2.565e-05
        "time_train": (1.3, "1.30 s"),
        "sys/gpu_mem_used_mib": (236.0, "236 MiB"),
        "gpu_memory_peak_gib": (1.5, "1.50 GiB"),
        "sys/gpu_energy_j": (185.3, "185 J"),
        "sys/gpu_power_w": (123.456, "123 W"),
        "sys/net_recv_mib_s": (1.2, "1.20 MiB/s"),
        "sys/gpu_util": (45.0, "45%"),
        "allreduce_fp32_busbw": (9021.3, "9021 GB/s"),
        "val_global_Prec@1": (94.92, "94.92"),
        "train_loss": (2.3e-05, "0.00002300"),
    }
    assert {name: format_metric(name, value) for name, (value, _) in cases.items()} == {
        name: text for name, (_, text) in cases.items()
    }
    assert format_metric("step_time", None) == "-" and format_metric("lr", NAN) == "-"
