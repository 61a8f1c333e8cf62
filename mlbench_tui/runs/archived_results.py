"""A result in an archive that an older version exported, brought up to today's definitions.

A store's results are brought up to date by the server that serves them (``server.results``:
recomputed from the run's stored metrics and events with this version's rules, and stored where
the store can keep them). An archive of ``mlbench export`` has no server: a result stored before
per-step timing, the declared warm-up, the 0a sweep shape or the configuration digest existed
gets those figures here, from the archive's own plan and step series, so ``compare`` reads an old
archive with one step-time definition (an old run's step time then rests on its report windows
after the warm-up, and says so).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mlbench_tui.results.flops import flop_figures
from mlbench_tui.results.model import RunResult
from mlbench_tui.results.reference import machine_class
from mlbench_tui.results.step_time import step_time_figures
from mlbench_tui.results.summary import batch_size, config_digest, sweep_shape, warmup_steps
from mlbench_tui.results.time_to_accuracy import MetricPoint
from mlbench_tui.spec.reference_table import table as reference_table
from mlbench_tui.store.api_models import RunDetail


def needs_refresh(result: RunResult) -> bool:
    """Whether ``result`` was stored by a version without today's step-time, sweep or
    configuration figures."""
    no_step_time = result.step_time is None and result.step_time_note is None and result.task != "0a"
    return no_step_time or not result.config_digest or (result.task == "0a" and result.sweep is None)


def refreshed(run: RunDetail, points: Iterable[MetricPoint] = ()) -> RunResult:
    """``run``'s stored result (it must have one) with the figures its version did not store,
    derived from its plan and ``points`` (its step series; an export's metrics will do)."""
    assert run.result is not None
    result = run.result.model_copy(update={"run_id": run.id})
    plan = run.stored_plan()
    if plan is None or not needs_refresh(result):
        return result
    updates: dict[str, Any] = {}
    warmup = warmup_steps(plan)
    if warmup is not None and result.step_time is None:
        figures = step_time_figures(points, warmup)
        if figures is not None:
            updates.update(step_time=figures, step_time_s=figures.median_s)
    if result.sweep is None:
        updates["sweep"] = sweep_shape(plan)
    if result.batch_size is None:
        updates["batch_size"] = batch_size(plan)
    if not result.config_digest:
        updates["config_digest"] = config_digest(plan)
    updated = result.model_copy(update=updates)
    if updated.flops is None:  # the step against its one-graph floor, where the machine has one
        updated.flops = flop_figures(updated, None, machine_class(updated), reference_table())
    return updated
