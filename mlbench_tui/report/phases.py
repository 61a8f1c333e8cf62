"""Step time per phase across worker counts: MLBench's split of one training step into its
tracked phases (data loading, forward, loss, backward, all-reduce, optimizer, metrics), as
stacked bars of milliseconds per step for each backend and worker count.

The tracker reports each phase's seconds so far per rank (``phase_<name>``) at each evaluation;
a bar is the run's step time (``results.step_time``: the median over its timed steps after the
warm-up, the one figure every view shows) split by each phase's share of those seconds. A run
without a step time (all of it warm-up) shows its phases' seconds over its steps instead.
"""

from __future__ import annotations

from collections.abc import Sequence

from mlbench_worker import wire

from mlbench_tui.report.figure import BarStack, Panel
from mlbench_tui.report.inputs import RunRecord

PHASES: tuple[tuple[str, str, str, str], ...] = (  # (tracker name, words, colour, hatch)
    ("batch_load", "data loading", "#55A868", ".."),
    ("fwd_pass", "forward", "#4C72B0", ""),
    ("comp_loss", "loss", "#64B5CD", ""),
    ("backprop", "backward", "#8172B2", ""),
    ("agg", "all-reduce", "#DD8452", "//"),
    ("opt_step", "optimizer step", "#937860", ""),
    ("comp_metrics", "metrics", "#B0B0B0", ""),
)


BarKey = tuple[str, str, str, int]  # backend, framework, variant, workers


def bar_key(record: RunRecord) -> BarKey:
    """The bar a run's figures are averaged into: its backend, framework, variant and workers."""
    r = record.result
    return r.backend, r.framework, f"{r.variant} {r.network_label}".strip(), r.workers


def bar_labels(keys: Sequence[BarKey]) -> tuple[str, ...]:
    """``gloo 2w``; the framework and the variant only where the bars differ in them."""
    frameworks, variants = len({k[1] for k in keys}), len({k[2] for k in keys})
    return tuple(
        f"{b}{f' ({f})' if frameworks > 1 else ''}{f' {v}' if variants > 1 else ''} {w}w"
        for b, f, v, w in keys
    )


def step_phases(record: RunRecord) -> dict[str, float] | None:
    """Milliseconds per step in each phase, averaged over ranks, scaled to the run's step time;
    None when the run reported no phase times."""
    per_phase: dict[str, list[float]] = {}
    for name, _, _, _ in PHASES:
        last: dict[int, tuple[int, float]] = {}
        for point in record.points(wire.phase_metric(name)):
            if point.step:
                last[point.rank] = (point.step, point.value)
        if last:
            per_phase[name] = [value / step * 1000 for step, value in last.values()]
    if not per_phase:
        return None
    means = {name: sum(values) / len(values) for name, values in per_phase.items()}
    step_s, total = record.result.step_time_s, sum(means.values())
    if step_s is None or total <= 0:
        return means
    return {name: ms / total * step_s * 1000 for name, ms in means.items()}


def phase_panel(records: Sequence[RunRecord], label: str = "backend and workers") -> Panel:
    """Stacked milliseconds per step by phase for each (backend, framework, variant, workers),
    averaged over repeats."""
    groups: dict[BarKey, list[dict[str, float]]] = {}
    for record in records:
        phases = step_phases(record)
        if phases is not None:
            groups.setdefault(bar_key(record), []).append(phases)
    keys = sorted(groups)
    categories = bar_labels(keys)
    stacks = tuple(
        BarStack(
            words,
            tuple(sum(p.get(name, 0.0) for p in groups[k]) / len(groups[k]) for k in keys),
            colour,
            hatch,
        )
        for name, words, colour, hatch in PHASES
        if any(name in p for k in keys for p in groups[k])
    )
    return Panel(
        "Step time per phase",
        label,
        "milliseconds per step",
        categories=categories,
        stacks=stacks if keys else (),
        y_from_zero=True,
        note="no run reported its phase times",
    )
