"""A run's start from its ranks' ``startup`` events: the slowest rank's phases in order, and the
launcher's part from the run's creation to its first rank's process, split at the milestones
the target reported (queued and spawned on Slurm; scheduled, image pulled, pod started and
spawn on Kubernetes)."""

from __future__ import annotations

import pytest

from mlbench_tui.lifecycle import LaunchMilestones, RunState
from mlbench_tui.results.model import RunResult
from mlbench_tui.results.startup import launcher_parts, startup_figures
from mlbench_tui.results.table import render_results, startup_text
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


def test_slurm_splits_the_launcher_part_into_queued_and_spawned() -> None:
    events = [startup(0, 107.5, interpreter=0.1), startup(1, 107.0, interpreter=0.2)]
    milestones = LaunchMilestones(submitted=100.0, started=104.0)
    figures = startup_figures(events, launched_at=100.2, target="slurm", milestones=milestones)
    assert figures is not None and figures.launcher_s == pytest.approx(6.8)
    assert list(figures.launcher_parts) == ["queued", "spawned"]
    assert figures.launcher_parts["queued"] == pytest.approx(3.8)  # run created -> job start
    assert figures.launcher_parts["spawned"] == pytest.approx(3.0)  # job start -> first rank
    text = startup_text(figures)
    assert "; queued and spawned 6.80 s (queued 3.80 s, spawned 3.00 s); rank 1 (slowest of 2): " in text
    table = render_results(
        [RunResult(name="q-gloo-2w", task="0a", workers=2, state=RunState.SUCCEEDED, startup=figures)]
    ).splitlines()
    assert "START" in table[0] and "LAUNCHER" in table[0]
    assert "7.00 s" in table[1] and "queued 3.80 s, spawned 3.00 s" in table[1]


def test_kubernetes_splits_it_into_scheduled_pulled_started_and_spawn() -> None:
    milestones = LaunchMilestones(submitted=101.0, scheduled=102.0, image_pulled=110.0, started=111.0)
    parts = launcher_parts(100.0, 112.5, milestones, "kubernetes")
    assert parts == pytest.approx({"scheduled": 2.0, "image pulled": 8.0, "pod started": 1.0, "spawn": 1.5})
    assert list(parts) == ["scheduled", "image pulled", "pod started", "spawn"]


def test_a_missing_milestone_joins_its_part_to_the_next() -> None:
    no_pull = LaunchMilestones(scheduled=102.0, started=111.0)
    parts = launcher_parts(100.0, 112.5, no_pull, "kubernetes")
    assert parts == pytest.approx({"scheduled": 2.0, "image pulled and pod started": 9.0, "spawn": 1.5})
    only_pulled = LaunchMilestones(image_pulled=110.0)
    parts = launcher_parts(100.0, 112.5, only_pulled, "kubernetes")
    assert parts == pytest.approx({"scheduled and image pulled": 10.0, "pod started and spawn": 2.5})


def test_without_milestones_the_single_figure_stays() -> None:
    events = [startup(0, 103.0, interpreter=0.1)]
    for target, milestones in (
        ("local", LaunchMilestones(started=101.0)),  # spawn alone: nothing to split
        ("slurm", None),
        ("slurm", LaunchMilestones()),
        ("kubernetes", LaunchMilestones(submitted=100.5)),  # no milestone that ends a part
    ):
        figures = startup_figures(events, launched_at=100.0, target=target, milestones=milestones)
        assert figures is not None and figures.launcher_s == pytest.approx(3.0)
        assert figures.launcher_parts == {}
        assert "(" not in startup_text(figures).split(";")[1]


@pytest.mark.parametrize(
    ("started", "first_process", "expected"),
    [
        (99.0, 103.0, {"queued": 0.0, "spawned": 3.0}),  # Slurm's whole-second Start before our creation
        (105.0, 103.0, {"queued": 3.0, "spawned": 0.0}),  # a node's clock ahead of ours
        (101.0, 98.0, {"queued": 0.0, "spawned": 0.0}),  # the first rank's clock behind ours
    ],
)
def test_clock_skew_never_makes_a_part_negative(
    started: float, first_process: float, expected: dict[str, float]
) -> None:
    parts = launcher_parts(100.0, first_process, LaunchMilestones(started=started), "slurm")
    assert parts == pytest.approx(expected)
    assert all(value >= 0 for value in parts.values())
    assert sum(parts.values()) == pytest.approx(max(0.0, first_process - 100.0))


def test_milestones_out_of_order_still_sum_to_the_launcher_part() -> None:
    shuffled = LaunchMilestones(scheduled=108.0, image_pulled=104.0, started=106.0)
    parts = launcher_parts(100.0, 110.0, shuffled, "kubernetes")
    assert all(value >= 0 for value in parts.values())
    assert sum(parts.values()) == pytest.approx(10.0)
    assert parts == pytest.approx({"scheduled": 8.0, "image pulled": 0.0, "pod started": 0.0, "spawn": 2.0})
