"""How numbers, durations, figures and plain-text tables look, wherever the CLI, the TUI or the
report shows them.

One format per kind of value, so ``mlbench status``, ``mlbench results``, the TUI and the report
agree: measured durations with three significant figures in a unit that suits them (``28.6 ms``,
``0.425 s``, ``1 m 05 s``), latencies in ``us``/``ms``, energy in whichever of J, kJ, Wh and kWh
reads 1-999, money with its currency, memory in binary units; never scientific notation. Clock
readings (elapsed, ETA, age) are whole seconds (``3m07s``). JSON output keeps raw SI values and
never passes through here.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from mlbench_worker import wire

UNKNOWN = "—"
MISSING = "-"
DEFAULT_CURRENCY = "USD"


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def significant(value: float, digits: int = 3) -> str:
    """``value`` to ``digits`` significant figures in plain decimal notation (``0.0000154``,
    ``28.6``, ``12346`` keeps its whole digits); ``0`` for zero."""
    if value == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    rounded = round(value, decimals)
    if rounded == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(rounded))))  # 9.996 -> 10.0, not 10.00
    return f"{rounded:.{decimals}f}"


def _rounded(value: float, digits: int = 3) -> float:
    return float(significant(value, digits))


def _signed(value: float, positive: str) -> str:
    return f"-{positive}" if value < 0 else positive


def format_duration(seconds: float | None, *, unknown: str = MISSING) -> str:
    """A measured duration: ``28.6 ms`` and ``0.453 ms`` below 0.1 s, ``0.425 s`` to ``59.9 s``,
    then ``1 m 05 s``, ``1 h 02 m``, ``2 d 03 h``; ``unknown`` for None, NaN or infinity."""
    if seconds is None or not math.isfinite(seconds):
        return unknown
    size = abs(seconds)
    if size == 0:
        return "0 s"
    if _rounded(size * 1e3) < 100:
        return _signed(seconds, f"{significant(size * 1e3)} ms")
    if _rounded(size) < 60:
        return _signed(seconds, f"{significant(size)} s")
    whole = round(size)
    if whole < 3600:
        return _signed(seconds, f"{whole // 60} m {whole % 60:02d} s")
    minutes = round(size / 60)
    if minutes < 24 * 60:
        return _signed(seconds, f"{minutes // 60} h {minutes % 60:02d} m")
    hours = round(size / 3600)
    return _signed(seconds, f"{hours // 24} d {hours % 24:02d} h")


def format_latency(seconds: float | None, *, unknown: str = MISSING) -> str:
    """A latency: ``23.3 us`` below 1 ms, ``1.23 ms`` below 1 s, then as ``format_duration``."""
    if seconds is None or not math.isfinite(seconds):
        return unknown
    size = abs(seconds)
    if size == 0:
        return "0 us"
    if _rounded(size * 1e6) < 1000:
        return _signed(seconds, f"{significant(size * 1e6)} us")
    if _rounded(size * 1e3) < 1000:
        return _signed(seconds, f"{significant(size * 1e3)} ms")
    return format_duration(seconds, unknown=unknown)


def format_step(seconds: float | None, *, unknown: str = MISSING) -> str:
    """A training step's time, always in milliseconds (``9.10 ms``, ``0.453 ms``, ``1250 ms``),
    so steps of different runs line up in one unit."""
    if seconds is None or not math.isfinite(seconds):
        return unknown
    return f"{significant(seconds * 1e3)} ms"


_ENERGY_UNITS = ((1.0, "J"), (1e3, "kJ"), (3.6e3, "Wh"), (3.6e6, "kWh"))


def format_energy(joules: float | None, *, unknown: str = MISSING) -> str:
    """Energy in the first of J, kJ, Wh, kWh that reads below 1000 (``185 J``, ``42.1 kJ``,
    ``278 Wh``, ``12.3 kWh``); kWh beyond that."""
    if joules is None or not math.isfinite(joules):
        return unknown
    size = abs(joules)
    if size == 0:
        return "0 J"
    for factor, unit in _ENERGY_UNITS[:-1]:
        if _rounded(size / factor) < 1000:
            return _signed(joules, f"{significant(size / factor)} {unit}")
    return _signed(joules, f"{significant(size / 3.6e6)} kWh")


def format_money(amount: float | None, currency: str | None = None, *, unknown: str = MISSING) -> str:
    """An amount with its currency code (``12.34 USD``, ``1,234.56 EUR``; below 1, three
    significant figures: ``0.0000154 USD``); ``currency`` defaults to ``DEFAULT_CURRENCY``."""
    if amount is None or not math.isfinite(amount):
        return unknown
    code = currency or DEFAULT_CURRENCY
    size = abs(amount)
    if size == 0:
        return f"0.00 {code}"
    text = significant(size) if _rounded(size) < 1 else f"{size:,.2f}"
    return f"{_signed(amount, text)} {code}"


_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def format_bytes(n: float | None, *, unknown: str = MISSING) -> str:
    """A size in binary units with three significant figures: ``0 B``, ``512 B``, ``4.00 KiB``,
    ``236 MiB``, ``1.50 GiB``, ``140 GiB``."""
    if n is None or not math.isfinite(n):
        return unknown
    size = abs(n)
    if round(size) < 1024:
        return _signed(n, f"{size:.0f} B")
    for power, unit in enumerate(_BYTE_UNITS):
        scaled = size / 1024**power
        if _rounded(scaled) < 1024 or unit == _BYTE_UNITS[-1]:
            return _signed(n, f"{significant(scaled)} {unit}")
    raise AssertionError("unreachable")  # pragma: no cover


def format_mebibytes(mib: float | None, *, unknown: str = MISSING) -> str:
    """``format_bytes`` of a size stored in MiB (telemetry's unit)."""
    return unknown if mib is None or not math.isfinite(mib) else format_bytes(mib * 1024 * 1024)


def format_number(value: float | None, *, digits: int = 3, unknown: str = MISSING) -> str:
    """A plain measured number to ``digits`` significant figures, never in scientific notation."""
    if value is None or not math.isfinite(value):
        return unknown
    return significant(value, digits)


def format_metric(name: str, value: float | None, *, unknown: str = MISSING) -> str:
    """A metric's value in the unit its name declares: step and phase times in ms, latencies in
    us, other ``time_`` totals as durations, memory, energy and power in theirs; anything else
    (losses, accuracies, learning rates) to four significant figures."""
    if value is None or not math.isfinite(value):
        return unknown
    short = name.rsplit("/", 1)[-1]
    if short == wire.STEP_TIME or short.startswith(wire.PHASE_PREFIX):
        return format_step(value)
    if "latency" in short:
        return format_latency(value)
    if short.endswith("_mib"):
        return format_mebibytes(value)
    if short.endswith("_gib"):
        return format_bytes(value * 1024**3)
    if short.endswith("_j"):
        return format_energy(value)
    suffixes = {"_w": "W", "_mhz": "MHz", "_c": "°C", "_gbps": "GB/s", "busbw": "GB/s", "_mib_s": "MiB/s"}
    for suffix, unit in sorted(suffixes.items(), key=lambda item: -len(item[0])):
        if short.endswith(suffix):
            return f"{significant(value)} {unit}"
    if short.startswith("time_") or short.endswith("_s"):
        return format_duration(value)
    if short.endswith(("_util", "_percent")):
        return f"{value:.0f}%"
    text = f"{value:.4g}"
    return significant(value, 4) if "e" in text else text


def format_elapsed(seconds: float | None, *, unknown: str = UNKNOWN) -> str:
    """A clock reading (elapsed, ETA, age): ``42s``, ``3m07s``, ``1h02m``, ``2d03h`` in whole
    seconds, truncated; ``unknown`` for None or a non-finite value."""
    if seconds is None or not math.isfinite(seconds):
        return unknown
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"


def format_age(moment: datetime | None, now: datetime | None = None, *, unknown: str = "-") -> str:
    """How long ago ``moment`` was (``3m07s ago``); its date once it is two days old."""
    if moment is None:
        return unknown
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    seconds = ((now or datetime.now(UTC)) - moment).total_seconds()
    if seconds >= 2 * 86400:
        return moment.strftime("%Y-%m-%d")
    return f"{format_elapsed(seconds)} ago"


def format_figure(value: float | str | None, unit: str = "", *, unknown: str = MISSING) -> str:
    """A measured figure for a results table by its unit: ``s`` (``format_duration``), ``x``
    (``1.67x``), ``%`` (``83%`` of a fraction), ``$`` (``format_money`` in USD), ``MiB``
    (``format_mib``), ``kWh`` (``format_energy``), else a number to four significant figures."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return unknown
    if isinstance(value, str):
        return value
    if unit == "s":
        return format_duration(float(value), unknown=unknown)
    if unit == "x":
        return f"{float(value):.2f}x"
    if unit == "%":
        return f"{100 * float(value):.0f}%"
    if unit == "$":
        return format_money(float(value), DEFAULT_CURRENCY, unknown=unknown)
    if unit == "MiB":
        return format_mib(float(value))
    if unit == "kWh":
        return format_energy(float(value) * 3.6e6, unknown=unknown)
    if isinstance(value, float):
        return significant(value, 4)
    return str(value)


def format_mib(mib: float) -> str:
    """``812M``, ``1.2G``, ``80G``: mebibytes in binary units, like Kubernetes quantities;
    below one MiB in KiB (``4K``), so a small allocation does not read ``0M``."""
    if 0 < mib < 0.5:
        return f"{max(1, round(mib * 1024))}K"
    if mib < 1000:
        return f"{mib:.0f}M"
    gib = mib / 1024
    return f"{gib:.1f}G" if gib < 10 else f"{gib:.0f}G"


def without_empty(rows: Sequence[Mapping[str, str]], keep: Sequence[str] = ()) -> list[dict[str, str]]:
    """``rows`` without the columns (other than ``keep``) that are ``-`` in every row."""
    columns = {c for row in rows for c in row} - set(keep)
    empty = {c for c in columns if all(row.get(c, MISSING) == MISSING for row in rows)}
    return [{k: v for k, v in row.items() if k not in empty} for row in rows]


def render_table(rows: Sequence[Mapping[str, str]], columns: Sequence[str] | None = None) -> str:
    """A plain aligned text table (no colour codes, safe to pipe); the header names the columns."""
    if not rows:
        return ""
    columns = list(columns or rows[0].keys())
    widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in columns}
    lines = ["  ".join(c.ljust(widths[c]) for c in columns).rstrip()]
    for row in rows:
        lines.append("  ".join(str(row.get(c, "")).ljust(widths[c]) for c in columns).rstrip())
    return "\n".join(lines)


_RATE_UNITS = ((1e9, "GB/s"), (1e6, "MB/s"), (1e3, "KB/s"), (1.0, "B/s"))


def format_bandwidth(gbps: float | None, *, unknown: str = MISSING) -> str:
    """A bandwidth given in GB/s (decimal, as nccl-tests reports it) in the first of GB/s, MB/s,
    KB/s and B/s that reads 1 or more: ``12.3 GB/s``, ``34.7 KB/s``, never ``0.0000347``."""
    if gbps is None or not math.isfinite(gbps):
        return unknown
    rate = abs(gbps) * 1e9
    if rate == 0:
        return "0 B/s"
    for factor, unit in _RATE_UNITS:
        if _rounded(rate / factor) >= 1 or unit == "B/s":
            return _signed(gbps, f"{significant(rate / factor)} {unit}")
    raise AssertionError("unreachable")  # pragma: no cover


@dataclass(frozen=True)
class Fitted:
    """A table fitted to a width: its text, and the columns left out to fit."""

    text: str
    left_out: tuple[str, ...] = ()


FOLD_MIN = 24  # the narrowest a folding column gets before columns are left out


def fit_table(
    rows: Sequence[Mapping[str, str]],
    width: int | None,
    *,
    priority: Sequence[str],
    keep: Sequence[str] = (),
    fold: str | None = None,
) -> Fitted:
    """``render_table`` within ``width`` characters (None: as wide as it takes): the ``keep``
    columns stay, the others join in ``priority`` order (those not named in it last) while they
    fit beside the ``fold`` column at ``FOLD_MIN``; the fold column then takes the room left (up to
    its widest cell), its text wrapping onto continuation lines."""
    if not rows:
        return Fitted("")
    columns = list(rows[0].keys())
    widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in columns}

    def total(cols: Sequence[str]) -> int:
        return sum(widths[c] for c in cols) + 2 * (len(cols) - 1)

    if width is None or total(columns) <= width:
        return Fitted(render_table(rows, columns))
    natural = widths.get(fold or "", 0)
    if fold in widths:
        widths[fold] = min(natural, max(len(fold), FOLD_MIN))
    ranked = [c for c in priority if c in columns] + [c for c in columns if c not in priority]
    chosen = [c for c in columns if c in keep or c == fold]
    for column in ranked:
        if column not in chosen and total([*chosen, column]) <= width:
            chosen.append(column)
    dropped = tuple(c for c in columns if c not in chosen)
    columns = [c for c in columns if c in chosen]
    if fold in widths:
        widths[fold] = max(widths[fold], min(natural, widths[fold] + width - total(columns)))
    lines = ["  ".join(c.ljust(widths[c]) for c in columns).rstrip()]
    for row in rows:
        cells = {c: [str(row.get(c, ""))] for c in columns}
        if fold in cells:
            cells[fold] = textwrap.wrap(cells[fold][0], widths[fold], break_on_hyphens=False) or [""]
        for i in range(max(len(v) for v in cells.values())):
            parts = [(cells[c][i] if i < len(cells[c]) else "").ljust(widths[c]) for c in columns]
            lines.append("  ".join(parts).rstrip())
    return Fitted("\n".join(lines), tuple(dropped))
