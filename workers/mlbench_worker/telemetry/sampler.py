"""Hardware telemetry of one rank, sampled on its own daemon thread and sent as ``sys/`` metrics.

Every ``interval`` seconds the sampler reads the rank's process and host (psutil) and the rank's
GPU (NVIDIA's NVML bindings, ``pynvml`` from ``nvidia-ml-py``; the framework's peak allocated
memory) and hands the values to the reporter, whose own thread ships them. The GPU's utilisation,
power and energy counter change faster than that: once the rank's GPU is found, a
``gpu_poll.GpuPoller`` reads them every 50 ms on a thread of its own and sends one aggregate per
second at most. The training thread never waits on either. Each library is imported lazily, in
the sampler's thread; when one is missing or cannot start (no driver), its series are "not
available": one log line, and the rest goes on.
The series and their units are listed in ``mlbench_worker.sysmetrics``.

``attach(reporter, config, rdv)`` is the runtime's hook: it starts the sampler and returns a
reporter whose ``close()`` takes a last sample and stops the sampler before closing the real one,
and whose ``run_start``, ``goal_reached`` and ``run_stop`` events end the poller's period there.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from mlbench_worker import rank_env, wire
from mlbench_worker import sysmetrics as sm
from mlbench_worker.telemetry.cgroup import cgroup_limits
from mlbench_worker.telemetry.gpu_device import DeviceError, GpuDevice, NotSupported, NvmlDevice
from mlbench_worker.telemetry.gpu_poll import PERIOD_S, GpuPoller

if TYPE_CHECKING:
    from mlbench_worker.config import WorkerConfig
    from mlbench_worker.context import ReporterLike
    from mlbench_worker.launch.rendezvous import Rendezvous

MIB = float(2**20)
Sample = list[tuple[str, float]]
# where a poller period ends: the timed run's boundaries
BOUNDARY_EVENTS = frozenset({wire.RunStart.KIND, wire.GoalReached.KIND, wire.RunStop.KIND})


def optional_import(name: str, what: str, log: Callable[[str], None]) -> ModuleType | None:
    """``import name``, or None after one log line saying which series are not available."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        log(f"{what} not available: {exc} (pip install 'mlbench-tui[worker]')")
        return None


class HostProbe:
    """The rank's process (CPU, resident memory), the host's available memory and network rates."""

    def __init__(self, psutil: ModuleType, pid: int | None = None) -> None:
        self.psutil = psutil
        self.process = psutil.Process(pid)
        self.process.cpu_percent(None)  # primes the counter: the next call covers the interval since
        self._net = self._net_counters()

    def _net_counters(self) -> tuple[float, int, int] | None:
        counters = self.psutil.net_io_counters()
        return None if counters is None else (time.monotonic(), counters.bytes_sent, counters.bytes_recv)

    def read(self) -> Sample:
        out: Sample = [
            (sm.CPU_PERCENT, self.process.cpu_percent(None)),
            (sm.RSS_MIB, self.process.memory_info().rss / MIB),
            (sm.HOST_MEM_AVAILABLE_MIB, self.psutil.virtual_memory().available / MIB),
        ]
        net, before = self._net_counters(), self._net
        if net is not None and before is not None and net[0] > before[0]:
            seconds = net[0] - before[0]
            # a counter that went down (an interface went away) gives no rate for this interval
            if net[1] >= before[1] and net[2] >= before[2]:
                out.append((sm.NET_SENT_MIB_S, (net[1] - before[1]) / MIB / seconds))
                out.append((sm.NET_RECV_MIB_S, (net[2] - before[2]) / MIB / seconds))
        self._net = net
        return out


class LinkProbe:
    """The rank's emulated link (``MLBENCH_LINK_INTERFACE``), read inside the node's namespace:
    the interface's byte counters and their rates over the last interval, in bits per second."""

    def __init__(self, psutil: ModuleType, interface: str) -> None:
        self.psutil = psutil
        self.interface = interface
        self._last = self._counters()

    def _counters(self) -> tuple[float, int, int] | None:
        counters = self.psutil.net_io_counters(pernic=True).get(self.interface)
        return None if counters is None else (time.monotonic(), counters.bytes_sent, counters.bytes_recv)

    def totals(self) -> Sample:
        """The byte counters alone (what a boundary of the timed run records)."""
        now = self._counters()
        return (
            [] if now is None else [(sm.LINK_SENT_BYTES, float(now[1])), (sm.LINK_RECV_BYTES, float(now[2]))]
        )

    def read(self) -> Sample:
        now, before = self._counters(), self._last
        self._last = now
        if now is None:
            return []
        out: Sample = [(sm.LINK_SENT_BYTES, float(now[1])), (sm.LINK_RECV_BYTES, float(now[2]))]
        if before is not None and now[0] > before[0] and now[1] >= before[1] and now[2] >= before[2]:
            seconds = now[0] - before[0]
            out.append((sm.LINK_SENT_MBIT_S, (now[1] - before[1]) * 8 / 1e6 / seconds))
            out.append((sm.LINK_RECV_MBIT_S, (now[2] - before[2]) * 8 / 1e6 / seconds))
        return out


class GpuProbe:
    """The rank's GPU (a ``GpuDevice``), and the framework's peak allocated memory on it.

    The GPU is the one the runtime placed the rank on (``mlbench_worker.devices.placement``: GPU
    ``LOCAL_RANK`` of the visible ones), found in NVML by torch's UUID of it once torch has
    initialised CUDA, else as the ``LOCAL_RANK``-th entry of ``CUDA_VISIBLE_DEVICES`` (TensorFlow
    ranks), else as NVML's device ``LOCAL_RANK``. The probe reads the slowly changing values at
    the sampler's interval (the poller reads the rest); a field the GPU does not support (MIG,
    older boards) is dropped for the rest of the run.
    """

    FIELDS: tuple[str, ...] = (sm.GPU_MEM_USED_MIB, sm.GPU_SM_CLOCK_MHZ, sm.GPU_TEMP_C)

    def __init__(
        self,
        nvml: ModuleType | None,
        local_rank: int,
        env: Mapping[str, str],
        log: Callable[[str], None],
        device: GpuDevice | None = None,
    ) -> None:
        self.nvml = nvml
        self.local_rank = local_rank
        self.env = env
        self.log = log
        self.device = device
        self.torch_index: int | None = local_rank if device is not None else None
        self.fields = list(self.FIELDS)
        self._failed = False
        self._sample_failed = False

    def _resolve(self) -> bool:
        torch = sys.modules.get("torch")
        cuda_up = torch is not None and torch.cuda.is_initialized()
        if torch is not None and not cuda_up and "tensorflow" not in sys.modules:
            return False  # a torch rank: wait until the runtime has picked its device
        nvml = self.nvml
        assert nvml is not None
        if cuda_up:
            assert torch is not None
            self.torch_index = self.local_rank
            uuid = str(torch.cuda.get_device_properties(self.local_rank).uuid)
            with contextlib.suppress(nvml.NVMLError):
                name = uuid if uuid[:4] in ("GPU-", "MIG-") else f"GPU-{uuid}"
                self.device = NvmlDevice(nvml, nvml.nvmlDeviceGetHandleByUUID(name))
                return True
        visible = [v.strip() for v in self.env.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
        if not visible:
            handle = nvml.nvmlDeviceGetHandleByIndex(self.local_rank)
        elif self.local_rank >= len(visible):
            raise nvml.NVMLError(nvml.NVML_ERROR_NOT_FOUND)  # placement refuses such a rank too
        elif visible[self.local_rank].isdigit():
            handle = nvml.nvmlDeviceGetHandleByIndex(int(visible[self.local_rank]))
        else:
            handle = nvml.nvmlDeviceGetHandleByUUID(visible[self.local_rank])
        self.device = NvmlDevice(nvml, handle)
        return True

    def find(self) -> bool:
        """Whether the GPU was found just now (then send ``once`` and start polling)."""
        if self.device is not None or self._failed or self.nvml is None:
            return False
        try:
            return self._resolve()
        except self.nvml.NVMLError as exc:
            self._failed = True
            self.log(f"GPU series not available: NVML cannot find this rank's GPU ({exc})")
            return False

    def once(self) -> Sample:
        """The GPU's total memory (sent once), when the GPU is known."""
        if self.device is None:
            return []
        with contextlib.suppress(NotSupported, DeviceError):
            return [(sm.GPU_MEM_TOTAL_MIB, self.device.memory_total_mib())]
        return []

    def read(self) -> Sample:
        """This sample's slowly changing GPU values (none until the GPU is known)."""
        device = self.device
        if device is None:
            return []
        reads = {
            sm.GPU_MEM_USED_MIB: device.memory_used_mib,
            sm.GPU_SM_CLOCK_MHZ: device.sm_clock_mhz,
            sm.GPU_TEMP_C: device.temperature_c,
        }
        out: Sample = []
        for name in list(self.fields):
            try:
                out.append((name, reads[name]()))
            except NotSupported:
                self.fields.remove(name)
            except DeviceError as exc:  # e.g. the GPU fell off the bus: skip this sample
                if not self._sample_failed:
                    self._sample_failed = True
                    self.log(f"GPU sample failed: {exc} (skipped; said once)")
                return out
        peak = self._framework_peak()
        if peak is not None:
            out.append((sm.GPU_MEM_PEAK_MIB, peak / MIB))
        return out

    def _framework_peak(self) -> float | None:
        """Peak bytes the framework allocated on the GPU (torch or TensorFlow), if one runs on it."""
        torch = sys.modules.get("torch")
        if torch is not None and self.torch_index is not None and torch.cuda.is_initialized():
            return float(torch.cuda.max_memory_allocated(self.torch_index))
        tf = sys.modules.get("tensorflow")
        if tf is not None:
            with contextlib.suppress(Exception):  # no GPU visible to TensorFlow, or not started yet
                return float(tf.config.experimental.get_memory_info("GPU:0")["peak"])
        return None


class Sampler:
    """Samples the probes every ``interval`` seconds on a daemon thread and reports the values."""

    def __init__(
        self,
        reporter: ReporterLike,
        interval: float,
        *,
        gpu: bool,
        local_rank: int = 0,
        rank: int = 0,
        env: Mapping[str, str] | None = None,
        cgroup_root: Path = Path("/sys/fs/cgroup"),
        gpu_device: GpuDevice | None = None,
    ) -> None:
        self.reporter = reporter
        self.interval = interval
        self.want_gpu = gpu
        self.local_rank = local_rank
        self.rank = rank
        self.env = os.environ if env is None else env
        self.cgroup_root = cgroup_root
        self.host: HostProbe | None = None
        self.link: LinkProbe | None = None
        self.gpu: GpuProbe | None = None
        self.gpu_device = gpu_device  # the rank's GPU given, instead of found through NVML
        self.poller: GpuPoller | None = None
        self._poller_lock = threading.Lock()
        self.ready = threading.Event()  # set once setup is done (the libraries are loaded)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"mlbench-telemetry-{rank}", daemon=True)

    def log(self, message: str) -> None:
        """One line on the rank's stderr (the executor keeps it with the rank's log)."""
        with contextlib.suppress(Exception):
            print(f"[rank {self.rank}] telemetry: {message}", file=sys.stderr, flush=True)

    def setup(self) -> None:
        """Import and start the libraries, prime the counters, report the ``once`` series."""
        psutil = optional_import("psutil", "CPU, memory and network series (psutil)", self.log)
        if psutil is not None:
            self.host = HostProbe(psutil)
            link = self.env.get(rank_env.LINK_INTERFACE)
            if link:
                self.link = LinkProbe(psutil, link)
        if self.gpu_device is not None:
            self.gpu = GpuProbe(None, self.local_rank, self.env, self.log, device=self.gpu_device)
        elif self.want_gpu:
            nvml = optional_import("pynvml", "GPU series (NVIDIA's nvidia-ml-py)", self.log)
            if nvml is not None:
                try:
                    nvml.nvmlInit()
                    self.gpu = GpuProbe(nvml, self.local_rank, self.env, self.log)
                except nvml.NVMLError as exc:
                    self.log(f"GPU series not available: NVML did not start ({exc})")
        limits = cgroup_limits(root=self.cgroup_root)
        once: Sample = []
        if limits.memory_bytes is not None:
            once.append((sm.MEM_LIMIT_MIB, limits.memory_bytes / MIB))
        if limits.cpu_cores is not None:
            once.append((sm.CPU_LIMIT_CORES, limits.cpu_cores))
        self._report(once, time.time())

    def sample(self) -> Sample:
        """Read every available probe once and report the values; returns them."""
        now = time.time()
        out: Sample = []
        if self.host is not None:
            out.extend(self.host.read())
        if self.link is not None:
            out.extend(self.link.read())
        if self.gpu is not None:
            if self._start_polling():
                out.extend(self.gpu.once())
            out.extend(self.gpu.read())
        self._report(out, now)
        return out

    def _start_polling(self) -> bool:
        """Find the rank's GPU and start its poller, once; True when it started just now."""
        with self._poller_lock:
            if self.gpu is None or self.poller is not None:
                return False
            self.gpu.find()
            if self.gpu.device is None:
                return False
            self.poller = GpuPoller(
                self.gpu.device,
                lambda name, value, t: self.reporter.metric(name, value, t=t),
                period_s=min(PERIOD_S, self.interval),
                log=self.log,
            ).start(name=f"mlbench-gpu-poll-{self.rank}")
            return True

    def mark(self) -> None:
        """A boundary of the timed run (``run_start``, ``goal_reached``, ``run_stop``): the GPU
        poller's period ends here, so the window's figures rest on readings taken inside it. At
        ``run_start`` the GPU may not have been looked for yet (the sampler looks once per
        interval): it is looked for now, so polling covers the whole timed run."""
        if not self.ready.is_set():
            return  # the libraries are still loading on the sampler's thread
        if self.link is not None:  # the link's bytes at the boundary itself, not up to a second off
            with contextlib.suppress(Exception):
                self._report(self.link.totals(), time.time())
        with contextlib.suppress(Exception):
            if self.poller is None and self._start_polling() and self.gpu is not None:
                self._report(self.gpu.once(), time.time())
            if self.poller is not None:
                self.poller.mark()

    def _report(self, values: Sample, t: float) -> None:
        for name, value in values:
            self.reporter.metric(name, value, t=t)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Take a last sample (so peaks and energy reach the end of the run) and stop the thread."""
        self._stop.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        try:
            self.setup()
        except Exception as exc:  # never take the rank down for its telemetry
            self.log(f"not available: {exc!r}")
            return
        finally:
            self.ready.set()
        deadline = time.monotonic()
        failed = False
        while True:
            deadline += self.interval
            stopping = self._stop.wait(max(0.0, deadline - time.monotonic()))
            if stopping and self.poller is not None:
                self.poller.stop()  # its last period goes out before the last sample
            try:
                self.sample()
            except Exception as exc:
                if not failed:  # said once: a broken probe must not fill the rank's log
                    self.log(f"sample failed: {exc!r}")
                failed = True
            if stopping:
                break
            if time.monotonic() > deadline + self.interval:  # fell behind (a suspended process)
                deadline = time.monotonic()
        if self.gpu is not None and self.gpu.nvml is not None:
            with contextlib.suppress(Exception):
                self.gpu.nvml.nvmlShutdown()


class SampledReporter:
    """A reporter that closes its sampler first, so the last sample still goes out, and ends the
    GPU poller's period at the timed run's boundaries. ``metric``, ``log`` and ``flush`` are the
    inner reporter's own bound methods: the training thread's calls pay no extra hop."""

    def __init__(self, inner: ReporterLike, sampler: Sampler) -> None:
        self.inner = inner
        self.sampler = sampler
        self.metric = inner.metric
        self.log = inner.log
        self.flush = inner.flush

    def event(self, kind: str, payload: dict[str, Any]) -> None:
        if kind in BOUNDARY_EVENTS:
            self.sampler.mark()
        self.inner.event(kind, payload)

    def close(self, timeout: float = 10.0) -> None:
        self.sampler.stop(min(timeout, 5.0))
        self.inner.close(timeout)


def attach(reporter: ReporterLike, config: WorkerConfig, rdv: Rendezvous) -> ReporterLike:
    """Start this rank's sampler as the config asks; the reporter to use from now on."""
    if config.telemetry_interval_s is None:
        return reporter
    sampler = Sampler(
        reporter,
        config.telemetry_interval_s,
        gpu=config.device == "cuda",
        local_rank=rdv.local_rank,
        rank=rdv.rank,
    )
    return SampledReporter(reporter, sampler.start())
