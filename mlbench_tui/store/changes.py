"""What a committed write changed, as the writer hands it to its listeners (live streams, caches)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar


@dataclass(frozen=True, slots=True)
class MetricChunk:
    """The metric rows of one stored batch, in the writer's insert layout.

    ``params`` holds ``WIDTH`` values per row in ``FIELDS`` order, the rows' ids count up from
    ``first_id``, and ``names`` maps series ids to metric names. Readers that fold the values
    (live summaries) use ``column`` and ``point`` and never build full rows.
    """

    FIELDS: ClassVar[tuple[str, ...]] = ("series", "rank", "step", "epoch", "t", "value")
    WIDTH: ClassVar[int] = len(FIELDS)

    first_id: int
    run_id: str
    params: list[Any]
    names: Mapping[int, str]

    def __len__(self) -> int:
        return len(self.params) // self.WIDTH

    @property
    def last_id(self) -> int:
        return self.first_id + len(self) - 1

    def column(self, name: str) -> list[Any]:
        """Every row's value of field ``name``, in row order."""
        return self.params[self.FIELDS.index(name) :: self.WIDTH]

    def point(self, row: int) -> list[Any]:
        """``[step, epoch, t, value]`` of row ``row``."""
        start = self.WIDTH * row + 2
        return self.params[start : start + 4]

    def rows(self) -> list[tuple[Any, ...]]:
        """Full rows ``(id, run_id, rank, name, step, epoch, t, value)``, as ``metrics_v`` has them."""
        it = iter(self.params)
        names, run_id, first = self.names, self.run_id, self.first_id
        return [
            (first + i, run_id, rank, names.get(series, ""), step, epoch, t, value)
            for i, (series, rank, step, epoch, t, value) in enumerate(
                zip(it, it, it, it, it, it, strict=True)
            )
        ]


class Change:
    """What one committed job changed: ``kind`` of change, the run, and the rows it wrote.

    Kinds: ``metrics``, ``logs``, ``events`` (rows with ids), ``run`` and ``rank`` (one row holding
    the new ``RunDetail`` or ``RankInfo``), ``run_deleted``. A metrics change from the writer carries
    its ``MetricChunk`` and builds ``rows`` only when asked, so a batch nobody streams costs nothing
    beyond its insert.
    """

    __slots__ = ("_rows", "kind", "metrics", "run_id")

    def __init__(
        self,
        kind: str,
        run_id: str,
        rows: list[tuple[Any, ...]] | None = None,
        *,
        metrics: MetricChunk | None = None,
    ) -> None:
        self.kind = kind
        self.run_id = run_id
        self.metrics = metrics
        self._rows = rows if rows is not None or metrics is not None else []

    @property
    def rows(self) -> list[tuple[Any, ...]]:
        if self._rows is None:
            self._rows = self.metrics.rows() if self.metrics is not None else []
        return self._rows

    def __repr__(self) -> str:
        return f"Change({self.kind!r}, {self.run_id!r}, {len(self.rows)} rows)"
