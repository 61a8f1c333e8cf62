"""Per-rank figures and their spread across ranks: nearest-rank percentiles, busy time (a step
less its communication), the worst ranks first and the stragglers among them."""

from __future__ import annotations

import pytest

from mlbench_tui.results.ranks import (
    RankFigures,
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
