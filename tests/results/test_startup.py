"""A run's start from its ranks' ``startup`` events: the slowest rank's phases in order, and the
launcher's part from the run's creation to its first rank's process."""

from __future__ import annotations

import pytest

from mlbench_tui.results.startup import startup_figures
from mlbench_tui.results.table import startup_text
from mlbench_tui.results.time_to_accuracy import EventRecord


def startup(rank: int, start: float, **phases: float) -> EventRecord:
    return EventRecord("startup", {"rank": rank, "process_start_t": start, "phases": phases}, rank=rank)


def test_the_slowest_rank_and_the_launcher_s_part() -> None:
    events = [
        startup(0, 100.5, first_step=0.2, interpreter=0.1, imports=1.5, rendezvous=0.3),
        startup(1, 100.4, interpreter=0.1, imports=2.5, rendezvous=0.1, first_step=0.2),
        EventRecord("run_start", {}),
    ]
    figures = startup_figures(events, launched_at=100.0, target="slurm")
    assert figures is not None
    assert figures.slowest_rank == 1 and figures.ranks == 2
    assert list(figures.phases) == ["interpreter", "imports", "rendezvous", "first_step"]  # the rank's order
    assert figures.rank_s == pytest.approx(2.9)
    assert figures.launcher_s == pytest.approx(0.4) and figures.launcher == "queued and spawned"
    text = startup_text(figures)
    assert text.startswith("3.30 s before training; queued and spawned 0.400 s; rank 1 (slowest of 2): ")
    assert "imports 2.50 s" in text and "first step 0.200 s" in text


def test_no_report_no_figures_and_clocks_behind_are_not_negative() -> None:
    assert startup_figures([EventRecord("run_start", {})]) is None
    behind = startup_figures([startup(0, 99.0, interpreter=0.1)], launched_at=100.0)
    assert behind is not None and behind.launcher_s == 0.0
    assert startup_figures([startup(0, 99.0, interpreter=0.1)]).launcher_s is None  # type: ignore[union-attr]
