"""One GPU as the telemetry reads it: a small interface over NVML that a fake device implements.

``GpuDevice`` is what the sampler and the fast GPU poller call; ``NvmlDevice`` implements it with
NVIDIA's NVML bindings (``pynvml`` from ``nvidia-ml-py``), translating NVML's errors into the two
kinds the callers act on: ``NotSupported`` (the board has no such counter: drop the field for the
run) and ``DeviceError`` (this read failed: skip it). Tests implement the same protocol with
counters of their own, so the sampler's schedule, the figures and the power log run on a CPU.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Protocol

MIB = float(2**20)


class NotSupported(Exception):
    """The GPU does not report this value (MIG slices, older boards)."""


class DeviceError(Exception):
    """A read failed this time (the GPU fell off the bus, the driver is busy)."""


class GpuDevice(Protocol):
    """The values the telemetry reads from one GPU, in the units of ``sysmetrics``."""

    def utilization(self) -> float:
        """Percent of NVML's last sample period in which a kernel ran."""

    def power_w(self) -> float:
        """Current board power draw, watts."""

    def energy_j(self) -> float:
        """The energy counter, joules since the driver loaded."""

    def memory_used_mib(self) -> float: ...

    def memory_total_mib(self) -> float: ...

    def sm_clock_mhz(self) -> float: ...

    def temperature_c(self) -> float: ...


class NvmlDevice:
    """``GpuDevice`` through NVML for the GPU behind ``handle``."""

    def __init__(self, nvml: ModuleType, handle: Any) -> None:
        self.nvml = nvml
        self.handle = handle

    def _read(self, fn: str, *args: Any) -> Any:
        nvml = self.nvml
        try:
            return getattr(nvml, fn)(self.handle, *args)
        except nvml.NVMLError_NotSupported as exc:
            raise NotSupported(str(exc)) from exc
        except nvml.NVMLError as exc:
            raise DeviceError(str(exc)) from exc

    def utilization(self) -> float:
        return float(self._read("nvmlDeviceGetUtilizationRates").gpu)

    def power_w(self) -> float:
        return self._read("nvmlDeviceGetPowerUsage") / 1000.0  # milliwatts

    def energy_j(self) -> float:
        return self._read("nvmlDeviceGetTotalEnergyConsumption") / 1000.0  # millijoules

    def memory_used_mib(self) -> float:
        return self._read("nvmlDeviceGetMemoryInfo").used / MIB

    def memory_total_mib(self) -> float:
        return self._read("nvmlDeviceGetMemoryInfo").total / MIB

    def sm_clock_mhz(self) -> float:
        return float(self._read("nvmlDeviceGetClockInfo", self.nvml.NVML_CLOCK_SM))

    def temperature_c(self) -> float:
        return float(self._read("nvmlDeviceGetTemperature", self.nvml.NVML_TEMPERATURE_GPU))
