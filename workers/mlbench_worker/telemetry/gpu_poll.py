"""The GPU's utilisation, power and energy counter polled every 50 ms, sent once per period.

NVML's utilisation is the share of its own short sample period in which a kernel ran, and power
is an instantaneous draw: read once a second, a 1.3 s training window holds one reading, which
may well be 0%. The poller reads them every ``POLL_S`` on a daemon thread of its own (a few NVML
calls, tens of microseconds, never on the training thread) and sends one aggregate per period of
at most ``PERIOD_S``: the mean utilisation and power over the period's readings, the energy
counter at its end and the number of readings (``sys/gpu_readings``). ``cut()`` ends a period
now; the runtime's reporter calls it at ``run_start``, ``goal_reached`` and ``run_stop``, so a
timed window holds whole periods and its figures rest on the readings taken inside it. MLPerf's
power rules ask for at least one reading a second: each period's mean power is one.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable

from mlbench_worker import sysmetrics as sm
from mlbench_worker.telemetry.gpu_device import DeviceError, GpuDevice, NotSupported

POLL_S = 0.05
PERIOD_S = 1.0

Report = Callable[[str, float, float], None]  # (name, value, t)


class GpuPoller:
    """Polls ``device``'s fast-changing values and reports one aggregate per period.

    ``clock`` stamps the reports (wall time, like every metric); ``monotonic`` and ``wait`` pace
    the schedule (a stop event's ``wait``): tests pass a fake clock and drive ``run`` directly.
    """

    def __init__(
        self,
        device: GpuDevice,
        report: Report,
        *,
        poll_s: float = POLL_S,
        period_s: float = PERIOD_S,
        clock: Callable[[], float] = time.time,
        log: Callable[[str], None] = lambda _: None,
    ) -> None:
        self.device = device
        self.report = report
        self.poll_s = poll_s
        self.period_s = period_s
        self.clock = clock
        self.log = log
        self.reads: dict[str, Callable[[], float]] = {
            sm.GPU_UTIL: device.utilization,
            sm.GPU_POWER_W: device.power_w,
            sm.GPU_ENERGY_J: device.energy_j,
        }
        self._lock = threading.Lock()
        self._sums: dict[str, float] = {}
        self._last_energy: float | None = None
        self._readings = 0
        self._failed = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll(self) -> None:
        """Take one reading of every supported value into the current period."""
        values: dict[str, float] = {}
        for name, read in list(self.reads.items()):
            try:
                values[name] = read()
            except NotSupported:
                self.reads.pop(name, None)  # this board has no such counter: not asked again
            except DeviceError as exc:
                if not self._failed:
                    self._failed = True
                    self.log(f"GPU reading failed: {exc} (skipped; said once)")
                return
        if not values:
            return
        with self._lock:
            self._readings += 1
            for name, value in values.items():
                if name == sm.GPU_ENERGY_J:
                    self._last_energy = value
                else:
                    self._sums[name] = self._sums.get(name, 0.0) + value

    def cut(self) -> list[tuple[str, float]]:
        """End the current period now: report its aggregate (nothing without readings)."""
        with self._lock:
            n, sums, energy = self._readings, self._sums, self._last_energy
            self._readings, self._sums, self._last_energy = 0, {}, None
            t = self.clock()
        if n == 0:
            return []
        out = [(name, total / n) for name, total in sums.items()]
        if energy is not None:
            out.append((sm.GPU_ENERGY_J, energy))
        out.append((sm.GPU_READINGS, float(n)))
        for name, value in out:
            self.report(name, value, t)
        return out

    def mark(self) -> None:
        """A boundary of the timed run: one last reading, then end the period here."""
        self.poll()
        self.cut()

    def run(
        self,
        stop: threading.Event,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        wait: Callable[[float], bool] | None = None,
    ) -> None:
        """Poll every ``poll_s`` and cut every ``period_s`` until ``stop`` is set, then cut the
        last period. A late wake-up (a busy or suspended process) skips the missed polls."""
        wait = wait or stop.wait
        now = monotonic()
        next_poll, next_cut = now, now + self.period_s
        while True:
            now = monotonic()
            if now >= next_poll:
                self.poll()
                next_poll = max(next_poll + self.poll_s, now)
            if now >= next_cut:
                self.cut()
                next_cut = max(next_cut + self.period_s, now)
            if wait(max(0.0, min(next_poll, next_cut) - monotonic())):
                break
        self.cut()

    def start(self, name: str = "mlbench-gpu-poll") -> GpuPoller:
        self._thread = threading.Thread(target=self._guarded, args=(self._stop,), name=name, daemon=True)
        self._thread.start()
        return self

    def _guarded(self, stop: threading.Event) -> None:
        try:
            self.run(stop)
        except Exception as exc:  # never take the rank down for its telemetry
            with contextlib.suppress(Exception):
                self.log(f"GPU polling stopped: {exc!r}")

    def stop(self, timeout: float = 5.0) -> None:
        """Stop polling; the last period is reported before this returns."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
