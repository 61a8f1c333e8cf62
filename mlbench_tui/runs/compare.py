"""``mlbench compare BASE CAND``: two sets of runs, figure by figure (``results.compare``).

A side is named the way a user names runs: a run id, a run name (every run of that name: its
repeats and re-runs), a spec file or directory (every run of its plans), a spec name, a label
selector (``label:commit=abc123``, every run with those labels), or an exported archive
(``run.zip`` from ``mlbench export``). Only succeeded runs count; the others are named. Each run's
samples are read once: its timed steps (or, for a run recorded before them, its report windows
after the warm-up), and task 0a's timed repetitions at the sizes its figures are read at.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlbench_worker import wire
from pydantic import ValidationError

from mlbench_tui.errors import NotFound, UsageError
from mlbench_tui.formatting import render_table
from mlbench_tui.results.allreduce import ITEM_BYTES
from mlbench_tui.results.compare import METHOD, FigureComparison, RunSamples, Side, compare_figure
from mlbench_tui.results.model import RunResult
from mlbench_tui.results.reference_figures import (
    BUSBW,
    LATENCY,
    STEP_TIME,
    TIME_TO_ACCURACY,
    measured_figures,
)
from mlbench_tui.results.step_time import STEP_SERIES
from mlbench_tui.results.time_to_accuracy import MetricPoint
from mlbench_tui.runs.archived_results import refreshed
from mlbench_tui.runs.lookup import RUN_ID
from mlbench_tui.server.paging import all_metrics
from mlbench_tui.store.api_models import RunDetail, RunInfo

if TYPE_CHECKING:
    from mlbench_tui.store.reader import RunReader

LABEL_PREFIX = "label:"


@dataclass(frozen=True)
class LoadedRun:
    """One run of a side: its result (today's figures) and the points its samples come from."""

    result: RunResult
    points: tuple[MetricPoint, ...]


@dataclass(frozen=True)
class Selection:
    """What a reference named: its succeeded runs, and the others with why they do not count."""

    ref: str
    runs: tuple[LoadedRun, ...]
    left_out: tuple[str, ...] = ()


def _parse_labels(text: str) -> dict[str, str]:
    pairs = [p for p in text.removeprefix(LABEL_PREFIX).split(",") if p]
    labels = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"bad label selector {text!r}", hint="write label:KEY=VALUE[,KEY=VALUE]")
        labels[key.strip()] = value.strip()
    if not labels:
        raise UsageError(f"bad label selector {text!r}", hint="write label:KEY=VALUE[,KEY=VALUE]")
    return labels


def named_runs(reader: RunReader, ref: str) -> list[RunInfo]:
    """The runs ``ref`` names (see the module's docstring), oldest first (``NotFound``: none)."""
    if RUN_ID.fullmatch(ref):
        return [reader.get_run(ref)]
    runs = reader.list_runs(limit=100_000)
    if ref.startswith(LABEL_PREFIX):
        wanted = _parse_labels(ref)
        chosen = [r for r in runs if all(r.labels.get(k) == v for k, v in wanted.items())]
    elif Path(ref).exists():
        from mlbench_tui.runs.plans import load_plans

        plans = {(p.plan.name, p.plan.spec_hash) for p in load_plans([ref])}
        chosen = [r for r in runs if (r.name, r.spec_hash) in plans]
    else:
        chosen = [r for r in runs if r.spec_name == ref] or [r for r in runs if r.name == ref]
    if not chosen:
        raise NotFound(
            f"no runs for {ref!r}",
            hint="name a run id or name, a spec file or name, label:KEY=VALUE, or an exported .zip",
        )
    return sorted(chosen, key=lambda r: r.created)


def _sample_names(result: RunResult) -> list[str]:
    if result.task == "0a":
        return [wire.allreduce_metric(result.precision or "fp32", wire.ALLREDUCE_ITERATION)]
    return list(STEP_SERIES)


def _read_points(reader: RunReader, run_id: str, names: Sequence[str]) -> tuple[MetricPoint, ...]:
    return tuple(all_metrics(lambda batch, since: reader.metrics(run_id, names=batch, since=since), names))


def select(reader: RunReader, ref: str) -> Selection:
    """The succeeded runs ``ref`` names, each with its samples."""
    if ref.endswith(".zip") and Path(ref).is_file():
        return _from_archive(Path(ref))
    loaded, left_out = [], []
    for run in named_runs(reader, ref):
        result = run.known_result()
        if run.result is None or not result.succeeded:
            left_out.append(f"{run.name} ({run.state})")
            continue
        loaded.append(LoadedRun(result, _read_points(reader, run.id, _sample_names(result))))
    return Selection(ref, tuple(loaded), tuple(left_out))


def _from_archive(path: Path) -> Selection:
    """One exported run: its ``run.json`` (with its plan and result) and ``metrics.json``."""
    try:
        with zipfile.ZipFile(path) as archive:
            run = RunDetail.model_validate_json(archive.read("run.json"))
            rows: list[dict[str, Any]] = json.loads(archive.read("metrics.json"))
    except (OSError, KeyError, zipfile.BadZipFile, ValueError, ValidationError) as exc:
        hint = "make one with: mlbench export RUN -o FILE.zip"
        raise UsageError(f"{path} is not an archive of mlbench export: {exc}", hint=hint) from None
    points = tuple(MetricPoint(**row) for row in rows)
    if run.result is None or not run.result.succeeded:
        return Selection(str(path), (), (f"{run.name} ({run.state})",))
    result = refreshed(run, points)
    wanted = set(_sample_names(result))
    return Selection(str(path), (LoadedRun(result, tuple(p for p in points if p.name in wanted)),))


def _step_samples(run: LoadedRun) -> tuple[float, ...]:
    """A run's timed steps after its warm-up, else its report windows after it."""
    st = run.result.step_time
    warmup = st.warmup_steps if st is not None else 0
    steps = [
        p.value for p in run.points if p.name == wire.TIMED_STEP and (p.step or 0) > warmup and p.value > 0
    ]
    if steps:
        return tuple(steps)
    windows = [p for p in run.points if p.name == wire.STEP_TIME and p.value > 0]
    windows.sort(key=lambda p: (p.rank, p.step or 0))
    kept: list[float] = []
    previous: dict[int, int] = {}
    for p in windows:
        start = previous.get(p.rank, 0)
        if start >= warmup:
            kept.append(p.value)
        previous[p.rank] = p.step or 0
    return tuple(kept)


def _sweep_samples(run: LoadedRun, figure: str) -> tuple[float, ...]:
    """0a: the timed repetitions at the smallest size (latency, us) or at the peak bandwidth's
    size (bus bandwidth, GB/s, each repetition's)."""
    result = run.result
    dtype = result.precision or "fp32"
    figures = (result.allreduce or {}).get(dtype)
    name = wire.allreduce_metric(dtype, wire.ALLREDUCE_ITERATION)
    mine = [p for p in run.points if p.name == name and p.rank == 0 and p.value > 0]
    if figures is None or not mine:
        return ()
    if figure == LATENCY:
        smallest = min(p.step or 0 for p in mine)
        return tuple(p.value * 1e6 for p in mine if (p.step or 0) == smallest)
    size = figures.peak_busbw_size
    if size is None:
        return ()
    nbytes = size * ITEM_BYTES.get(dtype, 4)
    factor = 2 * (result.workers - 1) / result.workers if result.workers > 1 else 1.0
    return tuple(nbytes / p.value / 1e9 * factor for p in mine if p.step == size)


def _samples(run: LoadedRun, figure: str) -> tuple[float, ...]:
    if figure == STEP_TIME:
        return tuple(v * 1000 for v in _step_samples(run))
    if figure in (LATENCY, BUSBW):
        return _sweep_samples(run, figure)
    return ()  # a time to accuracy is one value a run


def _side(selection: Selection, figure: str) -> Side | None:
    runs = []
    for run in selection.runs:
        value = measured_figures(run.result).get(figure)
        if value is not None:
            runs.append(RunSamples(run.result.name, value, _samples(run, figure)))
    return Side(selection.ref, tuple(runs)) if runs else None


@dataclass(frozen=True)
class Comparison:
    """Every figure both sides have, compared."""

    base: Selection
    candidate: Selection
    figures: tuple[FigureComparison, ...]
    notes: tuple[str, ...]


def compare_runs(base: Selection, candidate: Selection, *, seed: int = 0) -> Comparison:
    """The candidate's runs against the base's, figure by figure."""
    for side in (base, candidate):
        if not side.runs:
            why = f" (left out: {', '.join(side.left_out)})" if side.left_out else ""
            raise UsageError(f"{side.ref!r} has no succeeded run to compare{why}")
    tasks = {r.result.task for r in (*base.runs, *candidate.runs)}
    if len(tasks) > 1:
        shown = ", ".join(sorted(tasks))
        raise UsageError(f"the two sides ran different tasks ({shown}): nothing to compare")
    notes = [f"left out of {s.ref}: {', '.join(s.left_out)}" for s in (base, candidate) if s.left_out]
    for side in (base, candidate):
        configs = {r.result.config_digest for r in side.runs}
        if len(configs) > 1:
            names = ", ".join(sorted({r.result.name for r in side.runs}))
            notes.append(f"! {side.ref} holds several configurations ({names}): their medians are pooled")
    figures = []
    for figure in (TIME_TO_ACCURACY, STEP_TIME, LATENCY, BUSBW):
        b, c = _side(base, figure), _side(candidate, figure)
        if b is not None and c is not None:
            found = compare_figure(figure, b, c, seed=seed)
            figures.append(found)
            notes += found.notes
    if not figures:
        raise UsageError("the two sides have no figure in common (a goal reached, a step time, a sweep)")
    return Comparison(base, candidate, tuple(figures), tuple(notes))


def comparison_text(comparison: Comparison) -> str:
    """The comparison as a table with the method named and what it rests on."""
    base, cand = comparison.base, comparison.candidate
    lines = [
        f"base:      {base.ref} ({len(base.runs)} run{'s' * (len(base.runs) != 1)})",
        f"candidate: {cand.ref} ({len(cand.runs)} run{'s' * (len(cand.runs) != 1)})",
        f"method:    {METHOD}; 95% interval; BY runs: runs resampled, then their samples (run-to-run "
        "noise seen); BY samples: one run a side, its steps or repetitions resampled (assumes them "
        "independent; repeats are the stronger test)",
        "",
        render_table([c.row() for c in comparison.figures]),
    ]
    if comparison.notes:
        lines += ["", *comparison.notes]
    return "\n".join(lines)


def comparison_json(comparison: Comparison) -> dict[str, Any]:
    """The comparison as JSON: every figure with its estimates, interval, tests and verdict."""
    base, candidate = comparison.base, comparison.candidate
    return {
        "base": {"ref": base.ref, "runs": [r.result.name for r in base.runs]},
        "candidate": {"ref": candidate.ref, "runs": [r.result.name for r in candidate.runs]},
        "method": METHOD,
        "figures": [
            {
                "figure": c.figure,
                "base": c.base.estimate,
                "candidate": c.candidate.estimate,
                "change": c.change,
                "ci_low": c.low,
                "ci_high": c.high,
                "resampled": c.basis,
                "mann_whitney_p": c.mann_whitney_p,
                "mann_whitney_on": c.mann_whitney_on,
                "verdict": c.verdict,
                "noise": c.noise,
                "noise_basis": c.noise_basis,
                "repeats_needed_for_5pct": c.repeats_needed,
            }
            for c in comparison.figures
        ],
        "notes": list(comparison.notes),
    }
