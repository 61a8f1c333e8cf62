"""The reference table's rows: expected figures per machine class, as data (``reference.csv``).

Catalog data like the GPU models: the plan reads it for the pre-flight's expectations and the
results for verdicts (``results.reference``). A row names the machine class, what moves its
figure and how much the figure varied where it was measured; ``read_rows`` reads the file's
current format and the earlier one, ``csv_text`` writes rows in the current one.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, fields
from functools import cache
from importlib import resources

Z = 2.0
"""Standard deviations either side of the expected value a normal run stays within (~95%)."""
MIN_BAND = 0.01
"""No band is narrower than 1%: below that a verdict would judge the clock, not the machine."""


@dataclass(frozen=True)
class ReferenceRow:
    """One expected figure on one machine class, with how much it varied where it was measured."""

    machine: str  # "H200", or "cpu: AMD EPYC x2"
    task: str
    precision: str
    implementation: str  # "eager" or "graphs"
    workers: int
    batch: int | None  # per rank; None where the task batches by tokens
    figure: str
    value: float
    source: str  # how it was measured
    measured: str  # when (ISO date)
    backend: str | None = None  # None: any (rows from before the column)
    host: str | None = None  # the host CPU model, for GPU figures the host bounds; None: any host
    sizes: str | None = None  # 0a: "1-100000", the sweep's smallest and largest message (elements)
    repetitions: int | None = None  # 0a: timed repetitions per size
    config: str | None = None  # time to accuracy: the configuration's digest (results.summary)
    spread: float | None = None  # relative standard deviation over the reference's repeats
    repeats: int = 1  # runs the value rests on (their median)
    step_spread: float | None = None  # within one run: half the p10-p90 range over the median

    def key(self) -> tuple[object, ...]:
        """What a row is one of: two rows with one key would disagree about one figure."""
        return (
            self.machine,
            self.host,
            self.task,
            self.backend,
            self.precision,
            self.implementation,
            self.workers,
            self.batch,
            self.sizes,
            self.repetitions,
            self.config,
            self.figure,
        )

    def repeats_band(self) -> float | None:
        """The band a new run of a healthy machine stays within, as a fraction of ``value``, from
        the row's repeats: ``Z`` standard deviations widened by the row's own uncertainty
        (``sqrt(1 + 1/n)``: a prediction interval), at least ``MIN_BAND``; None for one run."""
        if self.repeats < 2 or self.spread is None:
            return None
        return max(MIN_BAND, Z * self.spread * math.sqrt(1 + 1 / self.repeats))

    @property
    def size_range(self) -> tuple[int, int] | None:
        """``sizes`` as (smallest, largest) elements; None when unset or unreadable."""
        match = re.fullmatch(r"\s*(\d+)\s*-\s*(\d+)\s*", self.sizes or "")
        return (int(match[1]), int(match[2])) if match else None


@cache
def table() -> tuple[ReferenceRow, ...]:
    """The shipped reference rows."""
    text = resources.files("mlbench_tui.spec").joinpath("reference.csv").read_text()
    return read_rows(text)


def read_rows(text: str) -> tuple[ReferenceRow, ...]:
    """Rows in ``reference.csv``'s format; ``#`` lines are comments. Columns a file of an earlier
    format lacks read as unset, and its ``tolerance`` column (fixed bands) is ignored."""
    lines = (line for line in text.splitlines() if line[:1] != "#")
    return tuple(_row(line) for line in csv.DictReader(lines))


def _optional(line: dict[str, str], name: str) -> str | None:
    value = (line.get(name) or "").strip()
    return value or None


def _row(line: dict[str, str]) -> ReferenceRow:
    def number(name: str) -> float | None:
        value = _optional(line, name)
        return float(value) if value is not None else None

    def integer(name: str) -> int | None:
        value = _optional(line, name)
        return int(value) if value is not None else None

    return ReferenceRow(
        machine=line["machine"],
        task=line["task"],
        precision=line["precision"],
        implementation=line["implementation"],
        workers=int(line["workers"]),
        batch=integer("batch"),
        figure=line["figure"],
        value=float(line["value"]),
        source=line["source"],
        measured=line["measured"],
        backend=_optional(line, "backend"),
        host=_optional(line, "host"),
        sizes=_optional(line, "sizes"),
        repetitions=integer("repetitions"),
        config=_optional(line, "config"),
        spread=number("spread"),
        repeats=integer("repeats") or 1,
        step_spread=number("step_spread"),
    )


COLUMNS = [f.name for f in fields(ReferenceRow)]


def csv_text(rows: Iterable[ReferenceRow], *, header: bool = True) -> str:
    """``rows`` in ``reference.csv``'s format (every column, blank where unset)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    if header:
        writer.writerow(COLUMNS)
    for row in rows:
        values = dataclasses.asdict(row)
        writer.writerow("" if values[n] is None else values[n] for n in COLUMNS)
    return out.getvalue()
