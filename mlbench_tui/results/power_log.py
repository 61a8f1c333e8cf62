"""A run's GPU power readings as MLPerf power logs: one ``power/node_<rank>.txt`` per GPU rank.

MLPerf keeps power out of the training log: each measured node has its own log with
``power_measurement_start``, ``conversion_eff``, one ``power_reading`` (watts) per sample and
``power_measurement_stop`` (the keys of ``mlperf_logging.mllog.constants``), and MLCommons'
result summarizer integrates them over the run. These logs carry the rank's NVML GPU power
between ``run_start`` and ``run_stop``, written by ``results.mllog.render`` (MLCommons' ``mllog``).
They measure the GPU board, not the node at the wall, and say so in ``conversion_eff``'s
metadata (``measurement_type: nvml_gpu_board``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

from mlbench_worker import sysmetrics as sm
from mlbench_worker import wire

from mlbench_tui.results import events as ev
from mlbench_tui.results.events import EventRecord
from mlbench_tui.results.mllog import Entry, render
from mlbench_tui.results.time_to_accuracy import MetricPoint

POWER_DIR = "power"
MEASUREMENT_TYPE = "nvml_gpu_board"


def power_entries(rank: int, power: Sequence[tuple[float, float]], start: float, stop: float) -> list[Entry]:
    """One rank's power log: its GPU's readings within ``[start, stop]``, in time order."""
    host = {"host": f"node_{rank}"}
    return [
        Entry("power_measurement_start", None, start, "INTERVAL_START", host),
        Entry("conversion_eff", 1.0, start, metadata={"measurement_type": MEASUREMENT_TYPE, **host}),
        *(
            Entry("power_reading", watts, t, metadata=host)
            for t, watts in sorted(power)
            if start <= t <= stop
        ),
        Entry("power_measurement_stop", None, stop, "INTERVAL_END", host),
    ]


def power_logs(metrics: Iterable[MetricPoint], events: Sequence[EventRecord]) -> dict[str, list[str]]:
    """Archive path -> ``:::MLLOG`` lines, one log per rank that reported GPU power during the
    timed run; none without ``run_start`` and ``run_stop`` or without power samples. Raises
    ``MllogUnavailable`` without mlperf-logging."""
    starts, stops = ev.times(events, wire.RunStart), ev.times(events, wire.RunStop)
    if not starts or not stops:
        return {}
    start, stop = min(starts), max(stops)
    by_rank: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for p in metrics:
        if p.name == sm.GPU_POWER_W and p.t is not None and start <= p.t <= stop:
            by_rank[p.rank].append((p.t, p.value))
    return {
        f"{POWER_DIR}/node_{rank}.txt": render(power_entries(rank, samples, start, stop))
        for rank, samples in sorted(by_rank.items())
    }
