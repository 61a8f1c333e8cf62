"""How durations, figures and plain-text tables look, wherever the CLI or the TUI shows them.

One format per kind of value, so ``mlbench status``, the progress lines and the TUI agree:
durations read ``42s``, ``3m07s``, ``1h02m``, ``2d03h`` (whole seconds, truncated).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

UNKNOWN = "—"


def format_duration(seconds: float | None, *, unknown: str = UNKNOWN) -> str:
    """``42s``, ``3m07s``, ``1h02m``, ``2d03h``; ``unknown`` for None or a non-finite value."""
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
    return f"{format_duration(seconds)} ago"


def format_figure(value: float | str | None, unit: str = "", *, unknown: str = "-") -> str:
    """A measured figure for a results table: ``16.0s``, ``1.67x``, ``83%`` (of a fraction),
    ``$0.0042``, memory (``MiB``: ``812M``, ``1.2G``), energy (``kWh``: ``0.0123 kWh``), or a
    number to four significant digits."""
    if value is None:
        return unknown
    if isinstance(value, str):
        return value
    if unit == "s":
        return f"{float(value):.1f}s"
    if unit == "x":
        return f"{float(value):.2f}x"
    if unit == "%":
        return f"{100 * float(value):.0f}%"
    if unit == "$":
        return f"${float(value):.4f}"
    if unit == "MiB":
        return format_mib(float(value))
    if unit == "kWh":
        return f"{float(value):.3g} kWh"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def format_mib(mib: float) -> str:
    """``812M``, ``1.2G``, ``80G``: mebibytes in binary units, like Kubernetes quantities."""
    if mib < 1000:
        return f"{mib:.0f}M"
    gib = mib / 1024
    return f"{gib:.1f}G" if gib < 10 else f"{gib:.0f}G"


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
