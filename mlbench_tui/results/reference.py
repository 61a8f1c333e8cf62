"""Expected values: what a run's figures should be on its kind of machine.

``reference.csv`` (shipped with the package) holds, per machine class (a GPU model from the
catalog, or a CPU model and its core count), the step time per task, precision, implementation,
batch and world size, and task 0a's smallest-size latency and peak bus bandwidth, each measured
by the project's own suites (``python -m benchmarks gpu_suite``/``gpu_check`` on a GPU,
``python -m benchmarks cpu_suite`` on a CPU) with where and when. ``compare`` sets a run against
its row and flags a figure outside the row's tolerance (a ratio within ``1/(1+t)`` .. ``1+t``);
``reference_rows`` turns a suite's results into rows, ready to add to the table.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from functools import cache
from importlib import resources

from mlbench_tui.formatting import format_latency, format_number, format_step
from mlbench_tui.results.model import RunResult
from mlbench_tui.spec.gpus import GPU_MODELS

STEP_TIME = "step_time_ms"
LATENCY = "allreduce_latency_min_size_us"
BUSBW = "allreduce_peak_busbw_gbps"
DEFAULT_TOLERANCE = {STEP_TIME: 0.25, LATENCY: 1.0, BUSBW: 0.5}
"""How far a run may be from its row before it is flagged (all-reduce latencies of a few
microseconds vary by 2x from run to run)."""


@dataclass(frozen=True)
class ReferenceRow:
    """One expected figure on one machine class."""

    machine: str  # "H200", or "cpu: AMD EPYC x2"
    task: str
    precision: str
    implementation: str  # "eager" or "graphs"
    workers: int
    batch: int | None  # per rank; None where the task batches by tokens
    figure: str
    value: float
    tolerance: float
    source: str  # how it was measured
    measured: str  # when (ISO date)

    def key(self) -> tuple[str, str, str, str, int, int | None, str]:
        return (
            self.machine,
            self.task,
            self.precision,
            self.implementation,
            self.workers,
            self.batch,
            self.figure,
        )


@dataclass(frozen=True)
class Comparison:
    """One figure of a run against its reference row."""

    figure: str
    value: float
    row: ReferenceRow

    @property
    def ratio(self) -> float:
        return self.value / self.row.value

    @property
    def within(self) -> bool:
        return 1 / (1 + self.row.tolerance) <= self.ratio <= 1 + self.row.tolerance

    def text(self) -> str:
        """``step 10.9 ms, 1.02x the H200 reference (fp32 eager, gpu_suite 2026-11-27)``; a flag
        and the tolerance when outside it."""
        row = self.row
        what = {STEP_TIME: "step", LATENCY: "latency", BUSBW: "peak busbw"}[self.figure]
        how = f"{row.precision} {row.implementation}, {row.source} {row.measured}"
        text = (
            f"{what} {_shown(self.figure, self.value)}, {self.ratio:.2f}x the {row.machine} reference "
            f"({_shown(self.figure, row.value)}; {how})"
        )
        if not self.within:
            text += f" ! outside +-{row.tolerance:.0%}"
        return text


def _shown(figure: str, value: float) -> str:
    """A figure as people read it: step times and latencies in their unit, bandwidth in GB/s."""
    if figure == STEP_TIME:
        return format_step(value / 1000)
    if figure == LATENCY:
        return format_latency(value / 1e6)
    return f"{format_number(value)} GB/s"


@cache
def table() -> tuple[ReferenceRow, ...]:
    """The shipped reference rows."""
    text = resources.files("mlbench_tui.results").joinpath("reference.csv").read_text()
    return tuple(_row(line) for line in csv.DictReader(line for line in text.splitlines() if line[:1] != "#"))


def _row(line: dict[str, str]) -> ReferenceRow:
    return ReferenceRow(
        machine=line["machine"],
        task=line["task"],
        precision=line["precision"],
        implementation=line["implementation"],
        workers=int(line["workers"]),
        batch=int(line["batch"]) if line["batch"] else None,
        figure=line["figure"],
        value=float(line["value"]),
        tolerance=float(line["tolerance"]),
        source=line["source"],
        measured=line["measured"],
    )


def gpu_class(device_name: str) -> str | None:
    """The catalog model a device is (``NVIDIA H100 80GB HBM3`` -> ``H100``): every word of the
    model is a word of the name; the most specific such model (``A100-80GB`` over ``A100``)."""
    words = set(re.split(r"[\s_-]+", device_name.upper()))
    fits = [m for m in GPU_MODELS if set(re.split(r"[\s_-]+", m.upper())) <= words]
    return max(fits, key=len) if fits else None


def machine_class(result: RunResult) -> str | None:
    """A run's machine class from its fingerprint: its GPU model, else its CPU model and cores."""
    fingerprint = result.fingerprint
    gpu = fingerprint.get("gpu_model")
    if isinstance(gpu, str) and gpu:
        return gpu_class(gpu)
    cpu, cores = fingerprint.get("cpu_model"), fingerprint.get("cpu_count")
    if isinstance(cpu, str) and isinstance(cores, int):
        return f"cpu: {cpu} x{cores}"
    return None


def _implementation(result: RunResult) -> str:
    return "graphs" if result.implementation.cuda_graphs else "eager"


def _measured(result: RunResult) -> dict[str, float]:
    """The run's figures a reference row can hold."""
    out: dict[str, float] = {}
    if result.step_time_s is not None:
        out[STEP_TIME] = result.step_time_s * 1000
    for dtype, figures in (result.allreduce or {}).items():
        if dtype != (result.precision or "fp32"):
            continue
        if figures.min_size_latency_p50_s is not None:
            out[LATENCY] = figures.min_size_latency_p50_s * 1e6
        if figures.peak_busbw_gbps is not None and not figures.latency_only:
            out[BUSBW] = figures.peak_busbw_gbps
    return out


def _key(result: RunResult, machine: str, figure: str) -> tuple[str, str, str, str, int, int | None, str]:
    return (
        machine,
        result.task,
        result.precision or "fp32",
        _implementation(result),
        result.workers,
        result.batch_size,
        figure,
    )


def compare(result: RunResult, rows: Sequence[ReferenceRow] | None = None) -> list[Comparison]:
    """The run's figures against the rows for its machine class, task, precision, implementation,
    world size and batch (none without such a row, for a run that did not succeed, or for one on
    emulated links: the rows were measured on the machine's own network)."""
    machine = machine_class(result)
    if machine is None or not result.succeeded or result.network is not None:
        return []
    by_key = {row.key(): row for row in (table() if rows is None else rows)}
    found = []
    for figure, value in _measured(result).items():
        row = by_key.get(_key(result, machine, figure))
        if row is not None and value > 0:
            found.append(Comparison(figure, value, row))
    return found


def reference_rows(results: Iterable[RunResult], *, source: str, measured: str) -> list[ReferenceRow]:
    """Rows for the succeeded ``results`` of a suite run on one machine, ready to add."""
    rows = []
    for result in results:
        machine = machine_class(result)
        if machine is None or not result.succeeded or result.network is not None:
            continue
        for figure, value in _measured(result).items():
            key = _key(result, machine, figure)
            rows.append(
                ReferenceRow(*key[:6], figure, round(value, 4), DEFAULT_TOLERANCE[figure], source, measured)
            )
    return rows


def csv_text(rows: Iterable[ReferenceRow], *, header: bool = True) -> str:
    """``rows`` in ``reference.csv``'s format."""
    names = [f.name for f in fields(ReferenceRow)]
    lines = [",".join(names)] if header else []
    for row in rows:
        values = asdict(row)
        lines.append(",".join("" if values[n] is None else str(values[n]) for n in names))
    return "\n".join(lines) + "\n"
