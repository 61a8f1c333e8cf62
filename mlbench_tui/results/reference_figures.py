"""The figures a run is judged by against its machine's reference, in the reference table's units.

One place names them: the headline figures (time to accuracy, the step time, task 0a's smallest-
size latency and peak bus bandwidth), the one-graph step floor the physical bounds use, which of
them are better higher, and how each reads.
"""

from __future__ import annotations

from mlbench_worker.wire import PROBE_ALLREDUCE, PROBE_GEMM

from mlbench_tui.formatting import format_duration, format_latency, format_number, format_step
from mlbench_tui.results.model import RunResult

STEP_TIME = "step_time_ms"
LATENCY = "allreduce_latency_min_size_us"
BUSBW = "allreduce_peak_busbw_gbps"
TIME_TO_ACCURACY = "time_to_accuracy_s"
STEP_FLOOR = "step_floor_ms"
"""The whole training step in one CUDA graph: the device's fastest step (``results.bounds``)."""
GEMM = PROBE_GEMM
"""The pre-flight's matrix-multiply probe: the machine's achievable peak (``results.preflight``)."""
PREFLIGHT_ALLREDUCE = PROBE_ALLREDUCE
"""The pre-flight's one-element all-reduce (us)."""

FIGURE_NAMES = {
    STEP_TIME: "step",
    LATENCY: "latency",
    BUSBW: "peak busbw",
    TIME_TO_ACCURACY: "time to accuracy",
    STEP_FLOOR: "one-graph step",
    GEMM: "GEMM",
    PREFLIGHT_ALLREDUCE: "pre-flight all-reduce",
}


def faster_is_higher(figure: str) -> bool:
    """Whether a higher value of ``figure`` is the faster one (a rate, not a time)."""
    return figure in (BUSBW, GEMM)


def shown(figure: str, value: float) -> str:
    """A figure as people read it: step times and latencies in their unit, rates in theirs."""
    if figure in (STEP_TIME, STEP_FLOOR):
        return format_step(value / 1000)
    if figure in (LATENCY, PREFLIGHT_ALLREDUCE):
        return format_latency(value / 1e6)
    if figure == TIME_TO_ACCURACY:
        return format_duration(value)
    if figure == GEMM:
        return f"{format_number(value)} TFLOP/s"
    return f"{format_number(value)} GB/s"


def measured_figures(result: RunResult) -> dict[str, float]:
    """The run's headline figures a reference row can hold, in the rows' units."""
    out: dict[str, float] = {}
    if result.reached and result.time_to_accuracy_s is not None:
        out[TIME_TO_ACCURACY] = result.time_to_accuracy_s
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
