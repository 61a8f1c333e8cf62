"""Append-only chart series with a min/max pyramid, so a redraw costs O(width), not O(points).

Every point lands in level 0 (the raw points); every ``LEAF`` points form a level-1 bucket and
every two complete buckets of one level form a bucket of the next. A bucket keeps the x range,
the y minimum and maximum (so a one-step spike survives any zoom level) and the first and last y
(so lines connect). ``buckets(n)`` picks the coarsest level that still has about ``n`` buckets and
fills the not-yet-complete tail from the finer levels: a few dozen items at most beyond ``n``.
Pure Python, no Textual import: the chart and its benchmark share it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

LEAF = 8  # points per level-1 bucket


@dataclass(frozen=True, slots=True)
class Bucket:
    """A contiguous run of points: x range, y extremes, and the first/last y for line joins."""

    x0: float
    x1: float
    ymin: float
    ymax: float
    yfirst: float
    ylast: float


class _Level:
    """Parallel arrays of the buckets of one pyramid level (lists are cheaper than objects)."""

    __slots__ = ("x0", "x1", "yfirst", "ylast", "ymax", "ymin")

    def __init__(self) -> None:
        self.x0: list[float] = []
        self.x1: list[float] = []
        self.ymin: list[float] = []
        self.ymax: list[float] = []
        self.yfirst: list[float] = []
        self.ylast: list[float] = []

    def __len__(self) -> int:
        return len(self.x0)

    def add(self, x0: float, x1: float, ymin: float, ymax: float, yfirst: float, ylast: float) -> None:
        self.x0.append(x0)
        self.x1.append(x1)
        self.ymin.append(ymin)
        self.ymax.append(ymax)
        self.yfirst.append(yfirst)
        self.ylast.append(ylast)

    def bucket(self, i: int) -> Bucket:
        return Bucket(self.x0[i], self.x1[i], self.ymin[i], self.ymax[i], self.yfirst[i], self.ylast[i])


class MinMaxSeries:
    """One named series of (x, y) points; non-finite values are dropped (NaN loss, inf perplexity)."""

    def __init__(self, name: str, points: Iterable[tuple[float, float]] = ()) -> None:
        self.name = name
        self._xs: list[float] = []
        self._ys: list[float] = []
        self._levels: list[_Level] = []  # _levels[i] has buckets of LEAF * 2**i points
        self.xmin = math.inf
        self.xmax = -math.inf
        self.ymin = math.inf
        self.ymax = -math.inf
        self.extend(points)

    def __len__(self) -> int:
        return len(self._xs)

    @property
    def last(self) -> tuple[float, float] | None:
        """The most recent point, or None when the series is empty."""
        if not self._xs:
            return None
        return self._xs[-1], self._ys[-1]

    def append(self, x: float, y: float) -> None:
        """Add one point; amortised O(1) (each point is merged into about two buckets overall)."""
        if not (math.isfinite(x) and math.isfinite(y)):
            return
        xs, ys = self._xs, self._ys
        xs.append(x)
        ys.append(y)
        self.xmin = min(self.xmin, x)
        self.xmax = max(self.xmax, x)
        self.ymin = min(self.ymin, y)
        self.ymax = max(self.ymax, y)
        n = len(xs)
        if n % LEAF:
            return
        lo = n - LEAF
        seg_x = xs[lo:n]
        seg_y = ys[lo:n]
        if not self._levels:
            self._levels.append(_Level())
        self._levels[0].add(min(seg_x), max(seg_x), min(seg_y), max(seg_y), seg_y[0], seg_y[-1])
        level = 0
        while len(self._levels[level]) % 2 == 0:
            below = self._levels[level]
            i = len(below) - 2
            if level + 1 == len(self._levels):
                self._levels.append(_Level())
            self._levels[level + 1].add(
                min(below.x0[i], below.x0[i + 1]),
                max(below.x1[i], below.x1[i + 1]),
                min(below.ymin[i], below.ymin[i + 1]),
                max(below.ymax[i], below.ymax[i + 1]),
                below.yfirst[i],
                below.ylast[i + 1],
            )
            level += 1

    def extend(self, points: Iterable[tuple[float, float]]) -> None:
        for x, y in points:
            self.append(x, y)

    def columns(
        self, max_buckets: int
    ) -> tuple[list[float], list[float], list[float], list[float], list[float], list[float]]:
        """``buckets`` as parallel lists (x0, x1, ymin, ymax, yfirst, ylast): list slices, no objects.

        This is the chart's hot path; raw points come back with x0 == x1 and one y four times.
        """
        n = len(self._xs)
        if n <= max_buckets or not self._levels:
            xs, ys = self._xs[:], self._ys[:]
            return xs, xs, ys, ys, ys, ys
        chosen = len(self._levels) - 1
        for i, level in enumerate(self._levels):
            if len(level) <= max_buckets:
                chosen = i
                break
        out: tuple[list[float], list[float], list[float], list[float], list[float], list[float]]
        out = ([], [], [], [], [], [])
        covered = 0
        for i in range(chosen, -1, -1):
            level = self._levels[i]
            start = covered // (LEAF << i)
            for dst, src in zip(
                out, (level.x0, level.x1, level.ymin, level.ymax, level.yfirst, level.ylast), strict=True
            ):
                dst.extend(src[start:])
            covered = max(covered, len(level) * (LEAF << i))
        tail_x, tail_y = self._xs[covered:], self._ys[covered:]
        for dst, src in zip(out, (tail_x, tail_x, tail_y, tail_y, tail_y, tail_y), strict=True):
            dst.extend(src)
        return out

    def buckets(self, max_buckets: int) -> list[Bucket]:
        """The series as at most about ``max_buckets`` (+ a short tail) buckets, in order.

        Raw points come back as zero-width buckets when there are few enough of them.
        """
        n = len(self._xs)
        if n <= max_buckets or not self._levels:
            return [Bucket(x, x, y, y, y, y) for x, y in zip(self._xs, self._ys, strict=True)]
        # The finest level whose bucket count fits; fall back to the coarsest one.
        chosen = len(self._levels) - 1
        for i, level in enumerate(self._levels):
            if len(level) <= max_buckets:
                chosen = i
                break
        out: list[Bucket] = []
        covered = 0  # number of raw points covered so far
        for i in range(chosen, -1, -1):
            level = self._levels[i]
            size = LEAF << i
            start = covered // size
            for j in range(start, len(level)):
                out.append(level.bucket(j))
            covered = max(covered, len(level) * size)
        for k in range(covered, n):
            y = self._ys[k]
            out.append(Bucket(self._xs[k], self._xs[k], y, y, y, y))
        return out
