"""Which charts a run screen opens with, how each chart is titled and scaled, and what it reads.

A run's charts follow what it can draw: a one-rank all-reduce sweep moves no data, so it charts
latency (p50 per dtype) instead of bus bandwidth; a GPU run adds its GPU's utilisation, power and
memory from the ``sys/gpu_*`` telemetry. A run of many ranks charts its step time as percentile
bands across ranks instead of a line per rank. Pure functions of the wire models, no Textual.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlbench_worker import sysmetrics as sm
from pydantic import ValidationError

from mlbench_tui.plan import RunPlan
from mlbench_tui.results.ranks import STEP_TIME
from mlbench_tui.spec.tasks import default_charts, get_task, sweep_of
from mlbench_tui.store.api_models import RunDetail
from mlbench_tui.tui.feed import HistoryPlan

GPU_CHARTS = (sm.GPU_UTIL, sm.GPU_POWER_W, sm.GPU_MEM_USED_MIB)
MAX_RANK_SERIES = 6  # a run of more ranks charts its step time as percentile bands across ranks
BUSBW = "_busbw"
LATENCY = "_latency_p50"


@dataclass(frozen=True)
class ChartLook:
    """A chart's title (with its unit) and the factor from the metric's unit to the chart's."""

    title: str
    scale: float = 1.0


LOOKS: dict[str, ChartLook] = {
    STEP_TIME: ChartLook("step time (ms)", 1e3),
    sm.GPU_UTIL: ChartLook("GPU utilisation (%)"),
    sm.GPU_POWER_W: ChartLook("GPU power (W)"),
    sm.GPU_MEM_USED_MIB: ChartLook("GPU memory used (GiB)", 1 / 1024),
}


SWEEP_FIGURES: dict[str, ChartLook] = {  # 0a's curves: <prefix><dtype>_<figure>
    "latency_p50": ChartLook("latency p50 (us)", 1e6),
    "latency_p99": ChartLook("latency p99 (us)", 1e6),
    "busbw": ChartLook("bus bandwidth (GB/s)"),
    "algbw": ChartLook("algorithm bandwidth (GB/s)"),
}


def look(name: str) -> ChartLook:
    """How the chart of metric ``name`` reads: step time in ms, all-reduce latency in us,
    telemetry in words and units; other metrics by name, unscaled."""
    if name in LOOKS:
        return LOOKS[name]
    sweep = sweep_of(name)
    if sweep is not None:
        dtype, _, figure = name.removeprefix(sweep.prefix).partition("_")
        known = SWEEP_FIGURES.get(figure)
        if known is not None:
            return ChartLook(f"all-reduce {dtype} {known.title}", known.scale)
    return ChartLook(name)


def gpu_run(run: RunDetail) -> bool:
    """Whether the run's plan placed a GPU on each rank."""
    try:
        return RunPlan.model_validate(run.plan).resources.gpus > 0
    except ValidationError:  # a run registered without a (valid) plan
        return False


def opening_charts(run: RunDetail) -> list[str]:
    """The metrics charted when the run opens: its task's charts (one rank's sweep: latency in
    place of bus bandwidth), then the GPU charts of a GPU run."""
    names = default_charts(run.task, run.goal.metric if run.goal is not None else None)
    task = get_task(run.task)
    if task is not None and task.sweep is not None and run.workers == 1:
        swapped = [n.removesuffix(BUSBW) + LATENCY if n.endswith(BUSBW) else n for n in names]
        names = list(dict.fromkeys(swapped))
    if gpu_run(run):
        names += [n for n in GPU_CHARTS if n not in names]
    return names


def wide(run: RunDetail) -> bool:
    """Whether a run has too many ranks to chart one line each (its step time is drawn as bands)."""
    return run.workers > MAX_RANK_SERIES


def per_rank(name: str) -> bool:
    """Charts with one line per rank (up to ``MAX_RANK_SERIES``): step time and the telemetry."""
    return name == STEP_TIME or sm.is_sys(name)


def chart_plan(run: RunDetail, names: list[str]) -> HistoryPlan:
    """The history of the charts of ``names``: every rank's on a run of a few ranks; on a wide
    run rank 0's (global metrics are equal on every rank) and the step time as bands across
    ranks, so the work stays that of a few series, not of one series per rank."""
    if not wide(run):
        return HistoryPlan(series=list(names))
    return HistoryPlan(
        one_rank=[n for n in names if n != STEP_TIME], bands=[STEP_TIME] if STEP_TIME in names else []
    )
