"""The hardware telemetry series: every ``sys/...`` metric a rank reports, in one table.

``mlbench_worker.telemetry.sampler`` records them; the server stores them like any metric (one row per
rank, name, time; no step); results, ``mlbench status`` and the TUI read the names and units
from here. Standard library only: the engine imports this module without the worker's deps.

Memory is in MiB (2**20 bytes), so charts and tables read without scaling. ``once`` series are
sent at the first sample only (facts that do not change during a run). A rank has at most one
GPU (every executor places one GPU per rank), so GPU series carry no device index.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

PREFIX = "sys/"

CPU_PERCENT = "sys/cpu_percent"
RSS_MIB = "sys/rss_mib"
HOST_MEM_AVAILABLE_MIB = "sys/host_mem_available_mib"
MEM_LIMIT_MIB = "sys/mem_limit_mib"
CPU_LIMIT_CORES = "sys/cpu_limit_cores"
NET_SENT_MIB_S = "sys/net_sent_mib_s"
NET_RECV_MIB_S = "sys/net_recv_mib_s"
LINK_SENT_BYTES = "sys/link_sent_bytes"
LINK_RECV_BYTES = "sys/link_recv_bytes"
LINK_SENT_MBIT_S = "sys/link_sent_mbit_s"
LINK_RECV_MBIT_S = "sys/link_recv_mbit_s"
GPU_UTIL = "sys/gpu_util"
GPU_MEM_USED_MIB = "sys/gpu_mem_used_mib"
GPU_MEM_TOTAL_MIB = "sys/gpu_mem_total_mib"
GPU_MEM_PEAK_MIB = "sys/gpu_mem_peak_mib"
GPU_POWER_W = "sys/gpu_power_w"
GPU_ENERGY_J = "sys/gpu_energy_j"
GPU_SM_CLOCK_MHZ = "sys/gpu_sm_clock_mhz"
GPU_TEMP_C = "sys/gpu_temp_c"
GPU_READINGS = "sys/gpu_readings"

Source = Literal["psutil", "cgroup", "nvml", "framework", "link"]


@dataclass(frozen=True)
class SysSeries:
    """One telemetry series: its metric name, unit, where it comes from and what it means."""

    name: str
    unit: str
    source: Source
    description: str
    once: bool = False

    @property
    def short(self) -> str:
        """The name without the ``sys/`` prefix, for column headers and legends."""
        return self.name.removeprefix(PREFIX)


SERIES: tuple[SysSeries, ...] = (
    SysSeries(
        CPU_PERCENT,
        "%",
        "psutil",
        "CPU time of the rank's process over the last interval, "
        "in percent of one core (200 = two cores busy)",
    ),
    SysSeries(RSS_MIB, "MiB", "psutil", "resident memory of the rank's process"),
    SysSeries(HOST_MEM_AVAILABLE_MIB, "MiB", "psutil", "memory available to new processes on the host"),
    SysSeries(
        MEM_LIMIT_MIB,
        "MiB",
        "cgroup",
        "memory limit of the rank's cgroup (a Kubernetes pod's "
        "limit; cgroup v2 memory.max or v1 memory.limit_in_bytes); absent when unlimited",
        once=True,
    ),
    SysSeries(
        CPU_LIMIT_CORES,
        "cores",
        "cgroup",
        "CPU quota of the rank's cgroup (cpu.max or cpu.cfs_quota_us over the period); absent when unlimited",
        once=True,
    ),
    SysSeries(
        NET_SENT_MIB_S,
        "MiB/s",
        "psutil",
        "bytes sent by the host (all interfaces, loopback "
        "included: local ranks talk over it) over the last interval",
    ),
    SysSeries(NET_RECV_MIB_S, "MiB/s", "psutil", "bytes received by the host over the last interval"),
    SysSeries(
        LINK_SENT_BYTES,
        "bytes",
        "link",
        "bytes the rank's emulated node sent over its link since the link was made (spec.network; "
        "the node's ranks share it); also read at run_start, the goal and run_stop",
    ),
    SysSeries(LINK_RECV_BYTES, "bytes", "link", "bytes the rank's emulated node received over its link"),
    SysSeries(LINK_SENT_MBIT_S, "Mbit/s", "link", "the node's link rate out over the last interval"),
    SysSeries(LINK_RECV_MBIT_S, "Mbit/s", "link", "the node's link rate in over the last interval"),
    SysSeries(
        GPU_UTIL,
        "%",
        "nvml",
        "share of time a kernel ran on the GPU: the mean of NVML's readings (every 50 ms) since the "
        "previous value",
    ),
    SysSeries(GPU_MEM_USED_MIB, "MiB", "nvml", "GPU memory in use (every process on the GPU)"),
    SysSeries(GPU_MEM_TOTAL_MIB, "MiB", "nvml", "GPU memory in all", once=True),
    SysSeries(
        GPU_MEM_PEAK_MIB,
        "MiB",
        "framework",
        "the framework's peak allocated GPU memory so far "
        "(torch.cuda.max_memory_allocated; TensorFlow's memory info 'peak')",
    ),
    SysSeries(
        GPU_POWER_W, "W", "nvml", "power draw of the GPU: the mean of the readings since the previous value"
    ),
    SysSeries(
        GPU_ENERGY_J,
        "J",
        "nvml",
        "the GPU's energy counter (joules since the driver loaded); energy is its increase",
    ),
    SysSeries(
        GPU_READINGS,
        "readings",
        "nvml",
        "how many NVML readings the GPU utilisation, power and energy values sent with it rest on",
    ),
    SysSeries(GPU_SM_CLOCK_MHZ, "MHz", "nvml", "SM clock of the GPU"),
    SysSeries(GPU_TEMP_C, "°C", "nvml", "GPU temperature"),
)

BY_NAME: dict[str, SysSeries] = {s.name: s for s in SERIES}


def is_sys(name: str) -> bool:
    """Whether a metric name is a telemetry series."""
    return name.startswith(PREFIX)


__all__ = ["BY_NAME", "PREFIX", "SERIES", "SysSeries", "is_sys"]
