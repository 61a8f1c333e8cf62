"""Per-rank figures and their spread across ranks: nearest-rank percentiles, busy time (a step
less its communication), the worst ranks first and the stragglers among them."""

from __future__ import annotations

import pytest

from mlbench_tui.results.ranks import (
    RankFigures,
    against_others,
    find_stragglers,
    percentile,
    spread,
    summarize_ranks,
    worst_first,
)


def test_nearest_rank_percentiles() -> None:
    values = [float(v) for v in range(1, 11)]
    assert [percentile(values, p) for p in (10, 50, 90, 100)] == [1.0, 5.0, 9.0, 10.0]
    assert percentile([4.0], 90) == 4.0
    assert percentile([float(v) for v in range(110)], 90) == 98.0  # ceil(99.0) - 1: no float drift


def test_busy_time_is_the_step_less_its_communication() -> None:
    rank = RankFigures(rank=3, step_time=0.1, compute=6.0, comm=3.0, data=1.0)
    assert rank.comm_share == pytest.approx(0.3) and rank.busy == pytest.approx(0.07)
    assert RankFigures(rank=0, step_time=0.2).busy == 0.2  # no totals yet: the whole step
    assert RankFigures(rank=0, compute=1.0).busy is None and RankFigures(rank=0).comm_share is None
    folded = RankFigures(rank=1)
    assert folded.take("time_communication", 2.0, step=40) and folded.take("step_time", 0.5, step=41)
    assert not folded.take("train_loss", 1.0, step=99)
    assert (folded.comm, folded.step_time, folded.step) == (2.0, 0.5, 41)


def test_synchronous_stragglers_come_first() -> None:
    """Every rank's step takes as long as the slowest one's; the straggler is the rank that
    computes the longest and waits the least."""
    ranks = [RankFigures(rank=r, step_time=0.1, compute=6.0, comm=4.0) for r in range(8)]
    ranks[5] = RankFigures(rank=5, step_time=0.1, compute=9.5, comm=0.5)
    ranks.append(RankFigures(rank=8))  # reported nothing yet
    assert [f.rank for f in worst_first(ranks)] == [5, 0, 1, 2, 3, 4, 6, 7, 8]
    summary = summarize_ranks(ranks, ranks=9, worst=2)
    assert summary.reported == 8 and [f.rank for f in summary.worst] == [5, 0]
    assert summary.stragglers == {5}
    assert summary.comm_share is not None and summary.comm_share.min_rank == 5
    assert summary.comm_share.min == pytest.approx(0.05) and summary.comm_share.p50 == pytest.approx(0.4)
    assert summary.busy is not None and summary.busy.max_rank == 5 and summary.busy.count == 8


def test_spread_leaves_out_what_is_unknown() -> None:
    found = spread({0: 3.0, 1: None, 2: float("nan"), 3: 1.0, 4: 2.0})
    assert found is not None and (found.count, found.min_rank, found.max_rank, found.p50) == (3, 3, 0, 2.0)
    assert spread({0: None}) is None
    assert find_stragglers({0: 1.0, 1: 1.0, 2: 1.3}) == {2} and find_stragglers({0: 5.0}) == set()


def test_a_straggler_is_named_against_the_fast_ranks_at_any_world_size() -> None:
    """Two ranks, one busy 99.5 ms a step and the other 61.1 ms (rank 1 given half a core): the
    median of two is their mean, which 99.5 never passes by 25%; the other rank's figure names it."""
    assert find_stragglers({0: 0.0611, 1: 0.0995}) == {1}
    assert find_stragglers({0: 0.0611, 1: 0.0650}) == set()  # within 25%: nobody held up
    eight = {r: 0.050 + 0.001 * r for r in range(8)} | {3: 0.110}
    assert find_stragglers(eight) == {3}
    # a thousand ranks with one slowed twice over, the rest within a few percent of each other
    many = {r: 0.100 * (1 + 0.03 * ((r * 7919) % 100) / 100) for r in range(1024)} | {517: 0.200}
    assert find_stragglers(many) == {517}
    assert against_others({0: 0.3}) == {} and against_others({0: 0.1, 1: 0.2}) == {0: 0.5, 1: 2.0}
    # among many, a rank is weighed against the others' median, not the fastest one's
    assert against_others({0: 0.05, 1: 0.10, 2: 0.10, 3: 0.12})[3] == pytest.approx(1.2)


def test_the_1024_rank_simulation_names_its_one_slowed_rank() -> None:
    """The scale benchmark's model of a synchronous run (every rank waits for the slowest in the
    all-reduce) with rank 517's compute slowed twice over, as ``MLBENCH_INJECT_FAULT=
    "rank=517,mode=slow,factor=2"`` does: its totals name rank 517 and no other."""
    from benchmarks.scale_model import RunModel

    model = RunModel(1024, slowed={517: 2.0})
    figures = []
    for rank in range(1024):
        p = model.profile(rank)
        figures.append(
            RankFigures(
                rank,
                step_time=model.step_s,
                compute=p.compute_s,
                comm=p.comm_s,
                data=p.load_s,
                other=p.metrics_s,
            )
        )
    summary = summarize_ranks(figures, 1024)
    assert summary.stragglers == {517}
    assert summary.worst[0].rank == 517 and summary.comm_share is not None
    assert summary.comm_share.min_rank == 517  # it waited least in the all-reduce
