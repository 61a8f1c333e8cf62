"""The fast GPU poller and the sampler around it, on a fake GPU: the poll schedule, aggregates
that keep every reading, periods that end at the timed run's boundaries, and the figures and
MLPerf power log derived from what it sent."""

from __future__ import annotations

import threading
from itertools import pairwise
from pathlib import Path

import pytest
from mlbench_worker import sysmetrics as sm
from mlbench_worker.telemetry.gpu_device import DeviceError, NotSupported
from mlbench_worker.telemetry.gpu_poll import GpuPoller
from mlbench_worker.telemetry.sampler import SampledReporter, Sampler
from support.trainers import RecordingReporter

from mlbench_tui.results.power_log import power_logs
from mlbench_tui.results.telemetry import gpu_util_text, run_figures
from mlbench_tui.results.time_to_accuracy import EventRecord, MetricPoint


class FakeGpu:
    """A ``GpuDevice`` whose utilisation steps through 0, 10, ..., 90 and whose power is twice
    that; the energy counter rises by 1 J per reading. It keeps every value it handed out."""

    def __init__(self, *, energy: bool = True) -> None:
        self.utils: list[float] = []
        self.energy = energy
        self.counter = 5000.0
        self.fail_next = False
        self._lock = threading.Lock()

    def utilization(self) -> float:
        with self._lock:
            if self.fail_next:
                self.fail_next = False
                raise DeviceError("GPU is lost")
            self.utils.append(10.0 * (len(self.utils) % 10))
            return self.utils[-1]

    def power_w(self) -> float:
        return 2 * self.utils[-1] + 50.0

    def energy_j(self) -> float:
        if not self.energy:
            raise NotSupported("no counter on this board")
        self.counter += 1.0
        return self.counter

    def memory_used_mib(self) -> float:
        return 1024.0

    def memory_total_mib(self) -> float:
        return 80 * 1024.0

    def sm_clock_mhz(self) -> float:
        return 1980.0

    def temperature_c(self) -> float:
        return 41.0


class Clock:
    """A fake clock: ``wait`` moves time on and says stop once ``end`` is reached."""

    def __init__(self, end: float) -> None:
        self.now = 1000.0
        self.end = end

    def __call__(self) -> float:
        return self.now

    def wait(self, seconds: float) -> bool:
        self.now += seconds
        return self.now >= self.end


def _aggregates(sent: list[tuple[str, float, float]]) -> dict[float, dict[str, float]]:
    out: dict[float, dict[str, float]] = {}
    for name, value, t in sent:
        out.setdefault(t, {})[name] = value
    return out


def test_the_schedule_polls_every_period_and_every_reading_lands_in_one_aggregate() -> None:
    gpu, clock = FakeGpu(), Clock(end=1005.0)
    sent: list[tuple[str, float, float]] = []
    poller = GpuPoller(gpu, lambda n, v, t: sent.append((n, v, t)), poll_s=1 / 16, period_s=1.0, clock=clock)
    poller.run(threading.Event(), monotonic=clock, wait=clock.wait)
    periods = _aggregates(sent)
    times = sorted(periods)
    assert times == [1001.0, 1002.0, 1003.0, 1004.0, 1005.0]  # one aggregate a second, the last at stop
    # 16 polls a second; a poll due at a period's end falls in that period (the first also holds
    # the reading at its start, the last ends at stop, before its 16th poll)
    assert [periods[t][sm.GPU_READINGS] for t in times] == [17, 16, 16, 16, 15]
    # each aggregate is the mean of its own readings, in order; none lost, none counted twice
    assert sum(p[sm.GPU_READINGS] for p in periods.values()) == len(gpu.utils)
    start = 0
    for t in times:
        n = int(periods[t][sm.GPU_READINGS])
        mine = gpu.utils[start : start + n]
        assert periods[t][sm.GPU_UTIL] == pytest.approx(sum(mine) / n)
        assert periods[t][sm.GPU_POWER_W] == pytest.approx(2 * sum(mine) / n + 50)
        start += n
    assert periods[times[-1]][sm.GPU_ENERGY_J] == gpu.counter  # the counter at the period's end


def test_a_late_wake_up_skips_the_missed_polls_and_a_failed_read_is_skipped() -> None:
    gpu, clock = FakeGpu(energy=False), Clock(end=1010.0)
    sent: list[tuple[str, float, float]] = []
    logs: list[str] = []
    poller = GpuPoller(
        gpu, lambda n, v, t: sent.append((n, v, t)), poll_s=0.25, period_s=1.0, clock=clock, log=logs.append
    )
    jumped = [False]

    def wait(seconds: float) -> bool:
        if clock.now >= 1002.0 and not jumped[0]:  # the process was suspended for 5 s
            jumped[0] = True
            clock.now += 5.0
            gpu.fail_next = True
            return False
        return clock.wait(seconds)

    poller.run(threading.Event(), monotonic=clock, wait=wait)
    periods = _aggregates(sent)
    assert max(p[sm.GPU_READINGS] for p in periods.values()) <= 5  # no burst of catch-up polls
    assert sum(p[sm.GPU_READINGS] for p in periods.values()) == len(gpu.utils)
    assert all(sm.GPU_ENERGY_J not in p for p in periods.values())  # not supported: dropped
    assert logs == ["GPU reading failed: GPU is lost (skipped; said once)"]


def _timed_run(gpu: FakeGpu, polls_inside: int) -> tuple[list[MetricPoint], list[EventRecord]]:
    """Polls driven by hand around a timed run whose boundaries end the poller's periods."""
    clock = Clock(end=0.0)
    points: list[MetricPoint] = []
    poller = GpuPoller(gpu, lambda n, v, t: points.append(MetricPoint(n, v, rank=0, t=t)), clock=clock)
    events = []
    for _ in range(7):  # before the run: idle readings
        clock.now += 0.05
        poller.poll()
    poller.mark()
    events.append(EventRecord("run_start", {}, 0, clock.now))
    for i in range(polls_inside):
        clock.now += 0.05
        poller.poll()
        if i % 20 == 19:
            poller.cut()  # the poller's own one-second periods
    clock.now += 0.05
    poller.mark()
    events.append(EventRecord("run_stop", {"status": "success"}, 0, clock.now))
    for _ in range(5):  # after the run
        clock.now += 0.05
        poller.poll()
    poller.cut()
    return points, events


def test_the_timed_windows_figure_rests_on_the_readings_taken_inside_it() -> None:
    gpu = FakeGpu()
    points, events = _timed_run(gpu, polls_inside=99)
    inside = gpu.utils[8 : 8 + 100]  # 7 idle polls + the mark's, then 99 + the closing mark's
    figures = run_figures(points, events)
    assert figures is not None and figures.gpu_util_readings == 100
    assert figures.mean_gpu_util == pytest.approx(sum(inside) / len(inside))
    assert gpu_util_text(figures) == f"{sum(inside) / len(inside):.0f}%"
    # the MLPerf power log: one reading per period, never more than a second apart
    (log,) = power_logs(points, events).values()
    stamps = [
        float(line.split('"time_ms": ')[1].split(",")[0]) / 1000 for line in log if "power_reading" in line
    ]
    assert len(stamps) == 6 and all(b - a <= 1.0 + 1e-9 for a, b in pairwise(stamps))
    short, short_events = _timed_run(FakeGpu(), polls_inside=25)  # 1.3 s: 26 readings
    figures = run_figures(short, short_events)
    assert figures is not None and gpu_util_text(figures) == "n/a: 26 readings in 1.3 s"


def test_the_sampler_polls_a_found_gpu_and_the_reporter_marks_the_run(tmp_path: Path) -> None:
    gpu = FakeGpu()
    recorder = RecordingReporter()
    # a minute between samples: the sampler's thread has not looked for the GPU by run_start
    sampler = Sampler(recorder, 60.0, gpu=True, cgroup_root=tmp_path, gpu_device=gpu).start()
    reporter = SampledReporter(recorder, sampler)
    assert sampler.ready.wait(10) and sampler.poller is None
    reporter.event("run_start", {})  # looks for it now: the poller covers the whole timed run
    assert sampler.poller is not None
    reporter.metric("train_loss", 1.0, step=1)
    reporter.event("run_stop", {"status": "success"})
    reporter.close()
    sent = [(name, value) for name, value, _ in recorder.metrics]
    readings = sum(v for n, v in sent if n == sm.GPU_READINGS)
    assert readings == len(gpu.utils) >= 2  # at least the two marks' readings; every one sent
    assert [e for e, _ in recorder.events] == ["run_start", "run_stop"]
    names = {n for n, _ in sent}
    assert {sm.GPU_UTIL, sm.GPU_POWER_W, sm.GPU_ENERGY_J, sm.GPU_MEM_USED_MIB, sm.GPU_MEM_TOTAL_MIB} <= names
    assert names - {"train_loss"} <= set(sm.BY_NAME)
    assert [n for n, _ in sent].count(sm.GPU_MEM_TOTAL_MIB) == 1
