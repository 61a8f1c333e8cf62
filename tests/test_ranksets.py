"""Rank sets as people type them: parsed into merged ranges, matched and turned into SQL, and
every mistake named with the way to write it."""

from __future__ import annotations

import sqlite3

import pytest

from mlbench_tui.ranksets import MAX_RANGES, RankSetError, parse_ranks


def test_ranges_and_single_ranks_merge_and_match() -> None:
    ranks = parse_ranks(" 512, 0-7,6-9 ,10,1023-1023")
    assert ranks.ranges == ((0, 10), (512, 512), (1023, 1023))
    assert str(ranks) == "0-10,512,1023" and len(ranks) == 13
    assert 0 in ranks and 10 in ranks and 512 in ranks and 11 not in ranks and 1022 not in ranks
    assert list(parse_ranks("3,1-2")) == [1, 2, 3]


def test_the_sql_condition_selects_the_set() -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (rank INTEGER)")
    conn.executemany("INSERT INTO t VALUES (?)", [(r,) for r in range(1024)])
    condition, params = parse_ranks("0-7,512").sql()
    found = [r for (r,) in conn.execute(f"SELECT rank FROM t WHERE {condition} ORDER BY rank", params)]
    assert found == [*range(8), 512]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty rank set (write ranks like 0-7,512)"),
        ("0-x", "'0-x' in '0-x' is not a rank or a range of ranks (write ranks like 0-7,512)"),
        ("1,,2", "rank set '1,,2' has an empty part between commas (write ranks like 0-7,512)"),
        ("9-3", "range '9-3' runs backwards (write it as 3-9)"),
        ("-1", "'-1' in '-1' is not a rank or a range of ranks (write ranks like 0-7,512)"),
        ("70000", "rank 70000 in '70000' is over the largest rank, 65535"),
    ],
)
def test_mistakes_are_named(text: str, message: str) -> None:
    with pytest.raises(RankSetError) as err:
        parse_ranks(text)
    assert err.value.message == message and err.value.exit_code == 2


def test_a_set_of_too_many_ranges_is_refused() -> None:
    assert len(parse_ranks(",".join(str(2 * i) for i in range(MAX_RANGES))).ranges) == MAX_RANGES
    with pytest.raises(RankSetError, match="at most 256"):
        parse_ranks(",".join(str(2 * i) for i in range(MAX_RANGES + 1)))
