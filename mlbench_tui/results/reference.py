"""Expected values: what a run's figures should be on its kind of machine, and its verdict.

``spec/reference.csv`` (shipped with the package; ``spec.reference_table``) holds, per machine
class (a GPU model from the catalog, or a CPU model and its core count), the step time per task,
precision, implementation, backend, batch and world size, task 0a's smallest-size latency and peak
bus bandwidth for a sweep shape (sizes and repetitions), and times to accuracy for one
configuration (``config``), each measured by the project's own suites (``python -m benchmarks
gpu_suite``/``gpu_check`` on a GPU, ``python -m benchmarks cpu_suite`` on a CPU) with where, when
and how much it varied.

A row is matched only on what moves its figure (``ReferenceKey``); a blank column is "any" for
the columns a row may leave out (``backend``, ``host``), while a 0a row must name the sweep it
measured. ``verdicts`` gives each headline figure of a run (time to accuracy, step time, 0a
latency and bus bandwidth) one ``Verdict``: normal, slower or faster by how much against the
expected value with the band it is judged by, or no reference for this hardware. The band comes
from measured spread (``bands``), never from a fixed tolerance; the ratio and the band are both
percentages of the expected value, in the direction that reads as slower or faster.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from mlbench_worker.preflight_config import device_class

from mlbench_tui.results.bands import Band, reference_band, run_band
from mlbench_tui.results.model import RunResult
from mlbench_tui.results.reference_figures import (
    BUSBW,
    FIGURE_NAMES,
    GEMM,
    LATENCY,
    PREFLIGHT_ALLREDUCE,
    STEP_FLOOR,
    STEP_TIME,
    TIME_TO_ACCURACY,
    faster_is_higher,
    measured_figures,
    shown,
)
from mlbench_tui.results.scoring import variation
from mlbench_tui.spec.gpus import GPU_MODELS
from mlbench_tui.spec.reference_table import ReferenceRow, csv_text, read_rows, table

__all__ = [
    "BUSBW",
    "LATENCY",
    "STEP_FLOOR",
    "STEP_TIME",
    "TIME_TO_ACCURACY",
    "ReferenceRow",
    "Verdict",
    "csv_text",
    "gpu_class",
    "machine_class",
    "read_rows",
    "reference_rows",
    "table",
    "verdicts",
]


@dataclass(frozen=True)
class ReferenceKey:
    """What moves a run's figure: the fields a reference row must match."""

    machine: str
    host: str | None
    task: str
    backend: str
    precision: str
    implementation: str
    workers: int
    batch: int | None
    min_size: int | None
    max_size: int | None
    repetitions: int | None
    config: str | None

    def differs(self, row: ReferenceRow, figure: str) -> str | None:
        """The first field of ``row`` that ``self`` does not match for ``figure`` (None: it matches)."""
        checks: list[tuple[str, bool]] = [
            ("machine", row.machine == self.machine),
            ("task", row.task == self.task),
            ("figure", row.figure == figure),
            ("backend", row.backend in (None, self.backend)),
            ("precision", row.precision == self.precision),
            ("implementation", row.implementation == self.implementation),
            ("world size", row.workers == self.workers),
            ("batch", row.batch == self.batch),
            ("host", row.host is None or row.host == self.host),
        ]
        if figure in (LATENCY, BUSBW):
            span = row.size_range
            wanted = self.min_size if figure == LATENCY else self.max_size
            have = None if span is None else span[0] if figure == LATENCY else span[1]
            which = "smallest size" if figure == LATENCY else "largest size"
            checks += [
                (which, have is not None and have == wanted),
                ("repetitions", row.repetitions == self.repetitions),
            ]
        if figure == TIME_TO_ACCURACY:
            checks.append(("configuration", row.config is not None and row.config == self.config))
        return next((name for name, ok in checks if not ok), None)


@dataclass(frozen=True)
class Verdict:
    """One headline figure of a run against its machine's expected value."""

    figure: str
    value: float
    row: ReferenceRow | None = None
    band: Band | None = None
    machine: str | None = None
    missing: str | None = None  # why there is no row ("batch": the rows differ in it)

    @property
    def deviation(self) -> float | None:
        """How far the value is from the expected one, as a fraction of it (signed)."""
        return None if self.row is None else self.value / self.row.value - 1.0

    @property
    def slower(self) -> bool:
        """Whether the deviation points the slow way (a longer time, a lower bandwidth)."""
        d = self.deviation or 0.0
        return d < 0 if faster_is_higher(self.figure) else d > 0

    @property
    def outcome(self) -> str:
        """``normal``, ``slower``, ``faster``, ``no band`` (a row without a measured spread) or
        ``no reference``."""
        if self.row is None:
            return "no reference"
        if self.band is None:
            return "no band"
        if abs(self.deviation or 0.0) <= self.band.half_width:
            return "normal"
        return "slower" if self.slower else "faster"

    @property
    def flagged(self) -> bool:
        """Outside its band: a figure a user should look at."""
        return self.outcome in ("slower", "faster")

    def short(self) -> str:
        """``normal``, ``slower +12%``, ``faster -8%``, ``no ref`` (a results table's cell)."""
        d = self.deviation
        if self.row is None or d is None:
            return "no ref"
        if self.outcome in ("normal", "no band"):
            return f"{self.outcome} ({d:+.0%})" if self.outcome == "no band" else "normal"
        return f"{self.outcome} {d:+.0%}"

    def text(self) -> str:
        """``step 10.9 ms: slower: 12% above expected 9.74 ms (band +-4%, from the reference's 5
        repeats; H200 fp32 eager, gpu_suite 2026-11-27)``; ``no reference for this hardware``."""
        what = f"{FIGURE_NAMES[self.figure]} {shown(self.figure, self.value)}"
        row = self.row
        if row is None:
            where = f" ({self.machine})" if self.machine else ""
            why = f": its rows differ in {self.missing}" if self.missing else ""
            return f"{what}: no reference for this hardware{where}{why}"
        d = self.deviation or 0.0
        side = "above" if d > 0 else "below"
        how = f"{row.machine} {row.precision} {row.implementation}, {row.source} {row.measured}"
        expected = f"{abs(d):.0%} {side} expected {shown(self.figure, row.value)}"
        if self.band is None:
            return f"{what}: {expected} (no measured spread to judge it by; {how})"
        band = f"band +-{self.band.half_width:.0%}, from {self.band.source}"
        head = "normal" if self.outcome == "normal" else f"! {self.outcome}"
        return f"{what}: {head}: {expected} ({band}; {how})"


def gpu_class(device_name: str) -> str | None:
    """The catalog model a device is (``NVIDIA H100 80GB HBM3`` -> ``H100``): every word of the
    model is a word of the name; the most specific such model (``A100-80GB`` over ``A100``)."""
    return device_class(device_name, GPU_MODELS)  # the rule the ranks' pre-flight uses too


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


def host_class(result: RunResult) -> str | None:
    """The host a GPU run ran on (its CPU model and cores): eager GPU steps are bound by it."""
    cpu, cores = result.fingerprint.get("cpu_model"), result.fingerprint.get("cpu_count")
    if isinstance(cpu, str) and isinstance(cores, int):
        return f"{cpu} x{cores}"
    return None


def _implementation(result: RunResult) -> str:
    return "graphs" if result.implementation.cuda_graphs else "eager"


def reference_key(result: RunResult, machine: str) -> ReferenceKey:
    """What a row must match for ``result``'s figures on ``machine``."""
    sweep = result.sweep
    return ReferenceKey(
        machine=machine,
        host=host_class(result),
        task=result.task,
        backend=result.backend,
        precision=result.precision or "fp32",
        implementation=_implementation(result),
        workers=result.workers,
        batch=result.batch_size,
        min_size=sweep.min_size if sweep else None,
        max_size=sweep.max_size if sweep else None,
        repetitions=sweep.repetitions if sweep else None,
        config=result.config_digest or None,
    )


def verdicts(result: RunResult, rows: Sequence[ReferenceRow] | None = None) -> list[Verdict]:
    """A verdict for each headline figure of a succeeded run (none for a run that did not, whose
    machine is unknown, or that ran on emulated links: the rows were measured on the machine's own
    network)."""
    if not result.succeeded or result.network is not None:
        return []
    machine = machine_class(result)
    if machine is None:  # a run without a fingerprint: nothing to match
        return []
    rows = table() if rows is None else rows
    found = []
    for figure, value in measured_figures(result).items():
        if value <= 0:
            continue
        key = reference_key(result, machine)
        matching = [r for r in rows if key.differs(r, figure) is None]
        if not matching:
            found.append(
                Verdict(figure, value, machine=machine, missing=_closest_difference(key, rows, figure))
            )
            continue
        row = max(matching, key=lambda r: (r.host is not None, r.backend is not None, r.repeats, r.measured))
        band = reference_band(row) or run_band(result, figure, row)
        found.append(Verdict(figure, value, row, band, machine))
    return found


def _closest_difference(key: ReferenceKey, rows: Sequence[ReferenceRow], figure: str) -> str | None:
    """What the rows of this machine, task and figure differ in, when there are such rows."""
    near = [r for r in rows if r.machine == key.machine and r.task == key.task and r.figure == figure]
    reasons = [key.differs(r, figure) for r in near]
    named = sorted({r for r in reasons if r is not None})
    return ", ".join(named) if named else None


def reference_rows(results: Iterable[RunResult], *, source: str, measured: str) -> list[ReferenceRow]:
    """Rows for the succeeded ``results`` of a suite run on one machine, ready to add: repeats of
    one key become one row (their median, their spread as the coefficient of variation)."""
    groups: dict[tuple[object, ...], list[tuple[ReferenceRow, float | None]]] = {}
    for result in results:
        machine = machine_class(result)
        if machine is None or not result.succeeded or result.network is not None:
            continue
        key = reference_key(result, machine)
        gpu = isinstance(result.fingerprint.get("gpu_model"), str)
        for figure, value in measured_figures(result).items():
            row = ReferenceRow(
                machine=machine,
                task=key.task,
                precision=key.precision,
                implementation=key.implementation,
                workers=key.workers,
                batch=key.batch,
                figure=figure,
                value=round(value, 4),
                source=source,
                measured=measured,
                backend=key.backend,
                host=key.host if gpu and key.implementation == "eager" and figure == STEP_TIME else None,
                sizes=f"{key.min_size}-{key.max_size}"
                if figure in (LATENCY, BUSBW) and key.min_size
                else None,
                repetitions=key.repetitions if figure in (LATENCY, BUSBW) else None,
                config=key.config if figure == TIME_TO_ACCURACY else None,
            )
            own = run_band(result, figure, row)
            groups.setdefault(row.key(), []).append((row, own.half_width if own else None))
        for row in _probe_rows(result, key, source, measured):
            groups.setdefault(row.key(), []).append((row, None))
    rows = []
    for members in groups.values():
        values = sorted(r.value for r, _ in members)
        middle = statistics.median(values)
        spreads = [s for _, s in members if s is not None]
        cv = variation(values) if len(values) > 1 else None
        rows.append(
            dataclasses.replace(
                members[0][0],
                value=round(middle, 4),
                repeats=len(values),
                spread=round(cv, 4) if cv is not None else None,
                step_spread=round(max(spreads), 4) if spreads else None,
            )
        )
    return rows


PROBE_TASK = "any"
"""The task column of the pre-flight's rows: a probe belongs to the machine, not to a task."""


def _probe_rows(result: RunResult, key: ReferenceKey, source: str, measured: str) -> list[ReferenceRow]:
    """The machine's pre-flight probes as rows: its GEMM rate in the run's precision and its
    one-element all-reduce at the run's backend and world size."""
    pf = result.preflight
    if pf is None:
        return []
    base = ReferenceRow(
        machine=key.machine, task=PROBE_TASK, precision=key.precision, implementation="eager", workers=1,
        batch=None, figure=GEMM, value=0.0, source=source, measured=measured,
    )  # fmt: skip
    rows = []
    if pf.gemm_tflops is not None:
        rows.append(dataclasses.replace(base, value=round(pf.gemm_tflops, 4)))
    if pf.allreduce_us is not None:
        rows.append(
            dataclasses.replace(
                base,
                precision="fp32",
                workers=key.workers,
                backend=key.backend,
                figure=PREFLIGHT_ALLREDUCE,
                value=round(pf.allreduce_us, 4),
            )
        )
    return rows
