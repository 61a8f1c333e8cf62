"""Which charts a run screen opens with, how each chart is titled and scaled, and what it reads.

A run's charts follow what it can draw: a one-rank all-reduce sweep moves no data, so it charts
latency (p50 per dtype) instead of bus bandwidth; a GPU run adds its GPU's utilisation, power and
memory from the ``sys/gpu_*`` telemetry. A run of many ranks charts its step time as percentile
bands across ranks instead of a line per rank. Pure functions of the wire models, no Textual.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mlbench_worker import sysmetrics as sm

from mlbench_tui.formatting import format_bandwidth, significant
from mlbench_tui.results.ranks import STEP_TIME
from mlbench_tui.spec.tasks import default_charts, get_task, sweep_of
from mlbench_tui.store.api_models import RunDetail
from mlbench_tui.tui.feed import HistoryPlan

GPU_CHARTS = (sm.GPU_UTIL, sm.GPU_POWER_W, sm.GPU_MEM_USED_MIB)
MAX_RANK_SERIES = 6  # a run of more ranks charts its step time as percentile bands across ranks
BUSBW = "_busbw"
LATENCY = "_latency_p50"


AXIS_LABEL = 7  # characters a chart's y label may take


def bandwidth_label(gbps: float) -> str:
    """A bandwidth axis label in a unit that reads (``897MB/s``, ``12KB/s``), never ``34.7µ``;
    two significant figures where three do not fit."""
    text = format_bandwidth(gbps).replace(" ", "")
    if len(text) <= AXIS_LABEL:
        return text
    number, unit = text[:-4], text[-4:]
    return f"{significant(float(number), 2)}{unit}"


@dataclass(frozen=True)
class ChartLook:
    """A chart's title (with its unit), the factor from the metric's unit to the chart's, and how
    its y labels are written (None: plain numbers)."""

    title: str
    scale: float = 1.0
    y_format: Callable[[float], str] | None = None


LOOKS: dict[str, ChartLook] = {
    STEP_TIME: ChartLook("step time (ms)", 1e3),
    sm.GPU_UTIL: ChartLook("GPU utilisation (%)"),
    sm.GPU_POWER_W: ChartLook("GPU power (W)"),
    sm.GPU_MEM_USED_MIB: ChartLook("GPU memory used (GiB)", 1 / 1024),
}


SWEEP_FIGURES: dict[str, ChartLook] = {  # 0a's curves: <prefix><dtype>_<figure>
    "latency_p50": ChartLook("latency p50 (us)", 1e6),
    "latency_p99": ChartLook("latency p99 (us)", 1e6),
    "busbw": ChartLook("bus bandwidth", y_format=bandwidth_label),
    "algbw": ChartLook("algorithm bandwidth", y_format=bandwidth_label),
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
            return ChartLook(f"all-reduce {dtype} {known.title}", known.scale, known.y_format)
    return ChartLook(name)


def gpu_run(run: RunDetail) -> bool:
    """Whether the run's plan placed a GPU on each rank."""
    plan = run.stored_plan()
    return plan is not None and plan.resources.gpus > 0


def swept_dtypes(run: RunDetail) -> set[str] | None:
    """The element types a sweep run measures (its plan's ``dtypes``; fp16 never on mpi, which
    has no fp16 reduction); None when the plan does not say."""
    plan = run.stored_plan()
    dtypes = plan.hyperparameters.get("dtypes") if plan is not None else None
    if not isinstance(dtypes, list):
        return None
    return {str(d) for d in dtypes} - ({"fp16"} if run.backend == "mpi" else set())


def opening_charts(run: RunDetail) -> list[str]:
    """The metrics charted when the run opens: its task's charts for the element types it
    measures (one rank's sweep: latency in place of bus bandwidth), then the GPU charts of a GPU
    run."""
    names = default_charts(run.task, run.goal.metric if run.goal is not None else None)
    task = get_task(run.task)
    if task is not None and task.sweep is not None:
        if run.workers == 1:
            names = [n.removesuffix(BUSBW) + LATENCY if n.endswith(BUSBW) else n for n in names]
        dtypes = swept_dtypes(run)
        if dtypes is not None:
            names = [n for n in names if n.removeprefix(task.sweep.prefix).partition("_")[0] in dtypes]
        names = list(dict.fromkeys(names))
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
