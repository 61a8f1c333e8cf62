"""The pre-flight of a run, from its ranks' ``preflight`` events: how it went and what it found.

Each rank sends its checks (``mlbench_worker.telemetry.preflight``); the run's figures keep each check at
its worst over the ranks (a fail over a warning over a pass), with the rank it was worst on, and
the probes' figures: the slowest rank's GEMM rate (the run's measured peak, which the efficiency
figures divide by) and the all-reduce probe's latency. ``preflight_lines`` is how status, the
results table's notes, the TUI and the report show it.
"""

from __future__ import annotations

from collections.abc import Iterable

from mlbench_worker import wire
from mlbench_worker.wire import PROBE_ALLREDUCE, PROBE_GEMM

from mlbench_tui.results import events as ev
from mlbench_tui.results.events import EventRecord
from mlbench_tui.results.model import PreflightCheckFigures, PreflightFigures

SEVERITY = {"fail": 3, "warn": 2, "pass": 1, "skip": 0}


def preflight_figures(events: Iterable[EventRecord]) -> PreflightFigures | None:
    """The run's pre-flight (None when no rank ran one)."""
    reports = ev.of(events, wire.Preflight)
    if not reports:
        return None
    worst: dict[str, PreflightCheckFigures] = {}
    gemm: list[float] = []
    latency: list[float] = []
    for event in reports:
        report = event.payload
        rank = report.rank if report.rank is not None else event.rank
        for check in report.checks:
            if check.name == PROBE_GEMM and check.value is not None:
                gemm.append(check.value)
            if check.name == PROBE_ALLREDUCE and check.value is not None:
                latency.append(check.value)
            seen = worst.get(check.name)
            if seen is None or SEVERITY[check.status] > SEVERITY[seen.status]:
                worst[check.name] = PreflightCheckFigures(
                    name=check.name, status=check.status, detail=check.detail, rank=rank,
                    value=check.value, expected=check.expected, unit=check.unit,
                )  # fmt: skip
    statuses = {c.status for c in worst.values()}
    status = "failed" if "fail" in statuses else "warned" if "warn" in statuses else "passed"
    seconds = [r.payload.seconds for r in reports if r.payload.seconds is not None]
    return PreflightFigures(
        status=status,
        stopped=any(r.payload.stopped for r in reports),
        ranks=len({r.rank for r in reports}),
        checks=list(worst.values()),
        gemm_tflops=min(gemm) if gemm else None,
        allreduce_us=max(latency) if latency else None,
        seconds=max(seconds) if seconds else None,
        device=reports[0].payload.device,
    )


def preflight_text(figures: PreflightFigures) -> str:
    """``passed on 2 ranks in 1.2 s: ecc, throttle, processes, clocks pass; gemm_tflops 612
    TFLOP/s; preflight_allreduce_us 24.1 us`` (failures first, with the rank and why)."""
    head = {"passed": "passed", "warned": "! warned", "failed": "! failed"}[figures.status]
    if figures.stopped:
        head += " (the run stopped before training)"
    elif figures.status == "failed":
        head += " (on_failure: warn: the run trained anyway)"
    ranks = f" on {figures.ranks} rank{'s' * (figures.ranks != 1)}" if figures.ranks else ""
    took = f" in {figures.seconds:.2g} s" if figures.seconds is not None else ""
    quiet = [c.name for c in figures.checks if c.status in ("pass", "skip") and c.value is None]
    parts = [f"{head}{ranks}{took}"]
    parts += [
        f"{c.name} {c.status} (rank {c.rank}): {c.detail}"
        for c in figures.checks
        if c.status in ("fail", "warn")
    ]
    parts += [f"{c.name}: {c.detail}" for c in figures.checks if c.status == "pass" and c.value is not None]
    if quiet:
        parts.append(", ".join(quiet) + " ok")
    return "; ".join(parts)


def preflight_short(figures: PreflightFigures | None) -> str:
    """A results table's cell: ``passed``, ``warned: clocks``, ``failed: ecc, processes``."""
    if figures is None:
        return "-"
    bad = [c.name for c in figures.checks if c.status == ("fail" if figures.status == "failed" else "warn")]
    return figures.status + (f": {', '.join(bad)}" if bad else "")
