"""A configuration's history: the same spec point on the same hardware over time, with the
versions each run recorded, so a change in a figure can be set beside a change in what ran.

Runs are grouped by spec name, run name (repeats of one point together) and machine class, and
listed oldest first: when, which run, its state, time to accuracy, step time, its verdicts against
the machine's reference, and the versions from its fingerprint (mlbench, torch, CUDA, NCCL, the
driver), each row naming the versions that changed since the row before it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from mlbench_tui.formatting import (
    format_duration,
    format_latency,
    format_number,
    format_step,
    render_table,
    without_empty,
)
from mlbench_tui.results.model import RunResult
from mlbench_tui.results.reference import machine_class
from mlbench_tui.results.table import reference_text

VERSIONS = (
    ("mlbench", "mlbench"),
    ("torch", "torch"),
    ("cuda", "cuda"),
    ("backend_version", "backend"),
    ("nvidia_driver", "driver"),
)
"""Fingerprint keys shown in a history, and the word each reads as."""


@dataclass(frozen=True)
class HistoryEntry:
    """One run of a configuration and when it was created."""

    created: datetime
    result: RunResult


def versions(result: RunResult) -> dict[str, str]:
    """The versions a run recorded (the ``VERSIONS`` it has)."""
    found = {}
    for key, word in VERSIONS:
        value = result.fingerprint.get(key)
        if value is not None and value != "":
            found[word] = str(value)
    return found


def configuration(result: RunResult) -> tuple[str, str, str]:
    """What a history groups by: spec name, the run name without its repeat suffix, machine class."""
    stem = re.sub(r"-r\d+$", "", result.name)
    return result.spec_name, stem, machine_class(result) or "unknown machine"


def histories(entries: Sequence[HistoryEntry]) -> dict[tuple[str, str, str], list[HistoryEntry]]:
    """``entries`` by configuration, each oldest first."""
    groups: dict[tuple[str, str, str], list[HistoryEntry]] = {}
    for entry in sorted(entries, key=lambda e: e.created):
        groups.setdefault(configuration(entry.result), []).append(entry)
    return groups


def _figure(result: RunResult) -> str:
    """The 0a headline (smallest-size latency, peak busbw) for a sweep."""
    figures = (result.allreduce or {}).get(result.precision or "fp32")
    if figures is None:
        return "-"
    latency = format_latency(figures.min_size_latency_p50_s)
    if figures.peak_busbw_gbps is None:
        return latency
    return f"{latency}, {format_number(figures.peak_busbw_gbps)} GB/s"


def history_rows(entries: Sequence[HistoryEntry]) -> list[dict[str, str]]:
    """One configuration's runs, oldest first, each naming the versions that changed."""
    rows = []
    before: dict[str, str] | None = None
    for entry in entries:
        result = entry.result
        now = versions(result)
        changed = (
            []
            if before is None
            else [f"{k} {before.get(k, '-')} -> {v}" for k, v in now.items() if before.get(k) != v]
        )
        rows.append(
            {
                "WHEN": entry.created.strftime("%Y-%m-%d %H:%M"),
                "RUN": result.run_id or result.name,
                "STATE": str(result.state),
                "TIME TO ACC": format_duration(result.time_to_accuracy_s),
                "STEP TIME": format_step(result.step_time_s),
                "SWEEP": _figure(result) if result.task == "0a" else "-",
                "VS REF": reference_text(result),
                "VERSIONS": ", ".join(f"{k} {v}" for k, v in now.items()) or "-",
                "CHANGED": "; ".join(changed) or "-",
            }
        )
        before = now
    return rows


def history_text(entries: Sequence[HistoryEntry]) -> str:
    """Every configuration's history as a titled table."""
    parts = []
    for (spec, stem, machine), members in histories(entries).items():
        title = f"{stem} (spec {spec}) on {machine}: {len(members)} run{'s' * (len(members) != 1)}"
        table = render_table(without_empty(history_rows(members), ("WHEN", "RUN", "STATE")))
        parts.append(f"{title}\n{table}")
    return "\n\n".join(parts) or "no runs"


def history_json(entries: Sequence[HistoryEntry]) -> list[dict[str, object]]:
    """Every configuration's history as JSON: its key and its runs with their figures."""
    return [
        {
            "spec_name": spec,
            "run": stem,
            "machine": machine,
            "runs": [
                {
                    "created": e.created.isoformat(),
                    "run_id": e.result.run_id,
                    "name": e.result.name,
                    "state": str(e.result.state),
                    "time_to_accuracy_s": e.result.time_to_accuracy_s,
                    "step_time_s": e.result.step_time_s,
                    "versions": versions(e.result),
                }
                for e in members
            ],
        }
        for (spec, stem, machine), members in histories(entries).items()
    ]
