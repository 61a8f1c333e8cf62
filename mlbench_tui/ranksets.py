"""Rank sets as people type them: ``0-7,512`` (ranges and single ranks, comma separated).

One parser for every place that filters by rank: the server's log reads (``?ranks=``), the TUI's
rank search and log filter, ``mlbench status --ranks``. A set is kept as sorted, merged inclusive
ranges, so ``0-1023`` costs one range however many ranks it holds, and it turns into one SQL
condition with a bound parameter per range end.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator
from dataclasses import dataclass

from mlbench_tui.errors import UsageError

MAX_RANK = 65_535  # the wire's limit on a rank (api_models.MAX_RANK)
MAX_RANGES = 256  # ranges in one set: a typed filter, not a list of every rank
EXAMPLE = "0-7,512"

_ITEM = re.compile(r"^(\d+)(?:\s*-\s*(\d+))?$")


class RankSetError(UsageError):
    """A rank set that does not parse; the message says which part and how to write one."""


@dataclass(frozen=True)
class RankSet:
    """Inclusive ``(first, last)`` ranges, sorted and merged (adjacent ranges join)."""

    ranges: tuple[tuple[int, int], ...]

    def __contains__(self, rank: object) -> bool:
        if not isinstance(rank, int):
            return False
        i = bisect.bisect_right(self.ranges, (rank, MAX_RANK + 1)) - 1
        return i >= 0 and self.ranges[i][0] <= rank <= self.ranges[i][1]

    def __len__(self) -> int:
        return sum(last - first + 1 for first, last in self.ranges)

    def __iter__(self) -> Iterator[int]:
        for first, last in self.ranges:
            yield from range(first, last + 1)

    def __str__(self) -> str:
        return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in self.ranges)

    def sql(self, column: str = "rank") -> tuple[str, tuple[int, ...]]:
        """``(condition, parameters)`` matching ``column`` against the set, for a WHERE clause."""
        parts: list[str] = []
        params: list[int] = []
        for first, last in self.ranges:
            if first == last:
                parts.append(f"{column} = ?")
                params.append(first)
            else:
                parts.append(f"{column} BETWEEN ? AND ?")
                params += [first, last]
        return "(" + " OR ".join(parts) + ")", tuple(params)


def parse_ranks(text: str) -> RankSet:
    """The rank set written in ``text`` (``3``, ``0-7``, ``0-7,512``; spaces allowed).

    Raises ``RankSetError`` naming the part that is wrong: an empty set, a part that is not a
    rank or a range, a range written backwards, a rank over ``MAX_RANK``, too many ranges."""
    raw = [part.strip() for part in text.split(",")]
    if not any(raw):
        raise RankSetError(f"empty rank set (write ranks like {EXAMPLE})")
    ranges: list[tuple[int, int]] = []
    for part in raw:
        if not part:
            raise RankSetError(
                f"rank set {text!r} has an empty part between commas (write ranks like {EXAMPLE})"
            )
        match = _ITEM.fullmatch(part)
        if match is None:
            raise RankSetError(
                f"{part!r} in {text!r} is not a rank or a range of ranks (write ranks like {EXAMPLE})"
            )
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        if last < first:
            raise RankSetError(f"range {part!r} runs backwards (write it as {last}-{first})")
        if last > MAX_RANK:
            raise RankSetError(f"rank {last} in {text!r} is over the largest rank, {MAX_RANK}")
        ranges.append((first, last))
    merged: list[tuple[int, int]] = []
    for first, last in sorted(ranges):
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], last))
        else:
            merged.append((first, last))
    if len(merged) > MAX_RANGES:
        raise RankSetError(f"rank set {text!r} has {len(merged)} ranges; at most {MAX_RANGES} are allowed")
    return RankSet(tuple(merged))
