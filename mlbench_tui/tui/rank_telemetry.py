"""A rank's latest hardware telemetry as the Ranks tab shows it: CPU, memory, GPU, GPU memory, power.

Pure (no Textual): the run screen folds each ``sys/`` sample into the rank's ``RankTelemetry``
and the rank table asks it for its cells, so another rank view (a distribution of 1,024 ranks,
worst first) can carry the same columns. Memory reads against the pod's limit when the rank
reported one, GPU memory against the GPU's total. Once the run has its result, the GPU column shows
the rank's utilisation over the timed run, the figure status and results show.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlbench_worker import sysmetrics as sm

from mlbench_tui.formatting import format_mib
from mlbench_tui.results.model import RankTelemetryFigures
from mlbench_tui.results.telemetry import gpu_util_text

UNKNOWN = "—"
COLUMNS = ("CPU", "mem", "GPU", "GPU mem", "power")


@dataclass
class RankTelemetry:
    """The latest value of each telemetry series a rank reported (None: not reported)."""

    cpu_percent: float | None = None
    rss_mib: float | None = None
    mem_limit_mib: float | None = None
    gpu_util: float | None = None
    gpu_mem_mib: float | None = None
    gpu_mem_total_mib: float | None = None
    gpu_power_w: float | None = None
    timed_gpu_util: str | None = None  # the rank's figure over the timed run, once its result is known

    def finished(self, figures: RankTelemetryFigures) -> None:
        """The run's result is known: the GPU column shows the rank's utilisation over the timed
        run (``results.telemetry``, as status and results show it) instead of the last sample."""
        self.timed_gpu_util = gpu_util_text(figures)

    def update(self, name: str, value: float) -> bool:
        """Take one sample of series ``name``; False when the table shows no such series."""
        field = _FIELDS.get(name)
        if field is None:
            return False
        setattr(self, field, value)
        return True

    def cells(self) -> tuple[str, ...]:
        """The texts of ``COLUMNS``, in order."""
        return (
            UNKNOWN if self.cpu_percent is None else f"{self.cpu_percent:.0f}%",
            _against(self.rss_mib, self.mem_limit_mib),
            self.timed_gpu_util or (UNKNOWN if self.gpu_util is None else f"{self.gpu_util:.0f}%"),
            _against(self.gpu_mem_mib, self.gpu_mem_total_mib),
            UNKNOWN if self.gpu_power_w is None else f"{self.gpu_power_w:.0f} W",
        )


_FIELDS = {
    sm.CPU_PERCENT: "cpu_percent",
    sm.RSS_MIB: "rss_mib",
    sm.MEM_LIMIT_MIB: "mem_limit_mib",
    sm.GPU_UTIL: "gpu_util",
    sm.GPU_MEM_USED_MIB: "gpu_mem_mib",
    sm.GPU_MEM_TOTAL_MIB: "gpu_mem_total_mib",
    sm.GPU_POWER_W: "gpu_power_w",
}
"""The field of ``RankTelemetry`` each series the rank table shows updates."""

# The series the rank table reads: their history is loaded with the run (the latest value counts).
SERIES = tuple(_FIELDS)


def _against(used: float | None, limit: float | None) -> str:
    if used is None:
        return UNKNOWN
    return format_mib(used) if limit is None else f"{format_mib(used)}/{format_mib(limit)}"
