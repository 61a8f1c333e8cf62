"""Scaling figures of time-to-accuracy runs, one figure per spec.

Time to accuracy against workers, one line per backend (and framework), at the olympic mean of
the repeats that reached the goal with their min-max spread; speedup and efficiency against the
ideal; and where the time went (compute, communication, data loading, other) per worker count.
Runs that failed or never reached the goal are marked and listed, never left out; MLBench's
published figures for the same task are drawn beside the user's.
"""

from __future__ import annotations

from collections.abc import Sequence

from mlbench_worker import wire

from mlbench_tui.lifecycle import RunState
from mlbench_tui.plan import GoalPlan
from mlbench_tui.report.anchors import PUBLISHED, anchors_for
from mlbench_tui.report.figure import (
    LINE_STYLES,
    REFERENCE_COLOUR,
    BarStack,
    Figure,
    Mark,
    Panel,
    RefLine,
    Series,
    backend_colour,
)
from mlbench_tui.report.inputs import RunRecord
from mlbench_tui.report.phases import BarKey, bar_key, bar_labels, phase_panel
from mlbench_tui.report.price import cost_panel, price_index_panel
from mlbench_tui.results.model import RunResult
from mlbench_tui.results.scoring import ConfigScore, score_configs

SPLIT_PARTS = (  # (label, colour, hatch)
    ("compute", "#4C72B0", ""),
    ("communication", "#DD8452", "//"),
    ("data loading", "#55A868", ".."),
    ("other", "#B0B0B0", ""),
)
TTA_CAPTION = (
    "Time to accuracy is training time from the first step until the global (all-reduced) "
    "validation metric first meets the goal; validation time is excluded (MLBench's rule). A point "
    "is the olympic mean of the repeats that reached the goal (fastest and slowest dropped from 3 "
    "repeats on); the bar spans their min and max. Speedup is T(1 worker) / T(k), efficiency "
    "speedup / k. In the split, compute is forward + loss + backward + optimizer step, "
    "communication is the gradient all-reduce (agg), data loading is batch_load, other is the rest "
    "of training time (metrics and untracked time); seconds per rank, averaged over ranks and "
    "repeats, over the whole run. Speedup without communication takes the all-reduce time out of "
    "each time to accuracy: the bound with light-speed communication (MLBench's compute speedup). "
    "Step time per phase is the mean milliseconds per training step in each of MLBench's phases "
    "over the whole run (warm-up steps included). The price "
    "index is the price increase over one worker divided by the speedup (MLBench's figure): 1 when "
    "k workers buy k times the speed."
)


def outcome(result: RunResult) -> str | None:
    """Why a run has no time to accuracy, in words; None when it reached its goal."""
    if result.reached and result.time_to_accuracy_s is not None:
        return None
    if result.state in (RunState.FAILED, RunState.CANCELLED, RunState.UNKNOWN):
        why = result.message or result.stop_reason
        return f"{result.state.value}" + (f": {why}" if why and why != result.state.value else "")
    if result.state is not RunState.SUCCEEDED:
        return f"still {result.state.value}"
    goal = result.goal
    best = "-" if result.best_value is None else f"{result.best_value:.4g}"
    if goal is None:
        return None
    op = ">=" if goal.direction == "max" else "<="
    return f"never reached the goal (best {best}, goal {op} {goal.target:g})"


def outcome_line(result: RunResult) -> str | None:
    """``outcome`` on one line, for a figure's notes (the runs table folds the whole text away)."""
    why = outcome(result)
    return None if why is None else why.splitlines()[0]


def _series_key(score: ConfigScore | RunResult) -> tuple[str, str, str]:
    """A line of the scaling figure: one backend, framework and variant (precision, CUDA graphs,
    and the links of a run on emulated ones)."""
    network = score.network if isinstance(score, ConfigScore) else score.network_label
    return score.backend, score.framework, f"{score.variant} {network}".strip()


def _series_label(backend: str, framework: str, frameworks: int) -> str:
    return f"{backend} ({framework})" if frameworks > 1 else backend


def _compute_times(records: Sequence[RunRecord], key: tuple[str, str, str]) -> dict[int, float]:
    """Time to accuracy less communication (the time with light-speed communication), mean over
    the runs of each worker count that reached the goal and reported their phase split."""
    by_workers: dict[int, list[float]] = {}
    for record in records:
        r = record.result
        if _series_key(r) != key or not r.reached or r.time_split is None:
            continue
        if r.time_to_accuracy_s:
            by_workers.setdefault(r.workers, []).append(r.time_to_accuracy_s - r.time_split.communication)
    return {w: sum(v) / len(v) for w, v in by_workers.items() if v}


def _lines(
    records: Sequence[RunRecord], colours: dict[str, str]
) -> tuple[list[Series], list[Series], list[Series]]:
    """Time to accuracy, speedup (with and without communication) and efficiency lines: one per
    (backend, framework, variant); speedup and efficiency only where two worker counts of one
    variant can be compared."""
    results = [r.result for r in records]
    scores = score_configs(results)
    frameworks = sorted({r.framework for r in results})
    tta, speedup, efficiency = [], [], []
    variants = sorted({_series_key(r)[2] for r in results})
    for key in sorted({_series_key(r) for r in results}):
        backend, framework, variant = key
        colour = backend_colour(backend, colours)
        style = LINE_STYLES[(frameworks.index(framework) + variants.index(variant)) % len(LINE_STYLES)]
        label = _series_label(backend, framework, len(frameworks)) + (
            f" {variant}" if len(variants) > 1 else ""
        )
        mine = [s for s in scores if _series_key(s) == key and s.time_to_accuracy_s is not None]
        if mine:
            workers = tuple(float(s.workers) for s in mine)
            times = tuple(s.time_to_accuracy_s or 0.0 for s in mine)
            low, high = tuple(s.min_s or 0.0 for s in mine), tuple(s.max_s or 0.0 for s in mine)
            tta.append(Series(label, workers, times, colour, style, low=low, high=high))
        scaled = [s for s in mine if s.speedup is not None and s.efficiency is not None]
        if len(scaled) >= 2:
            workers = tuple(float(s.workers) for s in scaled)
            speedup.append(Series(label, workers, tuple(s.speedup or 0.0 for s in scaled), colour, style))
            efficiency.append(
                Series(label, workers, tuple(s.efficiency or 0.0 for s in scaled), colour, style)
            )
            compute = _compute_times(records, key)
            shown = sorted(w for w in compute if w in {s.workers for s in scaled} and compute[w] > 0)
            if 1 in compute and len(shown) >= 2:
                speedup.append(
                    Series(
                        f"{label} without communication",
                        tuple(float(w) for w in shown),
                        tuple(compute[1] / compute[w] for w in shown),
                        colour,
                        ":",
                        marker="s",
                    )
                )
    return tta, speedup, efficiency


def _no_speedup(results: Sequence[RunResult]) -> str:
    """Why a spec's runs have no speedup to draw, in words."""
    counts = sorted({r.workers for r in results})
    if len(counts) == 1:
        plural = "s" if counts[0] != 1 else ""
        return f"every run used {counts[0]} worker{plural}: no other worker count to compare with"
    return "speedup needs a 1-worker run that reached the goal"


def scaling_figure(spec_name: str, records: Sequence[RunRecord], colours: dict[str, str]) -> Figure:
    """The scaling figure of one spec's runs."""
    results = [r.result for r in records]
    tta_lines, speedup_lines, efficiency_lines = _lines(records, colours)
    marks, notes = _missed(records, colours)
    refs, ref_notes = _anchor_refs(results)
    values = [t for s in tta_lines for t in (*s.y, *(s.high or ()))] + [m.y for m in marks]
    values += [r.y for r in refs if r.y is not None]
    log = bool(values) and min(values) > 0 and max(values) / min(values) > 20  # decades apart: log axis
    no_base = _no_speedup(results)
    tta = Panel(
        "Time to accuracy", "workers", "seconds" + (" (log)" if log else ""), series=tuple(tta_lines),
        marks=tuple(marks), refs=tuple(refs), x_integer=True, y_log=log, y_from_zero=not log,
        note="no run reached its goal", corner=unlike(results),
    )  # fmt: skip
    speed = Panel(
        "Speedup", "workers", "speedup vs 1 worker (x)", series=tuple(speedup_lines),
        refs=(RefLine("ideal (linear)", None),) if speedup_lines else (), x_integer=True, y_from_zero=True,
        note=no_base,
    )  # fmt: skip
    efficiency = Panel(
        "Parallel efficiency", "workers", "efficiency (speedup / workers)", series=tuple(efficiency_lines),
        refs=(RefLine("ideal", 1.0),) if efficiency_lines else (), x_integer=True, y_from_zero=True,
        note=no_base,
    )  # fmt: skip
    task = (results[0].task_name or results[0].task) if results else ""
    goal = next((r.goal for r in results if r.goal is not None), None)
    goal_text = f", goal {goal_words(goal)}" if goal else ""
    return Figure(
        key=f"scaling-{spec_name}",
        title=f"{spec_name}: scaling ({task}{goal_text})",
        caption=TTA_CAPTION,
        panels=(
            tta,
            speed,
            efficiency,
            _split_panel(records),
            phase_panel(records),
            price_index_panel(records, colours, no_base),
            cost_panel(records, colours),
        ),
        section="Scaling",
        notes=tuple(notes + score_notes(results) + ref_notes),
    )


def score_notes(results: Sequence[RunResult]) -> list[str]:
    """What each point of a line rests on, where it is not simply one run: the olympic mean of
    how many repeats, the one-worker runs its speedup rests on, and the runs left out and why."""
    notes = []
    for score in score_configs(results):
        if score.runs <= 1 and not score.left_out:
            continue
        text = f"{score.label}: olympic mean of {score.reached} of {score.runs} runs"
        if score.baseline_runs:
            text += f", speedup against {score.baseline_runs} one-worker run(s)"
        if score.left_out:
            text += "; left out: " + ", ".join(f"{o.name} ({o.reason})" for o in score.left_out)
        notes.append(text)
    return notes


def _missed(records: Sequence[RunRecord], colours: dict[str, str]) -> tuple[list[Mark], list[str]]:
    """A mark per run without a time to accuracy (at its wall time), and a note naming it."""
    marks, notes = [], []
    for record in records:
        result = record.result
        why = outcome_line(result)
        if why is None:
            continue
        notes.append(f"{result.name}: {why}")
        if result.wall_time_s:
            short = "failed" if result.state is RunState.FAILED else "not reached"
            if result.state is RunState.CANCELLED:
                short = "cancelled"
            marks.append(
                Mark(
                    float(result.workers),
                    result.wall_time_s,
                    f"{short} ({result.wall_time_s:.0f} s)",
                    backend_colour(result.backend, colours),
                )
            )
    return marks, notes


def goal_words(goal: GoalPlan) -> str:
    """``Prec@1 >= 70 (light goal)``: the goal a time to accuracy is on."""
    op = ">=" if goal.direction == "max" else "<="
    kind = f" ({goal.kind} goal)" if goal.kind in ("full", "light") else ""
    return f"{goal.metric.removeprefix('val_global_')} {op} {goal.target:g}{kind}"


def unlike(results: Sequence[RunResult]) -> str:
    """What a time-to-accuracy panel says when its runs' goal is not the published baselines'
    (MLBench's are on the full goal): '' when they agree or there is no baseline."""
    goal = next((r.goal for r in results if r.goal is not None), None)
    anchors = anchors_for(results[0].task) if results else ()
    if (
        goal is None
        or not anchors
        or all((a.metric, a.target) == (goal.metric, goal.target) for a in anchors)
    ):
        return ""
    theirs = f"{anchors[0].metric.removeprefix('val_global_')} {anchors[0].target:g}"
    return f"runs: {goal_words(goal)}; baselines: {theirs}, not like for like"


def _anchor_refs(results: Sequence[RunResult]) -> tuple[list[RefLine], list[str]]:
    """Published references for the task, labelled with source, hardware and the goal they reached."""
    if not results:
        return [], []
    goal = next((r.goal for r in results if r.goal is not None), None)
    refs, notes = [], []
    for i, anchor in enumerate(anchors_for(results[0].task)):
        metric = anchor.metric.removeprefix("val_global_")
        refs.append(
            RefLine(
                f"{anchor.label} ({metric} {anchor.target:g})",
                anchor.time_to_accuracy_s,
                REFERENCE_COLOUR,
                LINE_STYLES[1 + i % 3],
            )
        )
        notes.append(anchor.description)
        if goal is not None and (goal.metric != anchor.metric or goal.target != anchor.target):
            notes.append(
                f"{anchor.source}'s baselines reached {metric} {anchor.target:g}; these runs' goal is "
                f"{goal_words(goal)}: the times are not like for like."
            )
    notes += [p.description for p in PUBLISHED if p.task == results[0].task]
    return refs, list(dict.fromkeys(notes))


def _split_panel(records: Sequence[RunRecord]) -> Panel:
    """Stacked seconds per rank by (backend, framework, variant, workers), averaged over repeats."""
    groups: dict[BarKey, list[tuple[float, float, float, float]]] = {}
    for record in records:
        split = record.result.time_split
        if split is None:
            continue
        train = _mean_last(record, wire.TIME_TRAIN)
        tracked = split.compute + split.communication + split.preprocess
        other = max(0.0, train - tracked) if train is not None else split.metrics
        groups.setdefault(bar_key(record), []).append(
            (split.compute, split.communication, split.preprocess, other)
        )
    keys = sorted(groups)
    categories = bar_labels(keys)
    stacks = tuple(
        BarStack(label, tuple(sum(v[i] for v in groups[k]) / len(groups[k]) for k in keys), colour, hatch)
        for i, (label, colour, hatch) in enumerate(SPLIT_PARTS)
    )
    return Panel(
        "Where the time went",
        "backend and workers",
        "seconds per rank",
        categories=categories,
        stacks=stacks if keys else (),
        y_from_zero=True,
        note="no run reported its phase times",
    )


def _mean_last(record: RunRecord, name: str) -> float | None:
    """The mean over ranks of each rank's last value of ``name``."""
    last = {p.rank: p.value for p in record.points(name)}
    return sum(last.values()) / len(last) if last else None


def by_spec(records: Sequence[RunRecord]) -> dict[str, list[RunRecord]]:
    """Records by spec name, in name order."""
    grouped: dict[str, list[RunRecord]] = {}
    for record in records:
        grouped.setdefault(record.result.spec_name or record.result.name, []).append(record)
    return dict(sorted(grouped.items()))


def scales(records: Sequence[RunRecord]) -> bool:
    """Whether a spec's runs span more than one worker count (else a scaling figure has one point:
    its runs go in the time-to-accuracy table instead)."""
    return len({r.result.workers for r in records}) > 1


def scaling_figures(records: Sequence[RunRecord], colours: dict[str, str]) -> list[Figure]:
    """One scaling figure per spec among ``records`` (runs with a goal) that ran more than one
    worker count."""
    return [
        scaling_figure(spec, members, colours)
        for spec, members in by_spec(records).items()
        if scales(members)
    ]
